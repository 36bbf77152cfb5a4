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
the loss needs climbs back into the kept set and pushes another out, so the ranking is learned;
the number of open heads cannot fall far below the aim, because the kept gates feel no penalty.
(Two earlier controllers adapted one weight for all gates to the number of open heads: the gates
answered about a hundred steps late, the weight wound up meanwhile and then closed nearly every
head at once, 36 -> 1 and 36 -> 7 open heads for a target of 9 on the default run; a closed gate
gets no gradient from the loss, so it does not reopen by itself.) At the end the
``target_heads`` gates with the largest log_alpha keep their deterministic value
clip(sigmoid(log_alpha) * (HIGH - LOW) + LOW, 0, 1) (at least one head per layer) and every other
gate is exactly 0.
"""
import math
import time

import mxnet as mx
import numpy as onp
from mxnet import autograd, gluon, np, npx

from .batching import bucket_batches
from .devices import to_device
from .loss import LabelSmoothedCrossEntropy

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


def train_gates(model, train_pairs, ctx, target_heads, minutes, lr=5e-4, gate_lr=0.05,
                penalty=10.0, anneal=0.6, batch_tokens=2048, label_smoothing=0.1, seed=1,
                max_steps=None, log=None):
    """Fine-tune ``model`` (its weights change) with a hard-concrete gate per head for
    ``minutes`` of wall time (or ``max_steps``) on ``train_pairs`` (src_ids, tgt_ids), the aim
    of open heads reaching ``target_heads`` after ``anneal`` of that budget ->
    {"log_alpha": (A, H) host array, "open_probability": (A, H), "gates": the exact
    `final_gates`, "history": [per step record; every SNAPSHOT_EVERY steps and the last one
    also hold "open_probability" (A, H) as lists], "steps": n}. ``log``: a function of one
    line."""
    cfg = model.cfg
    shape = (cfg.num_attention_layers, cfg.num_heads)
    params = gluon.ParameterDict("l0_")
    log_alpha = params.get("log_alpha", shape=shape, init=mx.init.Constant(INIT_LOG_ALPHA))
    params.initialize(ctx=ctx)
    valid = valid_heads(cfg.heads_by_layer, shape[1])
    valid_nd = np.array(valid.astype("float32"), ctx=ctx)
    loss_fn = LabelSmoothedCrossEntropy(cfg.vocab_size, label_smoothing)
    loss_fn.initialize(ctx=ctx)
    model_trainer = gluon.Trainer(model.collect_params(), "adam",
                                  {"learning_rate": lr, "beta2": 0.98})
    gate_trainer = gluon.Trainer(params, "adam", {"learning_rate": gate_lr})
    history, step, epoch, start, aim = [], 0, 0, time.perf_counter(), float(valid.sum())
    while True:
        for batch in bucket_batches(*train_pairs, batch_tokens, shuffle=True, seed=seed + epoch):
            src, src_len, tgt_in, tgt_out, tgt_len = to_device(batch, ctx)
            pushed = valid & ~kept(log_alpha.data(ctx).asnumpy(), math.ceil(aim - 1e-6), valid)
            pushed_nd = np.array(pushed.astype("float32"), ctx=ctx)
            with autograd.record():
                gates = sample_gates(log_alpha.data(ctx)) * valid_nd + (1 - valid_nd)
                _, nll = loss_fn(model(src, src_len, tgt_in, gates), tgt_out, tgt_len)
                p_open = open_probability(log_alpha.data(ctx))
                objective = nll / batch.num_tgt_tokens + penalty * (p_open * pushed_nd).sum()
            objective.backward()
            model_trainer.step(1)
            gate_trainer.step(1)
            step += 1
            opened = float((p_open * valid_nd).sum())
            elapsed = time.perf_counter() - start
            progress = step / max_steps if max_steps else elapsed / max(1e-9, 60 * minutes)
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
                alpha = log_alpha.data(ctx).asnumpy()
                return {"log_alpha": alpha, "open_probability": open_probability(alpha, onp),
                        "gates": final_gates(alpha, target_heads, cfg.heads_by_layer),
                        "history": history, "steps": step}
        epoch += 1
