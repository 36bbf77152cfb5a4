"""The training loop: epochs of bucketed batches, a resume point every few minutes and at every
epoch's end, validation, the best checkpoint, early stopping, the wall-clock budget, Ctrl-C.

Determinism: epoch e's batch order comes from `epoch_seed`, and dropout is reseeded at every log
point (`position_seed`); mid-epoch checkpoints are written only at log points, so a run resumed
from any checkpoint reaches the parameters of the uninterrupted run (CPU, fixed seed).
"""
import contextlib
import logging
import time

import numpy as onp
from tqdm import tqdm

from .. import faults
from ..batching import bucket_batches
from ..devices import seed_everything
from ..schedule import inverse_sqrt_warmup
from .checkpointing import Checkpointing
from .control import Clock, CtrlC
from .state import TrainState, epoch_seed, position_seed
from .steps import LossMeter, evaluate, train_step

log = logging.getLogger(__name__)


class Fit:
    """Trains ``pieces`` (`build.Pieces`) on ``corpus`` into the `RunDir` ``run`` (written by
    the chief worker only); ``state`` is everything resume needs."""

    def __init__(self, pieces, corpus, train_pairs, train_cfg, decode_cfg, run, parallel, seed):
        """``train_pairs``: (source ids, target ids) of the training split to train on."""
        self.pieces, self.corpus = pieces, corpus
        self.train_cfg, self.decode_cfg = train_cfg, decode_cfg
        self.run_dir, self.parallel, self.seed = run, parallel, seed
        self.state = TrainState()
        self.train_src, self.train_tgt = train_pairs
        self.times_seen = onp.zeros(len(self.train_src), "int64")  # per training pair, here
        self.checkpointing = Checkpointing(run, pieces, train_cfg)
        self.clock, self.ctrl_c = Clock(train_cfg.max_minutes), CtrlC()

    @property
    def model(self):
        return self.pieces.model

    def restore(self):
        """Continue from the newest intact checkpoint (`Checkpointing.restore`); True when there
        was one."""
        state = self.checkpointing.restore()
        if self.parallel.is_chief:  # the records of what is trained again go
            self.run_dir.records.keep_until(*((state.epoch, state.step) if state else (0, 0)))
        if state is None:
            return False
        self.state, self.clock = state, Clock(self.train_cfg.max_minutes, state.minutes)
        return True

    # -- the loop ------------------------------------------------------------------------------
    def train_epoch(self):
        """The rest of the current epoch (all of it unless resumed inside it). Returns False
        when the wall-clock budget stopped it before its end."""
        state, cfg, stopped = self.state, self.train_cfg, True
        batches = bucket_batches(self.train_src, self.train_tgt, cfg.batch_tokens, shuffle=True,
                                 seed=epoch_seed(self.seed, state.epoch))
        meter = LossMeter(state, cfg.max_nonfinite_steps)
        seed_everything(position_seed(self.seed, state.epoch, state.batch_in_epoch))
        tic = time.time()
        with tqdm(total=len(batches), initial=state.batch_in_epoch, leave=False, mininterval=2,
                  desc=f"epoch {state.epoch + 1}", dynamic_ncols=True,
                  disable=not self.parallel.is_chief) as bar:
            for batch in batches[state.batch_in_epoch:]:
                state.step += 1
                meter.add(*train_step(self.pieces, self.parallel, batch, state.step, cfg,
                                      self.times_seen))
                state.batch_in_epoch += 1
                state.epoch_job_tokens += batch.num_tgt_tokens
                bar.update()
                faults.point("step")
                if state.batch_in_epoch % cfg.log_every == 0 and state.batch_in_epoch < len(batches):
                    meter.flush()  # the only device->host reads of the loop
                    state.epoch_seconds += time.time() - tic
                    tic = time.time()
                    self.record_steps(meter)
                    bar.set_postfix(loss=f"{state.epoch_loss:.3f}",
                                    tok_s=f"{state.epoch_job_tokens / state.epoch_seconds:.0f}")
                    if self.log_point():
                        break
                elif not self.parallel.distributed and self.clock.out_of_time():
                    break  # one process: the budget is checked after every step
                self.check_interrupt()
            else:
                stopped = False
        meter.flush()
        state.epoch_seconds += time.time() - tic
        self.record_steps(meter)
        if state.epoch_skipped:
            log.warning("epoch %d: %d steps had a non-finite loss; their updates were skipped",
                        state.epoch + 1, state.epoch_skipped)
        return not stopped

    def record_steps(self, meter):
        """The record of the steps since the last one (steps.jsonl, TensorBoard), before this
        point's checkpoint: a kill between the two leaves a record that the resume redoes."""
        cfg = self.train_cfg
        record = meter.record(inverse_sqrt_warmup(self.state.step, cfg.lr, cfg.warmup_steps),
                              self.clock.minutes())
        if record and self.parallel.is_chief:
            self.run_dir.records.append_step(record)

    def log_point(self):
        """Every `log_every` batches: reseed dropout, save a resume point when one is due, and
        check the budget (agreed by all workers). Returns True when training must stop."""
        state = self.state
        seed_everything(position_seed(self.seed, state.epoch, state.batch_in_epoch))
        if self.parallel.any(self.clock.out_of_time()):
            return True  # no resume point past the budget: a resume redoes the cut epoch's end
        self.checkpointing.at_log_point(state, self.clock.minutes(), self.parallel)
        return False

    def evaluate(self, split):
        """(mean per-token nll on ``split``, its greedy sacreBLEU or None)."""
        return evaluate(self.pieces, self.corpus, split, self.train_cfg, self.decode_cfg)

    def end_of_epoch(self):
        """Validate (the moving average of the weights, with train.ema_decay), record the epoch,
        and checkpoint it (the resume point, the epoch, best)."""
        state, ema = self.state, self.pieces.ema
        with ema.applied() if ema is not None else contextlib.nullcontext():
            val_loss, bleu = self.evaluate("val")
        record, improved = state.end_epoch(val_loss, bleu, self.clock.minutes())
        self.run_dir.records.append_metrics(record)  # before the checkpoint: a resume drops it if redone
        state.start_epoch()
        state.minutes = self.clock.minutes()
        self.checkpointing.epoch_end(state, record["valid/bleu"], improved)
        log.info("epoch %d step %d train loss %.3f val loss %.3f val BLEU %s tok/s %.0f (%.1f min)",
                 *(record[k] for k in ("epoch", "step", "train/loss", "valid/loss", "valid/bleu",
                                       "train/tok_s", "wall_minutes")))

    def run(self):
        """Train until the budget, max_epochs or early stopping; returns the minutes trained.
        Ctrl-C (SIGINT) saves the model as the `interrupted` checkpoint and re-raises."""
        try:
            with self.ctrl_c:
                return self._run()
        except KeyboardInterrupt:
            if self.parallel.is_chief:
                self.checkpointing.interrupted(self.state.step)
            raise
        finally:
            self.run_dir.records.close()  # flushed whatever ends the run

    def check_interrupt(self):
        self.ctrl_c.check()

    def early_stopped(self, state):
        """`train.patience` epochs without a better validation score, at an epoch's end."""
        return bool(self.train_cfg.patience and state.stale_epochs >= self.train_cfg.patience
                    and state.batch_in_epoch == 0)

    def _run(self):
        """Epochs; one cut short by the budget ends like any other (validated, checkpointed)."""
        state = self.state
        if state.step and self.parallel.any(self.clock.out_of_time(state.minutes)):
            return self.clock.minutes()  # resumed after the budget was spent: nothing to train
        if self.parallel.any(self.early_stopped(state)):
            return self.clock.minutes()  # resumed after an early stop: nothing to train
        while state.epoch < self.train_cfg.max_epochs:
            cut_short = not self.train_epoch()
            state.epoch += 1
            stop = None
            if self.parallel.is_chief:  # evaluation and checkpoints: rank 0 only
                self.end_of_epoch()
                if self.early_stopped(state):
                    stop = f"no better validation score for {state.stale_epochs} epochs: early stop"
            state.start_epoch()
            self.check_interrupt()
            # the chief decides on the minutes its checkpoint recorded, as a resume does
            if cut_short or (self.parallel.is_chief and self.clock.out_of_time(state.minutes)):
                stop = f"train.max_minutes={self.train_cfg.max_minutes} reached after {state.epoch} epochs"
            if self.parallel.any(stop is not None):  # all workers stop after the same epoch
                log.info("%s", stop or "another worker stopped the job")
                break
        return self.clock.minutes()
