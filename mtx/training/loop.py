"""The training loop: epochs of bucketed batches, a resume point every few minutes and at every
epoch's end, validation, the best checkpoint, early stopping, the wall-clock budget, Ctrl-C.

Determinism: epoch e's batch order comes from `epoch_seed`, and dropout is reseeded at every log
point (`position_seed`); mid-epoch checkpoints are written only at log points, so a run resumed
from any checkpoint reaches the parameters of the uninterrupted run (CPU, fixed seed).
"""
import logging
import signal
import threading
import time

import numpy as onp
from tqdm import tqdm

from .. import faults
from ..batching import bucket_batches
from ..bleu import sacre_bleu
from ..config import DecodeConfig
from ..devices import seed_everything
from ..errors import CheckpointError
from ..search import Translator
from .state import TrainState, epoch_seed, position_seed
from .steps import LossMeter, train_step, validation_loss

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
        self.started, self.last_save, self.interrupt_requested = time.time(), time.time(), False
        self.minutes_at_start = 0.0

    @property
    def model(self):
        return self.pieces.model

    def minutes(self):
        """Training minutes of the run, those before a resume included."""
        return self.minutes_at_start + (time.time() - self.started) / 60

    def out_of_time(self):
        budget = self.train_cfg.max_minutes
        return budget is not None and self.minutes() >= budget

    # -- checkpoints ---------------------------------------------------------------------------
    def save_resume_point(self):
        self.state.minutes = self.minutes()
        self.last_save = time.time()
        return self.run_dir.save("latest", self.model, self.pieces.trainer, self.state)

    def restore(self):
        """Continue from the newest intact resume point: `latest`, else the newest intact epoch
        checkpoint (a damaged one is skipped with a warning). Returns True when one was found."""
        model_cfg = self.model.cfg
        for name in ["latest"] + self.run_dir.epoch_names()[::-1]:
            try:
                manifest = self.run_dir.verify(name, model_cfg)
                state = TrainState.from_dict(manifest["state"])
                self.run_dir.load(manifest, self.model, self.pieces.ctxs, self.pieces.trainer)
            except CheckpointError as err:
                if name != "latest" or (self.run_dir.checkpoints / "latest.json").exists():
                    log.warning("skipping %s: %s", name, err)
                continue
            self.state, self.minutes_at_start, self.started = state, state.minutes, time.time()
            if self.parallel.is_chief:
                self.run_dir.keep_metrics_until(state.epoch)
            log.info("resumed from %s (epoch %d, batch %d of the next, step %d)", name,
                     state.epoch, state.batch_in_epoch, state.step)
            return True
        if self.run_dir.manifests():
            raise CheckpointError(f"{self.run_dir.path}: no intact checkpoint matches this "
                                  f"config; resume with the run's own settings")
        return False

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
                    bar.set_postfix(loss=f"{state.epoch_loss:.3f}",
                                    tok_s=f"{state.epoch_job_tokens / state.epoch_seconds:.0f}")
                    if self.log_point():
                        break
                elif not self.parallel.distributed and self.out_of_time():
                    break  # one process: the budget is checked after every step
                self.check_interrupt()
            else:
                stopped = False
        meter.flush()
        state.epoch_seconds += time.time() - tic
        if state.epoch_skipped:
            log.warning("epoch %d: %d steps had a non-finite loss; their updates were skipped",
                        state.epoch + 1, state.epoch_skipped)
        return not stopped

    def log_point(self):
        """Every `log_every` batches: reseed dropout, maybe save a resume point, and check the
        budget (agreed by all workers). Returns True when training must stop."""
        state = self.state
        seed_everything(position_seed(self.seed, state.epoch, state.batch_in_epoch))
        save = time.time() - self.last_save >= 60 * self.train_cfg.save_every_minutes
        if self.parallel.distributed:
            save = self.parallel.any(save)
        if save and self.parallel.is_chief:
            self.save_resume_point()
        return self.parallel.any(self.out_of_time())

    def evaluate(self, split):
        """(mean per-token nll on ``split``, its greedy sacreBLEU or None)."""
        faults.point("evaluation")
        src_ids, tgt_ids = self.corpus.ids[split]
        loss = validation_loss(self.pieces, bucket_batches(src_ids, tgt_ids, self.train_cfg.batch_tokens,
                                                           shuffle=False, seed=0))
        if not self.train_cfg.eval_bleu:
            return loss, None
        greedy = DecodeConfig(beam_size=1, length_penalty=0.0,
                              batch_tokens=self.decode_cfg.batch_tokens)
        hyps = Translator(self.model, self.corpus.tokenizer, greedy, self.pieces.ctxs[0]).translate(
            self.corpus.text[split][0])
        return loss, sacre_bleu(hyps, self.corpus.text[split][1])

    def end_of_epoch(self):
        """Validate, record the epoch, and checkpoint it (the resume point, the epoch, best)."""
        state = self.state
        val_loss, bleu = self.evaluate("val")
        score = bleu["score"] if bleu else -val_loss  # higher is better
        improved = state.best_score is None or score > state.best_score
        state.best_score = score if improved else state.best_score
        state.stale_epochs = 0 if improved else state.stale_epochs + 1
        record = {"step": state.step, "epoch": state.epoch, "train/loss": round(state.epoch_loss, 4),
                  "valid/loss": round(val_loss, 4), "valid/bleu": bleu and bleu["score"],
                  "train/tok_s": round(state.epoch_job_tokens / max(state.epoch_seconds, 1e-9), 1),
                  "wall_minutes": round(self.minutes(), 2)}
        self.run_dir.append_metrics(record)  # before the checkpoint: a resume drops it if redone
        state.start_epoch()
        manifest = self.save_resume_point()
        self.run_dir.link(f"epoch_{state.epoch:03d}", dict(manifest, valid=record["valid/bleu"]))
        if improved:
            self.run_dir.link("best", dict(manifest, valid=record["valid/bleu"]))
        keep = max(self.train_cfg.keep_last, self.train_cfg.average_last, 1)
        self.run_dir.drop(self.run_dir.epoch_names()[:-keep])
        self.run_dir.collect_garbage()
        log.info("epoch %d step %d train loss %.3f val loss %.3f val BLEU %s tok/s %.0f (%.1f min)",
                 state.epoch, state.step, record["train/loss"], val_loss, record["valid/bleu"],
                 record["train/tok_s"], self.minutes())

    def run(self):
        """Train until the budget, max_epochs or early stopping; returns the minutes trained.
        Ctrl-C (SIGINT) saves the model as the `interrupted` checkpoint and re-raises."""
        handler = None
        if threading.current_thread() is threading.main_thread():
            handler = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            return self._run()
        except KeyboardInterrupt:
            if self.parallel.is_chief:
                self.run_dir.save("interrupted", self.model, step=self.state.step)
                log.warning("interrupted at step %d: the model is checkpoint 'interrupted'; "
                            "train.resume=true hydra.run.dir=%s continues from the last resume "
                            "point", self.state.step, self.run_dir.path)
            raise
        finally:
            if handler is not None:
                signal.signal(signal.SIGINT, handler)

    def _on_sigint(self, signum, frame):
        """The first Ctrl-C is acted on between steps (`check_interrupt`): raised from a signal
        handler, it could land in an array's __del__, where Python drops it. A second one raises
        at once."""
        if self.interrupt_requested:
            raise KeyboardInterrupt
        self.interrupt_requested = True

    def check_interrupt(self):
        if self.interrupt_requested:
            raise KeyboardInterrupt

    def _run(self):
        """Epochs; one cut short by the budget ends like any other (validated, checkpointed)."""
        state = self.state
        if state.step and self.parallel.any(self.out_of_time()):
            return self.minutes()  # resumed after the budget was spent: nothing to train
        while state.epoch < self.train_cfg.max_epochs:
            cut_short = not self.train_epoch()
            state.epoch += 1
            stop = None
            if self.parallel.is_chief:  # evaluation and checkpoints: rank 0 only
                self.end_of_epoch()
                if self.train_cfg.patience and state.stale_epochs >= self.train_cfg.patience:
                    stop = f"no better validation score for {state.stale_epochs} epochs: early stop"
            state.start_epoch()
            self.check_interrupt()
            if cut_short or self.out_of_time():
                stop = f"train.max_minutes={self.train_cfg.max_minutes} reached after {state.epoch} epochs"
            if self.parallel.any(stop is not None):  # all workers stop after the same epoch
                log.info("%s", stop or "another worker stopped the job")
                break
        return self.minutes()
