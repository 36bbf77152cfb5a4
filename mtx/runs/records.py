"""A run's records: ``metrics.jsonl`` (one record per validation), ``steps.jsonl`` (one per log
point and epoch end: the loss, learning rate and tokens/s of the steps since the record before)
and TensorBoard's view of both (``events.out.tfevents.*``, `mtx.runs.tensorboard`). Each file is
appended to; after a resume the records of what is trained again are dropped (`keep_until`)."""
import json
from pathlib import Path

from .checkpoints import RESUME_HINT
from ..errors import CheckpointError
from ..files import append_line, atomic_write_text, read_json_lines
from .tensorboard import EventLog


class RunRecords:
    """The records of the run directory ``path``."""

    def __init__(self, path):
        self.path = Path(path)
        self.events = None  # the TensorBoard event log, opened by the first record written

    def append_metrics(self, record):
        """A validation's record (metrics.jsonl, and TensorBoard)."""
        events = self.event_log()
        append_line(self.path / "metrics.jsonl", json.dumps(record), RESUME_HINT)
        events.add(record, epoch=True)

    def metrics(self):
        return read_json_lines(self.path / "metrics.jsonl", CheckpointError)

    def append_step(self, record):
        """A log point's record (steps.jsonl, and TensorBoard)."""
        events = self.event_log()
        append_line(self.path / "steps.jsonl", json.dumps(record), RESUME_HINT)
        events.add(record)

    def steps(self):
        return read_json_lines(self.path / "steps.jsonl", CheckpointError)

    def keep_until(self, step, metrics_kept):
        """Drop the records of steps after ``step`` and the metrics records ``metrics_kept``
        (a predicate, `TrainState.metrics_kept`) refuses: they are being redone after a resume;
        the TensorBoard events start anew from those kept."""
        self.close()
        for name, kept in (("metrics.jsonl", [r for r in self.metrics() if metrics_kept(r)]),
                           ("steps.jsonl", [r for r in self.steps() if r["step"] <= step])):
            atomic_write_text(self.path / name, "".join(json.dumps(r) + "\n" for r in kept),
                              RESUME_HINT)
        self.event_log()

    def event_log(self):
        """The open TensorBoard event log (`mtx.runs.tensorboard`), started with the records kept."""
        if self.events is None:
            self.events = EventLog(self.path, [(r, False) for r in self.steps()]
                                   + [(r, True) for r in self.metrics()])
        return self.events

    def close(self):
        """Flush and close the TensorBoard event file (a later record opens it again)."""
        if self.events is not None:
            self.events.close()
            self.events = None
