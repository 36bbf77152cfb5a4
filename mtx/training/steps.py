"""One training step and the evaluation step: functions of the pieces and the data.

`train_step` queues the forward, backward and update on the devices and returns device arrays;
nothing is read back to the host (the loop reads the loss every `train.log_every` steps).
"""
import numpy as onp
from mxnet import autograd

from ..runs import faults
from ..data.batching import bucket_batches
from ..decoding.bleu import sacre_bleu
from ..hardware.devices import to_device
from ..errors import TrainingError
from .loss import mean_nll
from .optimizer import gradient_scale
from .parallel import split_rows
from .schedule import learning_rate
from ..decoding.search import Translator


def train_step(pieces, parallel, batch, step, train_cfg, times_seen=None, budget_spent=0.0):
    """Update ``step`` (counted from 1) on the job's ``batch`` at the `learning_rate` of
    ``budget_spent`` (the fraction of the training budget spent); this process computes its rows
    on its devices. Returns (this process's nll sum (device scalar), finite flag (device
    scalar), its target tokens)."""
    parts = parallel.local_parts(batch)
    losses, nlls, ctx0 = [], [], pieces.ctxs[0]
    acting = [term for term in pieces.terms if term.active(budget_spent)]
    with autograd.record():
        for part, ctx in zip(parts, pieces.ctxs):
            weight = 1.0
            if len(part.ids) == 0:  # more devices than rows: a zero-weighted row keeps this
                part, weight = split_rows(batch, len(batch.ids))[0], 0.0  # device in step
            for term in acting:
                part = term.inputs(part, step * 1_000 + len(losses))
            # src, src_len, tgt_in, tgt_out, tgt_len on the device
            loss, nll = pieces.term_losses.loss(pieces.model, acting, *to_device(part, ctx))
            if pieces.loss_scales:
                loss = loss * pieces.loss_scales[ctx].value.as_np_ndarray()
            losses.append(loss * weight)
            nlls.append(nll.as_in_ctx(ctx0) * weight)
            if weight and times_seen is not None:
                onp.add.at(times_seen, part.ids, 1)
    autograd.backward(losses)
    pieces.trainer.set_learning_rate(learning_rate(step, train_cfg, budget_spent))
    finite = guarded_update([(pieces.trainer, pieces.params, train_cfg.clip_norm)], pieces.ctxs,
                            batch.num_tgt_tokens, pieces.loss_scales)
    if pieces.ema is not None:
        pieces.ema.update(step)
    return (sum(nlls), finite.as_np_ndarray().reshape(()),
            sum(part.num_tgt_tokens for part in parts))


def guarded_update(groups, ctxs, num_tokens, loss_scales=None):
    """Update ``groups``, [(a Trainer of `GuardedAdam`, its trainable parameters, clip_norm)],
    from gradients of a loss summed over ``num_tokens`` target tokens: the gradients are summed
    over devices and workers; then on every device each group's are clipped to ``clip_norm``
    (their global norm per token; 0: not clipped) and divided by the tokens (`gradient_scale`),
    and when any is not finite no group is updated. ``loss_scales``: {ctx: DynamicLossScale}
    the loss was multiplied by, or None. Returns the finite flag ((1,), of the last device)."""
    for trainer, _, _ in groups:
        trainer.allreduce_grads()  # every device now holds the job's gradient sum
    for ctx in ctxs:
        tokens = num_tokens
        if loss_scales:  # the gradients are of the scaled loss
            tokens = loss_scales[ctx].value * tokens
        scales = [gradient_scale([p.grad(ctx) for p in params], clip_norm, tokens)
                  for _, params, clip_norm in groups]
        finite = scales[0][1]
        for _, group_finite in scales[1:]:
            finite = finite * group_finite
        for (trainer, _, _), (scale, _) in zip(groups, scales):  # 0: GuardedAdam skips it
            trainer.optimizer.scales[ctx] = scale * finite if len(groups) > 1 else scale
        if loss_scales:
            loss_scales[ctx].update(finite)
    for trainer, _, _ in groups:
        trainer.update(1)  # the scale above already divides by the tokens
    return finite


def evaluate(pieces, corpus, split, train_cfg, decode_cfg, data_cfg):
    """(mean per-token nll on ``corpus``'s ``split``, its greedy sacreBLEU or None with
    `train.eval_bleu=false`, scored as fits ``data_cfg``'s target language), on the first
    device."""
    faults.point("evaluation")
    src_ids, tgt_ids = corpus.ids[split]
    loss = validation_loss(pieces, bucket_batches(src_ids, tgt_ids, train_cfg.batch_tokens,
                                                  shuffle=False, seed=0))
    if not train_cfg.eval_bleu:
        return loss, None
    translator = Translator(pieces.model, corpus.tokenizer, decode_cfg.greedy(), pieces.ctxs[0])
    return loss, sacre_bleu(translator.translate(corpus.text[split][0]), corpus.text[split][1],
                            data_cfg.tgt_lang, data_cfg.bleu_tokenize)


def validation_loss(pieces, batches):
    """Mean per-token nll over ``batches`` (dropout off), on the first device."""
    ctx = pieces.ctxs[0]
    return mean_nll(pieces.model, pieces.loss_fn,
                    ((to_device(batch, ctx), batch.num_tgt_tokens) for batch in batches))


class LossMeter:
    """Reads the queued steps' losses from the device when asked (`flush`) into the epoch's
    sums in ``state`` (a TrainState) and those of the window since the last step record
    (`record`). Non-finite steps (skipped by the optimizer) are counted, not averaged;
    ``max_nonfinite`` in a row stop training. A window ends at every log point and epoch end,
    where the resume points are: it is never part of a checkpoint's state."""

    def __init__(self, state, max_nonfinite):
        self.state, self.max_nonfinite, self.pending, self.nonfinite_run = state, max_nonfinite, [], 0
        self.start_window()

    def add(self, nll, finite, tokens):
        self.pending.append((nll, finite, tokens))

    def flush(self):
        for nll, finite, tokens in self.pending:
            self.window_steps += 1
            if float(finite):
                nll = float(nll)
                self.state.epoch_nll += nll
                self.state.epoch_tokens += tokens
                self.window_nll += nll
                self.window_tokens += tokens
                self.nonfinite_run = 0
            else:
                self.state.epoch_skipped += 1
                self.nonfinite_run += 1
        self.pending = []
        if self.nonfinite_run >= self.max_nonfinite:
            raise TrainingError(f"the loss was not finite for {self.nonfinite_run} steps in a "
                                f"row; lower train.lr or raise train.warmup_steps (the last "
                                f"good checkpoint is kept)")

    def start_window(self):
        self.window_steps, self.window_nll, self.window_tokens = 0, 0.0, 0
        self.window_start = (self.state.epoch_job_tokens, self.state.epoch_seconds)

    def record(self, lr, minutes):
        """The step record of the steps flushed since the last one (None if there were none):
        step, 1-based epoch, train/loss (mean per-token nll of its finite steps, None if none),
        tokens (theirs, on this process: the loss's weight), train/lr (``lr``, the last step's),
        train/tok_s (of the job), wall_minutes (``minutes``). Starts the next window."""
        if not self.window_steps:
            return None
        state, (job_tokens, seconds) = self.state, self.window_start
        loss = round(self.window_nll / self.window_tokens, 4) if self.window_tokens else None
        record = {"step": state.step, "epoch": state.epoch + 1, "train/loss": loss,
                  "tokens": self.window_tokens, "train/lr": lr,
                  "train/tok_s": round((state.epoch_job_tokens - job_tokens)
                                       / max(state.epoch_seconds - seconds, 1e-9), 1),
                  "wall_minutes": round(minutes, 2)}
        self.start_window()
        return record
