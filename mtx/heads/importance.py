"""Which heads matter: importance scores, pruning experiments and physical pruning.

The attention block only exposes a per-head gate (`MultiHeadAttention`'s ``head_gate``); this
module holds the analysis. Gates and scores are (A, H) arrays, one row per attention layer in
`ModelConfig.attention_layers` order (`Transformer.attention_layers` gives the blocks).

- `gradient_importance`: expected sensitivity |dL/d gate| (Michel, Levy & Neubig 2019).
- `confidence`: a head's mean maximum attention weight over real queries (Voita et al. 2019).
- `leave_one_out`: the score change when one head alone is gated off.
- `loss_importance` with `iterative_order`: leave-one-out on the teacher-forced loss, re-scored at
  the current gates after every step (a greedy backward elimination in steps of 10%).
- `pruning_curve`: gate off heads in order, scoring after each step.
- `prune`: a smaller model without the removed heads' rows of W_q/W_k/W_v and columns of W_o.
"""
import dataclasses

import mxnet as mx
import numpy as onp
from mxnet import autograd, np

from ..data.batching import bucket_batches
from ..training.loss import label_smoothed_loss, mean_nll
from ..model.transformer import Transformer
from ..hardware.devices import to_device


def layer_names(cfg):
    """Names of the gate rows, e.g. 'enc0 self', 'dec1 cross'."""
    return [layer.name for layer in cfg.attention_layers()]


def _batches(src_ids, tgt_ids, batch_tokens=4096):
    return bucket_batches(src_ids, tgt_ids, batch_tokens, shuffle=False, seed=0)


def gradient_importance(model, src_ids, tgt_ids, ctx, normalize=True, gates=None):
    """(A, H): mean over target tokens of |d loss / d gate| at ``gates`` (default all 1: the
    full model), dropout off; 0 for heads whose gate is 0. With ``normalize`` each layer's scores
    are divided by their L2 norm (Michel et al.)."""
    cfg = model.cfg
    loss_fn = label_smoothed_loss(cfg.vocab_size, 0.0, ctx)
    shape = (cfg.num_attention_layers, cfg.num_heads)
    gates = np.array(onp.ones(shape) if gates is None else gates, dtype="float32", ctx=ctx)
    gates.attach_grad()
    total, tokens = onp.zeros(gates.shape), 0
    for batch in _batches(src_ids, tgt_ids):
        src, src_len, tgt_in, tgt_out, tgt_len = to_device(batch, ctx)
        with autograd.record(train_mode=False):
            _, nll = loss_fn(model(src, src_len, tgt_in, gates), tgt_out, tgt_len)
        nll.backward()
        total += onp.abs(gates.grad.asnumpy())
        tokens += batch.num_tgt_tokens
    scores = total / tokens
    scores = scores * (gates.asnumpy() > 0)  # heads already gated off neither count nor skew
    if normalize:                           # their layer's normalisation
        scores = scores / onp.maximum(onp.linalg.norm(scores, axis=1, keepdims=True), 1e-12)
    return scores


def confidence(model, src_ids, tgt_ids, ctx):
    """(A, H): mean over real (non-padding) queries of the largest attention weight (0 in the
    padding of a pruned layer's row)."""
    cfg = model.cfg
    total, count = onp.zeros((cfg.num_attention_layers, cfg.num_heads)), onp.zeros(
        cfg.num_attention_layers)
    for batch in _batches(src_ids, tgt_ids):
        src, src_len, tgt_in, _, _ = to_device(batch, ctx)
        weights = model.attention_weights(src, src_len, tgt_in)
        for layer, w in zip(cfg.attention_layers(), weights):
            a = layer.row
            w = w.asnumpy().reshape(batch.src_tokens.shape[0], -1, *w.shape[1:])  # (B, H, Tq, Tk)
            q_len = batch.src_valid_len if layer.queries == "source" else batch.tgt_valid_len
            mask = onp.arange(w.shape[2])[None, :] < q_len[:, None]  # (B, Tq) real queries
            total[a, :w.shape[1]] += (w.max(axis=-1) * mask[:, None, :]).sum(axis=(0, 2))
            count[a] += mask.sum()
    return total / count[:, None]


def leave_one_out(score_fn, shape):
    """(A, H): score_fn(all gates) - score_fn(gates with only that head off)."""
    base = score_fn(onp.ones(shape))
    drop = onp.zeros(shape)
    for a in range(shape[0]):
        for h in range(shape[1]):
            gates = onp.ones(shape)
            gates[a, h] = 0
            drop[a, h] = base - score_fn(gates)
    return base, drop


def gated_loss(model, src_ids, tgt_ids, ctx):
    """A function (A, H) gates -> the teacher-forced mean nll per target token (dropout off)."""
    loss_fn = label_smoothed_loss(model.cfg.vocab_size, 0.0, ctx)
    batches = [(to_device(b, ctx), b.num_tgt_tokens) for b in _batches(src_ids, tgt_ids)]

    def loss(gates):
        return mean_nll(model, loss_fn, batches, np.array(gates, dtype="float32", ctx=ctx))
    return loss


def loss_importance(loss, gates):
    """(A, H): how much ``loss`` rises when each head that is still on is gated off as well
    (0 for heads already off): leave-one-out on the loss, at the current gates."""
    base, rise = loss(gates), onp.zeros(gates.shape)
    for a, h in zip(*onp.nonzero(gates)):
        trial = gates.copy()
        trial[a, h] = 0
        rise[a, h] = loss(trial) - base
    return rise


def removal_order(importance, keep_one_per_layer=True):
    """Heads (a, h) from least to most important; the most important head of each layer goes
    last of all (so a layer keeps at least one head until the very end is cut off)."""
    flat = sorted(((importance[a, h], a, h) for a in range(importance.shape[0])
                   for h in range(importance.shape[1])))
    if not keep_one_per_layer:
        return [(a, h) for _, a, h in flat]
    last = {a: max(range(importance.shape[1]), key=lambda h: importance[a, h])
            for a in range(importance.shape[0])}
    return [(a, h) for _, a, h in flat if last[a] != h]


def iterative_order(importance_fn, shape, fraction_step=0.1, gates=None, limit=None):
    """Removal order re-scored as heads go (Michel et al.'s iterative pruning): score the heads
    with ``importance_fn(gates)`` at the current gates, remove the round(fraction_step * all
    heads) least important that remain (a layer keeps its last head), and repeat; from
    ``gates`` (A, H) 0/1 (None: all on; a pruned model's padding is 0), until ``limit`` heads
    are removed (None: all it can)."""
    gates = onp.ones(shape) if gates is None else onp.array(gates, dtype=float)
    total, order = int(gates.sum()), []
    per_step = max(1, int(round(fraction_step * total)))
    while limit is None or len(order) < limit:
        importance = importance_fn(gates)
        candidates = [(a, h) for a, h in removal_order(importance) if gates[a, h] > 0]
        left = {a: int(gates[a].sum()) for a in range(shape[0])}
        taken = []
        for a, h in candidates:
            if len(taken) == per_step or (limit is not None and len(order) + len(taken) == limit):
                break
            if left[a] > 1:
                taken.append((a, h))
                left[a] -= 1
        if not taken:
            return order
        for a, h in taken:
            gates[a, h] = 0
        order += taken
    return order


def curve_steps(total, fraction_step=0.1, extra=()):
    """Heads removed at the steps of a pruning curve: round(k * fraction_step * total), and the
    counts in ``extra`` (e.g. the one a study prunes to)."""
    steps = {int(round(k * fraction_step * total)) for k in range(int(1 / fraction_step) + 1)}
    return sorted(steps | set(extra))


def pruning_curve(score_fn, shape, order, fraction_step=0.1, extra_steps=()):
    """Gate off heads in ``order``: after round(k * fraction_step * all heads) of them for
    k = 0, 1, ... and after each count in ``extra_steps`` (as far as ``order`` goes), score.
    Returns [(heads removed, score)]."""
    counts = [n for n in curve_steps(shape[0] * shape[1], fraction_step, extra_steps)
              if n <= len(order)]
    points = []
    for removed in counts:
        gates = onp.ones(shape)
        for a, h in order[:removed]:
            gates[a, h] = 0
        points.append((removed, score_fn(gates)))
    return points


def kept_heads(gates, cfg):
    """(A, H) gates of a model with config ``cfg`` -> list of kept head indices (gate > 0) per
    attention layer (the padding of a pruned layer's row is never kept)."""
    return [[h for h in range(cfg.heads_of(a)) if gates[a, h] > 0] for a in range(gates.shape[0])]


def prune(model, gates, ctx):
    """A new, smaller Transformer without the heads whose gate is 0 (at least one head per layer
    must stay): W_q/W_k/W_v lose those heads' rows and W_o the matching columns; a kept head's
    gate value (1 for 0/1 gates; learned gates may be fractions) is folded into its W_o columns.
    Its outputs equal the gated model's."""
    keep = kept_heads(gates, model.cfg)
    if any(not k for k in keep):
        raise ValueError("every attention layer must keep at least one head")
    cfg = dataclasses.replace(model.cfg, heads_per_layer=[len(k) for k in keep])
    pruned = Transformer(cfg)
    pruned.initialize(ctx=ctx)
    old, new = model._collect_params_with_prefix(), pruned._collect_params_with_prefix()
    for name, param in new.items():
        if ".W_" not in name:
            param.set_data(old[name].data(ctx))
    Dh = model.cfg.head_dim
    blocks = zip(model.attention_layers(), pruned.attention_layers(), keep)
    for (row, _, old_block), (_, _, new_block), heads in blocks:
        rows = onp.concatenate([onp.arange(h * Dh, (h + 1) * Dh) for h in heads])
        rows_nd = mx.np.array(rows, dtype="int64", ctx=ctx)
        for dense in ("W_q", "W_k", "W_v"):
            w = getattr(old_block, dense).weight.data(ctx)  # (H*Dh, D)
            getattr(new_block, dense).weight.set_data(np.take(w, rows_nd, axis=0))
        w_o = old_block.W_o.weight.data(ctx)  # (D, H*Dh)
        scale = mx.np.array(onp.repeat(onp.asarray(gates)[row, heads], Dh), dtype=w_o.dtype,
                            ctx=ctx)  # (kept*Dh,)
        new_block.W_o.weight.set_data(np.take(w_o, rows_nd, axis=1) * scale.reshape(1, -1))
    return pruned
