"""An epoch's bookkeeping for the training loop (`mtx.training.loop`): the steps' losses read
from the device, the step records, the progress bar, the sums since the last validation and the
dropout seed of every step boundary."""
import time

from tqdm import tqdm

from ..hardware.devices import seed_everything
from .schedule import learning_rate
from .state import position_seed
from .steps import LossMeter


class EpochLog:
    """One epoch's bookkeeping, used as ``with``: its steps' losses (`LossMeter`, read from the
    device only at log points and the end: the loop's only device->host reads), the seconds
    trained, the step records (into ``records``, a `RunRecords`, or None on workers other than
    the chief, which also show no progress bar), the sums since the last validation (at each
    record) and dropout, reseeded where the epoch starts (or resumes) and after every step."""

    def __init__(self, state, train_cfg, clock, records, num_batches, seed):
        self.state, self.train_cfg, self.clock, self.records = state, train_cfg, clock, records
        self.seed, self.meter = seed, LossMeter(state, train_cfg.max_nonfinite_steps)
        self.budget_spent = 0.0  # what the steps' learning rate reads (`control.budget_spent`)
        self.bar = tqdm(total=num_batches, initial=state.batch_in_epoch, leave=False,
                        mininterval=2, desc=f"epoch {state.epoch + 1}", dynamic_ncols=True,
                        disable=records is None)
        self.reseed()
        self.tic = time.time()
        self.counted = state.epoch_totals()  # the epoch's sums already in the interval's

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.bar.close()

    def reseed(self):
        """Dropout from here on (`position_seed`): the same in a run resumed here."""
        state = self.state
        seed_everything(position_seed(self.seed, state.epoch, state.batch_in_epoch))

    def add(self, step_result, tokens):
        """A queued step (`train_step`'s result) on a batch of ``tokens`` target tokens."""
        self.meter.add(*step_result)
        self.state.batch_in_epoch += 1
        self.state.epoch_job_tokens += tokens
        self.bar.update()
        self.reseed()

    def record(self):
        """Read the queued losses and record the steps since the last record (steps.jsonl,
        TensorBoard): before this point's checkpoint, so a kill between the two leaves a record
        that the resume redoes."""
        state, cfg = self.state, self.train_cfg
        self.meter.flush()
        state.epoch_seconds += time.time() - self.tic
        self.tic = time.time()
        state.count_interval(self.counted)
        self.counted = state.epoch_totals()
        record = self.meter.record(learning_rate(state.step, cfg, self.budget_spent),
                                   self.clock.minutes())
        if record and self.records is not None:
            self.records.append_step(record)

    def log_point(self):
        """Every `train.log_every` batches: record the steps and show them."""
        self.record()
        state = self.state
        self.bar.set_postfix(loss=f"{state.epoch_loss:.3f}",
                             tok_s=f"{state.epoch_job_tokens / state.epoch_seconds:.0f}")
