"""Learned head gates: one hard-concrete gate per head trained with the model under an L0 penalty
(Louizos, Welling & Kingma 2018), as Voita et al. (2019) pruned the heads of a Transformer; the
gates then become exact (0, or their deterministic value) and the closed heads are cut out.

Gates are (A, H) arrays like every head gate in mtx (`Transformer.forward`): row a scales the
heads of attention layer a of `ModelConfig.attention_layers`.

A gate with parameter log_alpha draws z = clip(sigmoid((log u - log(1-u) + log_alpha) / BETA)
* (HIGH - LOW) + LOW, 0, 1), u ~ U(0, 1): exactly 0 or exactly 1 with positive probability,
differentiable in log_alpha in between. The penalty is the expected number of open gates among
those it acts on, sum P(z != 0) = sum sigmoid(log_alpha - BETA log(-LOW / HIGH)), times
``penalty``, added to the loss per target token.

Which gates the penalty acts on follows an aim that falls linearly from all heads to
``target_heads`` over the first ``anneal`` of the budget (`open_aim`): every step the gates are
ranked by log_alpha, the best ceil(aim) (the best of every layer first, as at the end) are left
alone and the penalty, with a fixed weight ``penalty``, pushes on the rest (`kept`). A gate that
the loss needs climbs back into the kept set and pushes another out, so the ranking is learned.
The number of open heads cannot fall far below the aim, because the kept gates feel no penalty;
that matters because a closed gate gets no gradient from the loss and does not reopen by itself,
so a penalty on every gate (one weight adapted to the count of open heads) would react late and
then close nearly all heads at once. At the end the ``target_heads`` gates with the largest
log_alpha keep their deterministic value clip(sigmoid(log_alpha) * (HIGH - LOW) + LOW, 0, 1) (at
least one head per layer) and every other gate is exactly 0.

The updates are training's (`mtx.training.steps.guarded_update`): the model's gradient is
clipped to ``clip_norm`` and a step with a non-finite gradient is skipped;
``max_nonfinite_steps`` of them in a row stop the gate training.
"""
import math
import time

import mxnet as mx
import numpy as onp
from mxnet import autograd, gluon, np, npx

from ..data.batching import bucket_batches
from ..hardware.devices import to_device
from ..errors import TrainingError
from ..training.loss import label_smoothed_loss
from ..training.steps import guarded_update

BETA, LOW, HIGH = 2.0 / 3.0, -0.1, 1.1
INIT_LOG_ALPHA = 3.0  # deterministic gate clip(0.95 * 1.2 - 0.1) = 1: every head open at first
SNAPSHOT_EVERY = 25   # steps between the history's copies of every gate's P(open)


def sample_gates(log_alpha):
    """log_alpha (A, H) -> random gates (A, H) in [0, 1], differentiable in log_alpha."""
    u = np.random.uniform(1e-6, 1 - 1e-6, size=log_alpha.shape, ctx=log_alpha.ctx)
    s = npx.sigmoid((np.log(u) - np.log(1 - u) + log_alpha) / BETA)
    return np.clip(s * (HIGH - LOW) + LOW, 0.0, 1.0)


def open_probability(log_alpha, F=np):
    """P(gate != 0) per gate: (A, H) -> (A, H). ``F``: mxnet.np (differentiable) or numpy."""
    shift = BETA * math.log(-LOW / HIGH)
    return 1.0 / (1.0 + F.exp(-(log_alpha - shift)))


def deterministic_gates(log_alpha):
    """The evaluation-time gates of host log_alpha (A, H): clip(sigmoid * (HIGH - LOW) + LOW)."""
    return onp.clip(1.0 / (1.0 + onp.exp(-log_alpha)) * (HIGH - LOW) + LOW, 0.0, 1.0)


def valid_heads(heads_per_layer, H):
    """(A, H) bool: which entries of a gate row are heads (a pruned layer's row is padded)."""
    return onp.array([[h < n for h in range(H)] for n in heads_per_layer])


def kept(log_alpha, count, valid):
    """(A, H) bool: the ``count`` valid gates with the largest log_alpha, the best of every layer
    first (so each layer keeps a head); padding of a pruned layer's row is never kept."""
    A, H = log_alpha.shape
    keep = onp.zeros((A, H), bool)
    for a in range(A):
        keep[a, onp.argmax(onp.where(valid[a], log_alpha[a], -onp.inf))] = True
    order = onp.argsort(-onp.where(valid & ~keep, log_alpha, -onp.inf), axis=None,
                        kind="stable")
    for flat in order[:max(0, count - A)]:
        keep[onp.unravel_index(flat, (A, H))] = True
    return keep


def final_gates(log_alpha, target_heads, heads_per_layer):
    """Exact gates from host log_alpha (A, H): the `kept` ``target_heads`` keep their
    deterministic value, raised to a small positive floor if it is 0 (so a kept head stays a
    head), the rest are 0."""
    valid = valid_heads(heads_per_layer, log_alpha.shape[1])
    if not 1 <= target_heads <= valid.sum():
        raise ValueError(f"target_heads={target_heads} must be between 1 and {valid.sum()}")
    keep = kept(log_alpha, target_heads, valid)
    return onp.where(keep, onp.maximum(deterministic_gates(log_alpha), 1e-3), 0.0)


def open_aim(all_heads, target_heads, progress, anneal):
    """The expected number of open heads aimed at when ``progress`` (0..1) of the budget is
    spent: from ``all_heads`` down to ``target_heads`` linearly until ``anneal``, then the
    target."""
    fall = min(1.0, progress / anneal) if anneal > 0 else 1.0
    return all_heads - (all_heads - target_heads) * fall


class _GateTraining:
    """What one `train_gates` run updates: the model, with its trainer, and the gate parameters
    log_alpha (A, H), with theirs (both `GuardedAdam`); ``valid`` marks the real heads."""

    def __init__(self, model, ctx, lr, gate_lr, label_smoothing):
        cfg = model.cfg
        self.model, self.ctx = model, ctx
        gate_params = gluon.ParameterDict("l0_")
        self.log_alpha = gate_params.get("log_alpha", shape=(cfg.num_attention_layers,
                                                             cfg.num_heads),
                                         init=mx.init.Constant(INIT_LOG_ALPHA))
        gate_params.initialize(ctx=ctx)
        self.valid = valid_heads(cfg.heads_by_layer, cfg.num_heads)
        self.valid_nd = np.array(self.valid.astype("float32"), ctx=ctx)
        self.loss_fn = label_smoothed_loss(cfg.vocab_size, label_smoothing, ctx)
        self.model_params = [p for p in model.collect_params().values() if p.grad_req != "null"]
        self.model_trainer = gluon.Trainer(model.collect_params(), "guardedadam",
                                           {"learning_rate": lr, "beta2": 0.98})
        self.gate_trainer = gluon.Trainer(gate_params, "guardedadam", {"learning_rate": gate_lr})

    def step(self, batch, pushed, penalty, clip_norm):
        """One update on ``batch`` with the penalty on the ``pushed`` gates (A, H) ->
        (nll sum, P(open) (A, H), finite flag), device arrays."""
        src, src_len, tgt_in, tgt_out, tgt_len = to_device(batch, self.ctx)
        log_alpha, tokens = self.log_alpha.data(self.ctx), batch.num_tgt_tokens
        pushed_nd = np.array(pushed.astype("float32"), ctx=self.ctx)
        with autograd.record():
            gates = sample_gates(log_alpha) * self.valid_nd + (1 - self.valid_nd)
            _, nll = self.loss_fn(self.model(src, src_len, tgt_in, gates), tgt_out, tgt_len)
            p_open = open_probability(log_alpha)
            objective = nll + tokens * penalty * (p_open * pushed_nd).sum()  # summed over tokens
        objective.backward()
        finite = guarded_update([(self.model_trainer, self.model_params, clip_norm),
                                 (self.gate_trainer, [self.log_alpha], 0.0)], [self.ctx], tokens)
        return nll, p_open, finite


def train_gates(model, train_pairs, ctx, target_heads, minutes, lr=5e-4, gate_lr=0.05,
                penalty=10.0, anneal=0.6, batch_tokens=2048, label_smoothing=0.1, seed=1,
                max_steps=None, log=None, clip_norm=1.0, max_nonfinite_steps=20):
    """Fine-tune ``model`` (its weights change) with a hard-concrete gate per head for
    ``minutes`` of wall time (or ``max_steps``) on ``train_pairs`` (src_ids, tgt_ids), the aim
    of open heads reaching ``target_heads`` after ``anneal`` of that budget ->
    {"log_alpha": (A, H) host array, "open_probability": (A, H), "gates": the exact
    `final_gates`, "history": [per step record; every SNAPSHOT_EVERY steps and the last one
    also hold "open_probability" (A, H) as lists], "steps": n}. ``log``: a function of one
    line."""
    run = _GateTraining(model, ctx, lr, gate_lr, label_smoothing)
    valid = run.valid
    history, step, epoch, start, nonfinite_run = [], 0, 0, time.perf_counter(), 0
    aim = float(valid.sum())
    while True:
        for batch in bucket_batches(*train_pairs, batch_tokens, shuffle=True, seed=seed + epoch):
            log_alpha = run.log_alpha.data(ctx).asnumpy()
            pushed = valid & ~kept(log_alpha, math.ceil(aim - 1e-6), valid)
            nll, p_open, finite = run.step(batch, pushed, penalty, clip_norm)
            step += 1
            nonfinite_run = 0 if finite.asscalar() else nonfinite_run + 1
            if nonfinite_run >= max_nonfinite_steps:
                raise TrainingError(f"the gate training's loss was not finite for {nonfinite_run} "
                                    f"steps in a row; lower l0.lr or l0.gate_lr")
            opened = float((p_open * run.valid_nd).sum())
            progress = (step / max_steps if max_steps else
                        (time.perf_counter() - start) / max(1e-9, 60 * minutes))
            aim = open_aim(valid.sum(), target_heads, progress, anneal)
            history.append({"step": step, "nll": round(float(nll) / batch.num_tgt_tokens, 4),
                            "expected_open": round(opened, 2), "aim": round(aim, 2),
                            "pushed": int(pushed.sum())})
            if log and step % 50 == 0:
                log(f"gates step {step}: nll {history[-1]['nll']}, expected open heads "
                    f"{opened:.1f} (aim {aim:.1f}, target {target_heads}), "
                    f"{int(pushed.sum())} pushed")
            done = (max_steps and step >= max_steps) or (not max_steps and progress >= 1)
            if step == 1 or step % SNAPSHOT_EVERY == 0 or done:
                history[-1]["open_probability"] = onp.round(
                    onp.where(valid, p_open.asnumpy(), 0.0), 3).tolist()
            if done:
                alpha = run.log_alpha.data(ctx).asnumpy()
                return {"log_alpha": alpha, "open_probability": open_probability(alpha, onp),
                        "gates": final_gates(alpha, target_heads, model.cfg.heads_by_layer),
                        "history": history, "steps": step}
        epoch += 1
