"""The training loop: epochs of bucketed batches, a resume point every few minutes and at every
epoch's end, validation, the best checkpoint, early stopping, the wall-clock budget, and the stop
signals (Ctrl-C, a scheduler's SIGTERM or SIGUSR1: a resume point at the next step boundary).

Validation: at every epoch's end, or with `train.validate_every` every that many updates and
once more at the end, wherever the epochs end (a corpus whose epoch outlasts the budget); each
validation is one metrics record, one checkpoint (epoch_NNN or step_NNNNNN) and one count of
`train.patience`.

Batches: each epoch's plan (which pairs go together, in what order) comes from the pairs'
lengths alone (`mtx.data.plan`: about 4 bytes a pair), and each batch is collated just before it
is needed (`prefetched`), so memory grows with the corpus only by the plan. Determinism: epoch
e's batch order comes from `epoch_seed`, and dropout is reseeded after every step
(`position_seed`), so every step boundary can be a resume point: a run resumed from any
checkpoint reaches the parameters of the uninterrupted run (CPU, fixed seed); with a
`train.cooldown` of `train.max_minutes`, up to the clock the learning rate then reads.
"""
import contextlib
import logging

import numpy as onp

from ..runs import faults
from ..data.batching import prefetched
from .checkpointing import Checkpointing
from .control import Clock, StopSignals, budget_fraction, budget_spent
from .epoch_log import EpochLog
from .state import TrainState, epoch_seed
from .steps import evaluate, train_step
from .validation import Validation

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
        self.validation = Validation(self)

    @property
    def model(self):
        return self.pieces.model

    def restore(self):
        """Continue from the newest intact checkpoint (the same on every worker); True if any."""
        state = self.checkpointing.restore(self.parallel)
        if self.parallel.is_chief:  # the records of what is trained again go
            kept = state or TrainState()
            self.run_dir.records.keep_until(kept.step, kept.metrics_kept)
        if state is not None:
            self.state, self.clock = state, Clock(self.cfg.train.max_minutes, state.minutes)
        return state is not None

    def train_epoch(self):
        """The rest of the current epoch; False when the wall-clock budget or an early stop (at a
        validation of `train.validate_every`) cut it short."""
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
                validated = self.validation.due()
                if validated and self.validation.in_epoch(epoch_log):
                    break  # early stop
                at_log_point = (state.batch_in_epoch % cfg.log_every == 0
                                and state.batch_in_epoch < len(plan))
                if at_log_point:
                    epoch_log.log_point()
                    epoch_log.budget_spent = spent()
                if self.stop_signals.requested(parallel, at_log_point or validated):
                    epoch_log.record()
                    self.stop_here(saved=validated)
                if at_log_point:
                    if parallel.any(self.clock.out_of_time()):
                        break  # no resume point past the budget: a resume redoes the epoch's end
                    if not validated:  # else the validation's checkpoint is the resume point
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
        """Epochs, each followed by what `Validation.after_epoch` does; with
        `train.validate_every`, a validation at the end when the last update had none."""
        if not self.finished_before():
            while self.state.epoch < self.cfg.train.max_epochs:
                if self.validation.after_epoch(self.train_epoch()):
                    break
        self.validation.at_end()
        return self.clock.minutes()

    def finished_before(self):
        """Was the run resumed after its budget was spent or after an early stop (nothing to
        train)?"""
        state = self.state
        if state.step and self.parallel.any(self.clock.out_of_time(state.minutes)):
            return True
        return self.parallel.any(state.early_stopped(self.cfg.train.patience))
