"""Incremental decoding: the next position of every hypothesis through the target embedding, the
decoder and the output layer in one call (`DecodingStep`: one traced graph when the model is
hybridized, where op by op each step would pay Python and dispatch for every small product).

The decoder state (`init_state`), rows b*K + k for B sentences and K hypotheses each (R = B*K):
    caches          per layer {"self": (k, v) each (R*H, cap, Dh): the first t positions are the
                    earlier ones' keys and values; "cross": (k, v) each (B*H, S, Dh), the source's}
    t               positions decoded so far
    src_valid_len   (B,)
    gates           (A, H) head gates, ones when none were given
    beam_size       K
The self caches are preallocated, `CHUNK` positions at a time, and each step writes its position
in place: a step copies no cache, and a hybridized step keeps its shapes (and its memory plan)
until the cache grows or hypotheses leave (`reorder_state`).
"""
import contextlib
import warnings
import weakref

import numpy as onp
from mxnet import nd, np
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from .. import kernels
from . import ops

CHUNK = 16  # self-cache positions added at a time
# each model's DecodingSteps (`_stepper`), beside the model rather than in it: Gluon warns of
# Blocks held in a plain dict attribute whenever the model's parameters are collected
_STEPPERS = weakref.WeakKeyDictionary()


@use_np
class DecodingStep(HybridBlock):
    """forward(tokens (R, 1) int32, position (1,) int32 (t), visible (R,) int32 (t + 1),
    src_valid_len (B,), gates (A, H), caches [per layer: self k, self v, cross k, cross v])
    -> (out, the last layer's cross-attention weights (B*H, K, S), [per layer: the
    position's self k, self v, (R*H, 1, Dh) each]). ``out``: the log-probabilities (R, V), or
    with ``hidden_only`` the decoder's output (R, D), for the output layer to run on some rows
    (`step_top`). The model's own blocks (and parameters), with K = ``beam_size`` fixed in the
    graph."""

    def __init__(self, model, beam_size, hidden_only=False, **kwargs):
        super().__init__(**kwargs)
        self.beam_size, self.hidden_only = beam_size, hidden_only
        self.embed, self.decoder, self.output = model.tgt_embed, model.decoder, model.output

    def hybrid_forward(self, F, tokens, position, visible, src_valid_len, gates, caches):
        y = self.embed(tokens, position)  # (R, 1, D)
        new_kv, cross_weights = [], None
        for i, block in enumerate(self.decoder.blocks):
            self_k, self_v, cross_k, cross_v = caches[4 * i:4 * i + 4]
            y, kv, cross_weights = block.step(F, y, (self_k, self_v), (cross_k, cross_v),
                                              visible, src_valid_len, gates, self.beam_size)
            new_kv.extend(kv)
        if self.decoder.pre_norm:
            y = self.decoder.final_norm(y)
        y = F.np.squeeze(y, axis=1)  # (R, 1, D) -> (R, D)
        if self.hidden_only:
            return y, cross_weights, new_kv
        return F.npx.log_softmax(self.output(y), axis=-1), cross_weights, new_kv


def init_state(model, memory, src_valid_len, head_gates, beam_size):
    """The state (module docstring) of memory (B, S, D) for ``beam_size`` hypotheses per
    sentence, before the first position."""
    rows = memory.shape[0] * beam_size
    caches = []
    for block in model.decoder.blocks:
        cross = block.cross_attention.project_kv(nd, memory, memory)  # (B*H, S, Dh) each
        heads = block.self_attention.num_heads
        empty = np.zeros((rows * heads, CHUNK, block.self_attention.head_dim),
                         dtype=cross[0].dtype, ctx=memory.ctx)
        caches.append({"self": (empty, empty.copy()), "cross": cross})
    if head_gates is None:
        head_gates = np.ones((model.cfg.num_attention_layers, model.cfg.num_heads),
                             ctx=memory.ctx)
    return {"caches": caches, "t": 0, "src_valid_len": src_valid_len, "gates": head_gates,
            "beam_size": beam_size}


def step(model, tokens, state, hidden_only=False):
    """tokens (R,) at position state['t'] -> (log-probabilities (R, V), or with
    ``hidden_only`` the decoder's output (R, D); the last layer's cross-attention weights
    (B*H, K, S)); writes the position into the caches and advances t. The arrays returned are
    valid until the next step."""
    t, caches, ctx = state["t"], state["caches"], tokens.ctx
    if t == caches[0]["self"][0].shape[1]:
        for cache in caches:
            cache["self"] = tuple(_grown(x) for x in cache["self"])
    stepper = _stepper(model, state["beam_size"], hidden_only)
    rows = tokens.shape[0]
    inputs = [x for cache in caches for x in (*cache["self"], *cache["cross"])]
    tracing = stepper._active and stepper._cached_op is None
    with warnings.catch_warnings() if tracing else contextlib.nullcontext():
        if tracing:  # the cross-attention W_k and W_v, run once per sentence outside the step,
            # are "not used" by its graph
            warnings.filterwarnings("ignore", "Parameter .* is not used by any computation")
        out, cross_weights, new_kv = stepper(
            tokens.reshape(-1, 1), np.full((1,), t, dtype="int32", ctx=ctx),
            np.full((rows,), t + 1, dtype="int32", ctx=ctx), state["src_valid_len"],
            state["gates"], inputs)
    for cache, k_new, v_new in zip(caches, new_kv[0::2], new_kv[1::2]):
        for buffer, new in zip(cache["self"], (k_new, v_new)):
            buffer.as_nd_ndarray()[:, t:t + 1] = new.as_nd_ndarray()  # in place
    state["t"] = t + 1
    return out, cross_weights


def step_top(model, tokens, state, k, rows=None):
    """tokens (R,) at position state['t'] -> each row's ``k`` most probable next tokens:
    (log-probabilities (R, k), ids (R, k) float32), best first; advances the state like `step`.
    With ``rows`` (host int array) only those rows get the output layer (a hypothesis that has
    ended needs none: the search gives it EOS); the others get log-probability 0 and id 0."""
    hidden, rows = step_live(model, tokens, state, rows)
    if hidden is None:
        return rows_of_all(None, rows, tokens.shape[0], k, tokens.ctx)
    native = kernels.load()
    top = ops.top_log_probs(nd, model.output(hidden), k, native)  # (L, k) each
    return rows_of_all(top, rows, tokens.shape[0], k, tokens.ctx)


def step_live(model, tokens, state, rows=None):
    """Advances the state like `step` -> (the decoder's output (L, D) of the L ``rows`` (host
    ints; None: all R), or None when L = 0; the rows, None when they are all R)."""
    hidden, _ = step(model, tokens, state, hidden_only=True)  # (R, D)
    if rows is None or len(rows) == hidden.shape[0]:
        return hidden, None
    if len(rows) == 0:
        return None, rows
    return np.take(hidden, np.array(rows, dtype="int32", ctx=hidden.ctx), axis=0), rows


def rows_of_all(top, rows, R, k, ctx):
    """(values (L, k), ids (L, k)) of the L ``rows`` (`step_live`) -> (R, k) each, a row of
    zeros for every other row (``top`` None: L = 0)."""
    if rows is None:
        return top
    if top is None:
        zeros = np.zeros((R, k), ctx=ctx)
        return zeros, zeros.copy()
    where = onp.full(R, len(rows), "int32")
    where[rows] = onp.arange(len(rows))  # each row's line of top; the others a row of zeros
    where = np.array(where, dtype="int32", ctx=ctx)
    return tuple(np.take(np.concatenate([x, np.zeros((1, k), ctx=ctx)]), where, axis=0)
                 for x in top)


def reorder_state(state, rows, sentences=None):
    """Keep the caches of hypotheses ``rows`` (R',) int32 of the R = sentences * K; with
    ``sentences`` (R'/K,) int32 also only those sentences' source side."""
    hypotheses = state["src_valid_len"].shape[0] * state["beam_size"]  # R
    for cache in state["caches"]:
        cache["self"] = tuple(ops.take_groups(x, rows, hypotheses) for x in cache["self"])
        if sentences is not None:
            cache["cross"] = tuple(ops.take_groups(x, sentences, hypotheses // state["beam_size"])
                                   for x in cache["cross"])
    if sentences is not None:
        state["src_valid_len"] = np.take(state["src_valid_len"], sentences, axis=0)


def _grown(cache):
    """(N, cap, Dh) -> (N, cap + CHUNK, Dh), the new positions zero."""
    n, _, dh = cache.shape
    return np.concatenate([cache, np.zeros((n, CHUNK, dh), dtype=cache.dtype, ctx=cache.ctx)],
                          axis=1)


def _stepper(model, beam_size, hidden_only):
    """The model's `DecodingStep` for ``beam_size`` and ``hidden_only``, made once and
    hybridized (static memory and shapes) when the model is."""
    steppers = _STEPPERS.setdefault(model, {})
    key = (beam_size, hidden_only, model._active)  # Gluon's "hybridized" flag
    if key not in steppers:
        stepper = DecodingStep(model, beam_size, hidden_only)
        if model._active:
            stepper.hybridize(static_alloc=True, static_shape=True)
        steppers[key] = stepper
    return steppers[key]
