"""TensorBoard event files of a run, written with tensorboardX into the run directory itself:
one TensorBoard run per run directory, named after its folder, so `tensorboard --logdir
outputs/` shows every run of a sweep side by side. They are written by the training's own
thread (tensorboardX's `EventsWriter`, not its `SummaryWriter`, whose writing thread would die
on a full disk with a traceback and then block training once its queue filled), flushed every
`FLUSH_SECONDS`.

The events mirror the run's records (`mtx.runs.records.RunRecords`): each number under a metric key (one
with a split: ``train/...``, ``valid/...``) becomes a scalar at the record's step. Step records
(steps.jsonl) give train/loss, train/lr and train/tok_s; epoch records (metrics.jsonl) give
valid/loss and valid/bleu, and their train/* keys as train/epoch_* (one series per tag).

Opening the log deletes the run directory's event files and writes the records kept so far
again: after a resume each step shows once, and points that a kill -9 left unflushed come back.
The event files are a view, never needed to train or resume: without tensorboardX, or when
writing fails, one warning is logged and training goes on without them.
"""
import logging
import time
from pathlib import Path

from ..typecheck import is_number

log = logging.getLogger(__name__)

EVENT_FILES = "events.out.tfevents.*"  # the names tensorboardX gives its files
FLUSH_SECONDS = 30                     # how far behind the training a live TensorBoard may be
_missing_reported = []                 # warn about a missing tensorboardX once per process


def scalars(record, epoch=False):
    """(tag, value) of ``record``'s numbers under metric keys; an ``epoch`` record's train/x is
    tagged train/epoch_x."""
    for key, value in record.items():
        if "/" not in key or not is_number(value):
            continue
        split, name = key.split("/", 1)
        yield (f"{split}/epoch_{name}" if epoch and split == "train" else key), float(value)


class EventLog:
    """The event file of the run directory ``path``, started anew with ``records``, (record,
    is an epoch record) pairs: the records the run keeps so far."""

    def __init__(self, path, records=()):
        self.path, self.writer, self.flushed = Path(path), None, time.monotonic()
        try:
            from tensorboardX import event_file_writer
            from tensorboardX.proto.event_pb2 import Event, SessionLog
            from tensorboardX.proto.summary_pb2 import Summary
        except ImportError:
            if not _missing_reported:
                _missing_reported.append(True)
                log.warning("tensorboardX is not installed: no TensorBoard event files "
                            "(pip install 'tensorboardX>=2.6'); the records are in steps.jsonl "
                            "and metrics.jsonl")
            return
        self.protos = Event, Summary
        try:
            for old in self.path.glob(EVENT_FILES):
                old.unlink()
            self.writer = event_file_writer.EventsWriter(str(self.path / "events"))
            # a session start at step 0: a TensorBoard that read the deleted files forgets them
            self.writer.write_event(Event(step=0, wall_time=time.time(),
                                          session_log=SessionLog(status=SessionLog.START)))
            for record, epoch in sorted(records, key=lambda pair: pair[0]["step"]):
                self._write(record, epoch)
        except Exception as err:  # an OSError, a protobuf error: the view is not worth a run
            self._fail(err)

    def add(self, record, epoch=False):
        """One more record (after the ones before it)."""
        if self.writer is not None:
            try:
                self._write(record, epoch)
                if time.monotonic() - self.flushed >= FLUSH_SECONDS:
                    self.writer.flush()
                    self.flushed = time.monotonic()
            except Exception as err:
                self._fail(err)

    def close(self):
        """Flush and close the file (nothing more is written; safe to call again)."""
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception as err:
                self._fail(err)

    def _write(self, record, epoch):
        event, summary = self.protos
        for tag, value in scalars(record, epoch):
            self.writer.write_event(event(
                step=record["step"], wall_time=time.time(),
                summary=summary(value=[summary.Value(tag=tag, simple_value=value)])))

    def _fail(self, err):
        log.warning("TensorBoard events in %s stop here (%s: %s); the records are in "
                    "steps.jsonl and metrics.jsonl", self.path, type(err).__name__, err)
        writer, self.writer = self.writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception:
                pass
