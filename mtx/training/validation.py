"""Validation during training and what follows an epoch: a validation at every epoch's end, or
with `train.validate_every` every that many updates and once more at the end (a corpus whose
epoch outlasts the budget); each is one metrics record, one checkpoint (epoch_NNN or
step_NNNNNN) and one count of `train.patience`. Validation, records and checkpoints: rank 0
only; every worker agrees on when training stops."""
import contextlib
import logging

from .checkpointing import validated_name

log = logging.getLogger(__name__)


class Validation:
    """The validations of a `mtx.training.loop.Fit` ``fit``."""

    def __init__(self, fit):
        self.fit = fit
        self.by_updates = bool(fit.cfg.train.validate_every)
        self.stopped = None  # why a validation inside an epoch stopped training early

    def due(self):
        """Does a validation of `train.validate_every` follow the step just taken?"""
        every = self.fit.cfg.train.validate_every
        return bool(every) and self.fit.state.step % every == 0

    def validate(self):
        """Validate (the weights' moving average, if kept), record and checkpoint (rank 0):
        at an epoch's end, or with `train.validate_every` at this step."""
        fit, state = self.fit, self.fit.state
        ema = fit.pieces.ema
        with ema.applied() if ema is not None else contextlib.nullcontext():
            val_loss, bleu = fit.evaluate("val")
        end = state.end_interval if self.by_updates else state.end_epoch
        record, improved = end(val_loss, bleu, fit.clock.minutes())
        fit.run_dir.records.append_metrics(record)  # before the checkpoint: a redo drops it
        if not self.by_updates:
            state.start_epoch()
        state.minutes = fit.clock.minutes()
        fit.checkpointing.validated(state, validated_name(state, self.by_updates),
                                    record["valid/bleu"], improved)
        log_validation(record, self.by_updates)

    def in_epoch(self, epoch_log):
        """A validation of `train.validate_every` between two steps of an epoch (`validate`,
        rank 0); True when it stops training early (every worker agrees)."""
        fit, state = self.fit, self.fit.state
        epoch_log.record()
        if fit.parallel.is_chief:
            self.validate()
        epoch_log.reseed()  # the next step's dropout, as in a run resumed here
        stop = fit.parallel.is_chief and state.early_stopped(fit.cfg.train.patience)
        if fit.parallel.any(stop):
            self.stopped = (f"no better validation score for {state.stale_validations} "
                            f"validations: early stop" if stop
                            else "another worker stopped the job")
            return True
        return False

    def at_end(self):
        """With `train.validate_every`: the end's validation, when the last update had none."""
        state = self.fit.state
        if self.by_updates and state.step != state.validated_step and self.fit.parallel.is_chief:
            self.validate()

    def after_epoch(self, finished):
        """After `Fit.train_epoch` (``finished``, or cut short): True when training stops."""
        return self._passed(finished) if self.by_updates else self._ended(finished)

    def _ended(self, finished):
        """An epoch ended (cut short by the budget: like any other): its validation."""
        fit, state = self.fit, self.fit.state
        state.epoch += 1
        if fit.parallel.is_chief:  # evaluation and checkpoints: rank 0 only
            self.validate()
        state.start_epoch()
        return self._stops(not finished)

    def _passed(self, finished):
        """With `train.validate_every`: after an epoch's last step, a resume point (no
        validation); True when training stops here (the budget, an early stop inside the
        epoch)."""
        fit, state = self.fit, self.fit.state
        if not finished:
            log.info("%s", self.stopped or f"train.max_minutes={fit.cfg.train.max_minutes} "
                                           f"reached in epoch {state.epoch + 1}")
            return True
        state.epoch += 1
        state.start_epoch()
        log.info("epoch %d ended at step %d", state.epoch, state.step)
        if fit.parallel.is_chief:
            state.minutes = fit.clock.minutes()
            fit.checkpointing.resume_point(state)
        return self._stops(False)

    def _stops(self, cut_short):
        """After an epoch and its checkpoint (the resume point of a stop signal): True when
        training stops (`stop_reason`; all workers stop after the same epoch)."""
        fit = self.fit
        if fit.stop_signals.requested(fit.parallel):
            fit.stop_here()
        stop = stop_reason(fit.state, fit.cfg.train, fit.clock, fit.parallel.is_chief,
                           cut_short)
        if fit.parallel.any(stop is not None):
            log.info("%s", stop or "another worker stopped the job")
            return True
        return False


def log_validation(record, by_updates):
    """One line for a validation (its `TrainState.end_epoch` or `end_interval` record)."""
    where = (f"step {record['step']} (epoch {record['epoch']})" if by_updates
             else f"epoch {record['epoch']} step {record['step']}")
    log.info("%s train loss %.3f val loss %.3f val BLEU %s tok/s %.0f (%.1f min)", where,
             *(record[k] for k in ("train/loss", "valid/loss", "valid/bleu", "train/tok_s",
                                   "wall_minutes")))


def stop_reason(state, train_cfg, clock, is_chief, cut_short):
    """Why training stops after the epoch that just ended (``state`` ready for the next one), or
    None: the budget (``cut_short``: it ran out inside the epoch; else the chief decides on the
    minutes its checkpoint recorded, as a resume does), or early stopping (the chief's, which
    validated)."""
    if cut_short or (is_chief and clock.out_of_time(state.minutes)):
        return f"train.max_minutes={train_cfg.max_minutes} reached after {state.epoch} epochs"
    if is_chief and state.early_stopped(train_cfg.patience):
        return f"no better validation score for {state.stale_validations} epochs: early stop"
    return None
