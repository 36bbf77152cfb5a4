"""The training loop: Adam with inverse-sqrt warm-up, label smoothing, clipping, evaluation each
epoch, best/last checkpoints, averaging, early stopping and a wall-clock budget."""
import hashlib
import json
import logging
import signal
import threading
import time
from pathlib import Path

import mxnet as mx
import numpy as onp
from mxnet import autograd, gluon, np
from tqdm import tqdm

from . import checkpoint as ckpt
from .bleu import sacre_bleu
from .devices import seed_everything, to_device
from .files import atomic_write, atomic_write_text
from .errors import CheckpointError, ConfigError, TrainingError
from .batching import bucket_batches
from .loss import LabelSmoothedCrossEntropy
from .model import Transformer
from .optimizer import DynamicLossScale, gradient_scale
from .parallel import split_rows
from .precision import set_precision
from .schedule import inverse_sqrt_warmup
from .search import Translator

log = logging.getLogger(__name__)


class LossMeter:
    """Per-token training loss over the steps of an epoch, read from the device only when asked
    (`flush`). Non-finite steps (skipped by the optimizer) are counted, not averaged; too many in
    a row stop training."""

    def __init__(self, max_nonfinite):
        self.max_nonfinite, self.pending = max_nonfinite, []
        self.nll_sum, self.tokens, self.skipped, self.nonfinite_run = 0.0, 0, 0, 0

    def add(self, nll, finite, tokens):
        self.pending.append((nll, finite, tokens))

    def flush(self):
        for nll, finite, tokens in self.pending:
            if float(finite):
                self.nll_sum, self.tokens, self.nonfinite_run = (
                    self.nll_sum + float(nll), self.tokens + tokens, 0)
            else:
                self.skipped, self.nonfinite_run = self.skipped + 1, self.nonfinite_run + 1
        self.pending = []
        if self.nonfinite_run >= self.max_nonfinite:
            raise TrainingError(f"the loss was not finite for {self.nonfinite_run} steps in a "
                                f"row; lower train.lr or raise train.warmup_steps (the last "
                                f"good checkpoint is kept)")

    @property
    def mean(self):
        return self.nll_sum / max(self.tokens, 1)


class Fit:
    """State of one training run; `run` trains and returns the final report."""

    def __init__(self, corpus, model_cfg, data_cfg, train_cfg, decode_cfg, run_dir, parallel, seed):
        """``parallel``: a `DataParallel` (this process's devices and its rank in the job)."""
        self.corpus, self.data_cfg, self.cfg, self.decode_cfg = corpus, data_cfg, train_cfg, decode_cfg
        self.run_dir, self.parallel, self.seed = Path(run_dir), parallel, seed
        self.ctxs = parallel.ctxs
        self.ctx = self.ctxs[0]  # evaluation, translation and checkpoint loading
        if parallel.is_chief:
            (self.run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
        if train_cfg.precision == "float16" and any(c.device_type == "cpu" for c in self.ctxs):
            raise ConfigError("train.precision=float16 needs a GPU (MXNet 1.9's float16 "
                              "FullyConnected is cuDNN-only): on a CPU use train.precision="
                              "bfloat16 (AVX512-BF16) or float32")
        self.loss_scales = ({ctx: DynamicLossScale(ctx) for ctx in self.ctxs}
                            if train_cfg.dynamic_loss_scale else None)
        self.model = Transformer(model_cfg)
        self.model.initialize(mx.init.Xavier(), ctx=self.ctxs)
        set_precision(self.model, train_cfg.precision)
        if train_cfg.hybridize:
            self.model.hybridize(static_alloc=True)
        self.loss_fn = LabelSmoothedCrossEntropy(model_cfg.vocab_size, train_cfg.label_smoothing)
        self.loss_fn.initialize(ctx=self.ctxs)
        self.loss_fn.hybridize(static_alloc=True)
        self.params = [p for p in self.model.collect_params().values() if p.grad_req != "null"]
        # Gradients are summed by the KVStore (several devices or workers), then clipped and
        # guarded by GuardedAdam's device-side scale; the update runs on every device/worker
        # alike (update_on_kvstore=False).
        self.trainer = gluon.Trainer(self.model.collect_params(), "guardedadam",
                                     {"learning_rate": train_cfg.lr, "beta1": 0.9,
                                      "beta2": train_cfg.beta2, "epsilon": 1e-9,
                                      "wd": train_cfg.weight_decay},
                                     kvstore=parallel.trainer_kvstore, update_on_kvstore=False)
        self.step, self.epoch, self.best_bleu, self.stale_epochs = 0, 0, None, 0
        self.train_src, self.train_tgt = corpus.train_pairs(data_cfg.max_len)
        self.times_seen = onp.zeros(len(self.train_src), "int64")  # per training pair, here
        self.interrupt_requested = False
        self.start, self.minutes_before = time.time(), 0.0

    def minutes(self):
        """Training minutes of this run, earlier sessions of a resumed run included."""
        return self.minutes_before + (time.time() - self.start) / 60

    def out_of_time(self):
        return self.cfg.max_minutes is not None and self.minutes() >= self.cfg.max_minutes

    def train_step(self, batch):
        """One update on the job's ``batch``; this process computes its rows on its devices.
        Returns (this process's nll sum on ``ctx``, finite flag, its target tokens)."""
        parts = self.parallel.local_parts(batch)
        losses, nlls = [], []
        with autograd.record():
            for part, ctx in zip(parts, self.ctxs):
                weight = 1.0
                if len(part.ids) == 0:  # more devices than rows: a zero-weighted row keeps this
                    part, weight = split_rows(batch, len(batch.ids))[0], 0.0  # device in step
                src, src_len, tgt_in, tgt_out, tgt_len = to_device(part, ctx)
                loss, nll = self.loss_fn(self.model(src, src_len, tgt_in), tgt_out, tgt_len)
                if self.loss_scales:
                    loss = loss * self.loss_scales[ctx].value.as_np_ndarray()
                losses.append(loss * weight)
                nlls.append(nll.as_in_ctx(self.ctx) * weight)
                if weight:
                    onp.add.at(self.times_seen, part.ids, 1)
        autograd.backward(losses)
        self.step += 1
        self.trainer.set_learning_rate(inverse_sqrt_warmup(self.step, self.cfg.lr,
                                                           self.cfg.warmup_steps))
        self.trainer.allreduce_grads()  # every device now holds the job's gradient sum
        for ctx in self.ctxs:  # clip, 1 / the job's tokens, and 0 (skip) if not finite
            tokens = batch.num_tgt_tokens
            if self.loss_scales:  # the gradients are of the scaled loss
                tokens = self.loss_scales[ctx].value * tokens
            scale, finite = gradient_scale([p.grad(ctx) for p in self.params],
                                           self.cfg.clip_norm, tokens)
            self.trainer.optimizer.scales[ctx] = scale
            if self.loss_scales:
                self.loss_scales[ctx].update(finite)
        self.trainer.update(1)  # the scale above already divides by the tokens
        return (sum(nlls), finite.as_np_ndarray().reshape(()),
                sum(part.num_tgt_tokens for part in parts))

    def time_to_stop(self, step_in_epoch):
        """The wall-clock budget, agreed by all workers (checked every `log_every` steps in a
        cluster, so that they stop at the same step)."""
        if not self.parallel.distributed:
            return self.out_of_time()
        return step_in_epoch % self.cfg.log_every == 0 and self.parallel.any(self.out_of_time())

    def train_epoch(self):
        """One pass over the shuffled training batches; returns (mean nll of this process's rows,
        target tokens/s of the whole job)."""
        epoch_seed = self.seed * 1000 + self.epoch  # data order and dropout: a resumed epoch
        seed_everything(epoch_seed)                 # replays exactly
        batches = bucket_batches(self.train_src, self.train_tgt, self.cfg.batch_tokens,
                                 shuffle=True, seed=epoch_seed)
        meter, tic, job_tokens = LossMeter(self.cfg.max_nonfinite_steps), time.time(), 0
        bar = tqdm(batches, desc=f"epoch {self.epoch + 1}", leave=False, mininterval=2,
                   dynamic_ncols=True, disable=not self.parallel.is_chief)
        for step_in_epoch, batch in enumerate(bar, 1):
            meter.add(*self.train_step(batch))
            job_tokens += batch.num_tgt_tokens
            if len(meter.pending) >= self.cfg.log_every:
                meter.flush()  # the only device->host reads of the loop
                bar.set_postfix(loss=f"{meter.mean:.3f}", lr=f"{self.trainer.learning_rate:.2e}",
                                tok_s=f"{job_tokens / (time.time() - tic):.0f}")
            self.check_interrupt()
            if self.time_to_stop(step_in_epoch):
                break
        meter.flush()
        if meter.skipped:
            log.warning("epoch %d: %d steps had a non-finite loss; their updates were skipped",
                        self.epoch + 1, meter.skipped)
        return meter.mean, job_tokens / (time.time() - tic)

    def evaluate(self, split):
        """Mean per-token nll on ``split`` and its greedy sacreBLEU."""
        src_ids, tgt_ids = self.corpus.ids[split]
        nll_sum, tokens = 0.0, 0
        for batch in bucket_batches(src_ids, tgt_ids, self.cfg.batch_tokens, False, 0):
            src, src_len, tgt_in, tgt_out, tgt_len = to_device(batch, self.ctx)
            nll_sum += float(self.loss_fn(self.model(src, src_len, tgt_in), tgt_out, tgt_len)[1])
            tokens += batch.num_tgt_tokens
        bleu = None
        if self.cfg.eval_bleu:
            greedy = type(self.decode_cfg)(beam_size=1, length_penalty=0.0,
                                           batch_tokens=self.decode_cfg.batch_tokens)
            hyps = Translator(self.model, self.corpus.tokenizer, greedy, self.ctx).translate(
                self.corpus.text[split][0])
            bleu = sacre_bleu(hyps, self.corpus.text[split][1])
        return nll_sum / tokens, bleu

    def end_of_epoch(self, train_loss, tok_s):
        val_loss, bleu = self.evaluate("val")
        bleu_score = bleu["score"] if bleu else -val_loss
        improved = self.best_bleu is None or bleu_score > self.best_bleu
        if improved:
            self.best_bleu, self.stale_epochs = bleu_score, 0
        else:
            self.stale_epochs += 1
        record = {"step": self.step, "epoch": self.epoch, "train/loss": round(train_loss, 4),
                  "valid/loss": round(val_loss, 4), "valid/bleu": bleu and bleu["score"],
                  "train/tok_s": round(tok_s, 1), "wall_minutes": round(self.minutes(), 2)}
        self.save_checkpoint(improved, record["valid/bleu"])
        metrics = self.run_dir / "metrics.jsonl"  # after the checkpoint it describes; atomic
        previous = metrics.read_text() if metrics.is_file() else ""
        atomic_write_text(metrics, previous + json.dumps(record) + "\n")
        log.info("epoch %d step %d train loss %.3f val loss %.3f val BLEU %s tok/s %.0f (%.1f min)",
                 self.epoch, self.step, train_loss, val_loss, record["valid/bleu"], tok_s,
                 self.minutes())

    def save_checkpoint(self, improved, valid_bleu):
        """Epoch checkpoint with optimizer state and counters (for resume); best.params too."""
        ckpt_dir = self.run_dir / "checkpoints"
        path = ckpt_dir / f"epoch_{self.epoch:03d}.params"
        atomic_write(path.with_suffix(".states"), self.trainer.save_states, ckpt.RESUME_HINT)
        meta = dict(step=self.step, epoch=self.epoch, valid_bleu=valid_bleu,
                    best_bleu=self.best_bleu, stale_epochs=self.stale_epochs,
                    minutes=self.minutes())
        ckpt.save_params(self.model, path, **meta)
        if improved:
            ckpt.save_params(self.model, ckpt_dir / "best.params", **meta)
        for old in ckpt.epoch_checkpoints(self.run_dir)[:-max(self.cfg.keep_last,
                                                              self.cfg.average_last, 1)]:
            for suffix in (".params", ".json", ".states"):
                old.with_suffix(suffix).unlink(missing_ok=True)

    def restore(self):
        """Continue from the newest intact epoch checkpoint (a damaged one is skipped with a
        warning). Returns the epoch restored, or 0 when there is none."""
        for path in reversed(ckpt.epoch_checkpoints(self.run_dir)):
            try:
                meta = ckpt.check_params(path, self.model.cfg)
                self.model.load_parameters(str(path), ctx=self.ctxs)
                self.trainer.load_states(str(path.with_suffix(".states")))
            except (CheckpointError, OSError, mx.MXNetError) as err:
                log.warning("skipping %s: %s", path.name, err)
                continue
            self.step, self.epoch = meta["step"], meta["epoch"]
            self.best_bleu, self.stale_epochs = meta["best_bleu"], meta["stale_epochs"]
            self.minutes_before, self.start = meta["minutes"], time.time()
            metrics = self.run_dir / "metrics.jsonl"
            if metrics.is_file():  # drop records of epochs that are being redone
                kept = [r for r in metrics.read_text().splitlines()
                        if json.loads(r)["epoch"] <= self.epoch]
                atomic_write_text(metrics, "".join(r + "\n" for r in kept))
            log.info("resumed from %s (epoch %d, step %d)", path.name, self.epoch, self.step)
            return self.epoch
        if ckpt.epoch_checkpoints(self.run_dir):
            raise CheckpointError(f"{self.run_dir}: no intact checkpoint matches this "
                                       f"config; resume with the run's own settings")
        return 0

    def run(self):
        """Train until the budget, max_epochs or early stopping. Ctrl-C (SIGINT) saves the model
        as interrupted.params and re-raises KeyboardInterrupt."""
        handler = None
        if threading.current_thread() is threading.main_thread():
            handler = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            return self._run()
        except KeyboardInterrupt:
            if not self.parallel.is_chief:
                raise
            path = self.run_dir / "checkpoints" / "interrupted.params"
            ckpt.save_params(self.model, path, step=self.step, epoch=self.epoch)
            log.warning("interrupted at step %d: the model is in %s; train.resume=true "
                        "hydra.run.dir=%s continues from the last epoch checkpoint",
                        self.step, path, self.run_dir)
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
        while self.epoch < self.cfg.max_epochs:
            train_loss, tok_s = self.train_epoch()
            self.epoch += 1
            stop = None
            if self.parallel.is_chief:  # evaluation and checkpoints: rank 0 only
                self.end_of_epoch(train_loss, tok_s)
                self.check_interrupt()
                if self.cfg.patience and self.stale_epochs >= self.cfg.patience:
                    stop = f"no better val BLEU for {self.stale_epochs} epochs: early stop"
            if self.out_of_time():
                stop = f"train.max_minutes={self.cfg.max_minutes} reached after {self.epoch} epochs"
            if self.parallel.any(stop is not None):  # all workers stop after the same epoch
                log.info("%s", stop or "another worker stopped the job")
                break
        return self.minutes()

    def shard_digest(self):
        """(training pairs this process trained on, counting repeats; sha256 of how often each
        pair was seen): workers of one job report different digests that add up to the data."""
        digest = hashlib.sha256(self.times_seen.tobytes()).hexdigest()[:16]
        return int(self.times_seen.sum()), digest

    def parameter_digest(self):
        """sha256 of every parameter's bytes on ``ctx`` (workers compare it at the end)."""
        digest = hashlib.sha256()
        for name, p in sorted(self.model.collect_params().items()):
            digest.update(p.data(self.ctx).asnumpy().tobytes())
        return digest.hexdigest()[:16]


def average_checkpoints(model, paths, out_path):
    """Average the parameters of ``paths`` into ``model`` and save them as ``out_path``."""
    params = model.collect_params()
    total = None
    for path in paths:
        model.load_parameters(str(path), ctx=list(params.values())[0].list_ctx())
        values = {k: p.data().copy() for k, p in params.items()}
        total = values if total is None else {k: total[k] + v for k, v in values.items()}
    for k, p in params.items():
        p.set_data(total[k] / len(paths))
    return ckpt.save_params(model, out_path, averaged=[Path(p).name for p in paths])
