"""The training loop: epochs of bucketed batches, a resume point every few minutes and at every
epoch's end, validation, the best checkpoint, early stopping, the wall-clock budget, and the stop
signals (Ctrl-C, a scheduler's SIGTERM or SIGUSR1: a resume point at the next step boundary).

Batches: each epoch's plan (which pairs go together, in what order) comes from the pairs'
lengths alone, and each batch is collated just before it is needed (`prefetched`), so memory
does not grow with the corpus. Determinism: epoch e's batch order comes from `epoch_seed`, and
dropout is reseeded after every step (`position_seed`), so every step boundary can be a resume
point: a run resumed from any checkpoint reaches the parameters of the uninterrupted run (CPU,
fixed seed); with a `train.cooldown` of `train.max_minutes`, up to the clock the learning rate
then reads.
"""
import contextlib
import logging
import time

import numpy as onp
from tqdm import tqdm

from ..runs import faults
from ..data.batching import prefetched
from ..hardware.devices import seed_everything
from .schedule import learning_rate
from .checkpointing import Checkpointing
from .control import Clock, StopSignals, budget_fraction, budget_spent
from .state import TrainState, epoch_seed, position_seed
from .steps import LossMeter, evaluate, train_step

log = logging.getLogger(__name__)


class Fit:
    """Trains ``pieces`` (`build.Pieces`) on ``corpus`` into the `RunDir` ``run`` (written by
    the chief worker only) as the `RunConfig` ``cfg`` says; ``state`` is everything resume
    needs."""

    def __init__(self, pieces, corpus, train_pairs, cfg, run, parallel):
        """``train_pairs``: the `TrainingPairs` to train on."""
        self.pieces, self.corpus, self.train_pairs = pieces, corpus, train_pairs
        self.cfg, self.run_dir, self.parallel = cfg, run, parallel
        self.state = TrainState()
        self.times_seen = onp.zeros(len(train_pairs), "int64")  # per training pair, here
        self.checkpointing = Checkpointing(run, pieces, cfg.train)
        self.clock, self.stop_signals = Clock(cfg.train.max_minutes), StopSignals()

    @property
    def model(self):
        return self.pieces.model

    def restore(self):
        """Continue from the newest intact checkpoint (the same on every worker); True if any."""
        state = self.checkpointing.restore(self.parallel)
        if self.parallel.is_chief:  # the records of what is trained again go
            self.run_dir.records.keep_until(*((state.epoch, state.step) if state else (0, 0)))
        if state is not None:
            self.state, self.clock = state, Clock(self.cfg.train.max_minutes, state.minutes)
        return state is not None

    def train_epoch(self):
        """The rest of the current epoch; False when the wall-clock budget cut it short."""
        state, cfg, parallel, finished = self.state, self.cfg.train, self.parallel, False
        seed = epoch_seed(self.cfg.seed, state.epoch)
        if state.epoch_resegmented is None:
            state.epoch_resegmented = self.train_pairs.resegmented_at(
                budget_fraction(cfg, state, self.clock, parallel, 1))
        pairs = self.train_pairs.for_epoch(seed, state.epoch_resegmented)
        plan = self.train_pairs.plan(pairs, cfg.batch_tokens, seed)
        records = self.run_dir.records if parallel.is_chief else None
        with EpochLog(state, cfg, self.clock, records, len(plan), self.cfg.seed) as epoch_log, \
                contextlib.closing(prefetched(pairs, plan[state.batch_in_epoch:])) as batches:
            spent = lambda: budget_spent(cfg, state, self.clock, parallel, len(plan))
            epoch_log.budget_spent = spent()
            for batch in batches:
                state.step += 1
                epoch_log.add(train_step(self.pieces, parallel, batch, state.step, cfg,
                                         self.times_seen, epoch_log.budget_spent),
                              batch.num_tgt_tokens)
                faults.point("step")
                at_log_point = (state.batch_in_epoch % cfg.log_every == 0
                                and state.batch_in_epoch < len(plan))
                if at_log_point:
                    epoch_log.log_point()
                    epoch_log.budget_spent = spent()
                if self.stop_signals.requested(parallel, at_log_point):
                    epoch_log.record()
                    self.stop_here(saved=False)
                if at_log_point:
                    if parallel.any(self.clock.out_of_time()):
                        break  # no resume point past the budget: a resume redoes the epoch's end
                    self.checkpointing.at_log_point(state, self.clock.minutes(), parallel)
                elif not parallel.distributed and self.clock.out_of_time():
                    break  # one process: the budget is checked after every step
            else:
                finished = True
            epoch_log.record()
        if state.epoch_skipped:
            log.warning("epoch %d: %d steps had a non-finite loss; their updates were skipped",
                        state.epoch + 1, state.epoch_skipped)
        return finished

    def evaluate(self, split):
        """(mean per-token nll on ``split``, its greedy sacreBLEU or None)."""
        return evaluate(self.pieces, self.corpus, split, self.cfg.train, self.cfg.decode,
                        self.cfg.data)

    def end_of_epoch(self):
        """Validate (the weights' moving average, if kept), record and checkpoint the epoch."""
        state, ema = self.state, self.pieces.ema
        with ema.applied() if ema is not None else contextlib.nullcontext():
            val_loss, bleu = self.evaluate("val")
        record, improved = state.end_epoch(val_loss, bleu, self.clock.minutes())
        self.run_dir.records.append_metrics(record)  # before the checkpoint: a redo drops it
        state.start_epoch()
        state.minutes = self.clock.minutes()
        self.checkpointing.epoch_end(state, record["valid/bleu"], improved)
        log_epoch(record)

    def run(self):
        """Train until the budget, max_epochs or early stopping; returns the minutes trained. A stop
        signal saves a resume point at the next step boundary, then raises (`stop_here`)."""
        try:
            with self.stop_signals:
                return self._run()
        finally:
            self.run_dir.records.close()  # flushed whatever ends the run

    def stop_here(self, saved=True):
        """Stop at this step boundary: a resume point (rank 0 writes it, unless ``saved``
        already is one), then the signal's exception naming how to continue."""
        if self.parallel.is_chief and not saved:
            self.state.minutes = self.clock.minutes()
            self.checkpointing.resume_point(self.state)
        self.stop_signals.stop(f"step {self.state.step} is saved; train.resume=true "
                               f"hydra.run.dir={self.run_dir.path} continues the run")

    def _run(self):
        """Epochs; one cut short by the budget ends like any other (validated, checkpointed)."""
        state, patience = self.state, self.cfg.train.patience
        if state.step and self.parallel.any(self.clock.out_of_time(state.minutes)):
            return self.clock.minutes()  # resumed after the budget was spent: nothing to train
        if self.parallel.any(state.early_stopped(patience)):
            return self.clock.minutes()  # resumed after an early stop: nothing to train
        while state.epoch < self.cfg.train.max_epochs:
            cut_short = not self.train_epoch()
            state.epoch += 1
            if self.parallel.is_chief:  # evaluation and checkpoints: rank 0 only
                self.end_of_epoch()
            state.start_epoch()
            if self.stop_signals.requested(self.parallel):
                self.stop_here()  # the epoch's checkpoint is the resume point
            stop = stop_reason(state, self.cfg.train, self.clock, self.parallel.is_chief,
                               cut_short)
            if self.parallel.any(stop is not None):  # all workers stop after the same epoch
                log.info("%s", stop or "another worker stopped the job")
                break
        return self.clock.minutes()


def log_epoch(record):
    """One line for the epoch that ended (its `TrainState.end_epoch` record)."""
    log.info("epoch %d step %d train loss %.3f val loss %.3f val BLEU %s tok/s %.0f (%.1f min)",
             *(record[k] for k in ("epoch", "step", "train/loss", "valid/loss", "valid/bleu",
                                   "train/tok_s", "wall_minutes")))


def stop_reason(state, train_cfg, clock, is_chief, cut_short):
    """Why training stops after the epoch that just ended (``state`` ready for the next one), or
    None: the budget (``cut_short``: it ran out inside the epoch; else the chief decides on the
    minutes its checkpoint recorded, as a resume does), or early stopping (the chief's, which
    validated)."""
    if cut_short or (is_chief and clock.out_of_time(state.minutes)):
        return f"train.max_minutes={train_cfg.max_minutes} reached after {state.epoch} epochs"
    if is_chief and state.early_stopped(train_cfg.patience):
        return f"no better validation score for {state.stale_epochs} epochs: early stop"
    return None


class EpochLog:
    """One epoch's bookkeeping, used as ``with``: its steps' losses (`LossMeter`, read from the
    device only at log points and the end: the loop's only device->host reads), the seconds
    trained, the step records (into ``records``, a `RunRecords`, or None on workers other than
    the chief, which also show no progress bar) and dropout, reseeded where the epoch starts
    (or resumes) and after every step."""

    def __init__(self, state, train_cfg, clock, records, num_batches, seed):
        self.state, self.train_cfg, self.clock, self.records = state, train_cfg, clock, records
        self.seed, self.meter = seed, LossMeter(state, train_cfg.max_nonfinite_steps)
        self.budget_spent = 0.0  # what the steps' learning rate reads (`control.budget_spent`)
        self.bar = tqdm(total=num_batches, initial=state.batch_in_epoch, leave=False,
                        mininterval=2, desc=f"epoch {state.epoch + 1}", dynamic_ncols=True,
                        disable=records is None)
        self.reseed()
        self.tic = time.time()

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
