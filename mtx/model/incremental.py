"""Incremental decoding: the next position of every hypothesis through the target embedding, the
decoder and the output layer in one call (`DecodingStep`: one traced graph when the model is
hybridized, where op by op each step would pay Python and dispatch for every small product).
The beam search's step (`extend`) is that same call with the search's own block (a
`mtx.decoding.beam_step.BeamStep`) at its end: the output layer, the top-k and the beam's
bookkeeping run in the graph, one call per step.

The decoder state (`init_state`), rows b*K + k for B sentences and K hypotheses each (R = B*K):
    caches          per layer {"self": (k, v) each (R*H, cap, Dh): the first t positions are the
                    earlier ones' keys and values; "cross": (k, v) each (B*H, S, Dh), the source's}
    t               positions decoded so far
    src_valid_len   (B,)
    gates           (A, H) head gates, or None (no gate operators in the step)
    beam_size       K
The self caches are preallocated, `cache_chunk` positions at a time, and each step writes its
position in place: a step copies no cache, and a hybridized step keeps its shapes (and its memory
plan) until the cache grows or hypotheses leave (`reorder_state`).
"""
import contextlib
import warnings
import weakref

from mxnet import nd, np
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from .. import kernels
from . import ops
from .precision import as_float32

# each model's DecodingSteps (`_stepper`), beside the model rather than in it: Gluon warns of
# Blocks held in a plain dict attribute whenever the model's parameters are collected
_STEPPERS = weakref.WeakKeyDictionary()


@use_np
class DecodingStep(HybridBlock):
    """forward(tokens (R, 1) int32, position (1,) int32 (t), src_valid_len (B,),
    *[gates (A, H) when ``gated``], *caches [per layer: self k, self v, cross k, cross v],
    *more) -> (*out, [per layer: the position's self k, self v, (R*H, 1, Dh) each]).

    ``out`` by ``then``: "log_probs": the log-probabilities (R, V) and the last layer's
    cross-attention weights (B*H, K, S); "hidden": the decoder's output (R, D); a HybridBlock
    (the search's step, `extend`): its outputs for (log-probabilities (R, C), ids (R, C)
    float32 of each row's C = ``then.C`` most probable next tokens, best first, *more,
    position). The model's own blocks (and parameters), with K = ``beam_size`` fixed in the
    graph."""

    def __init__(self, model, beam_size, gated, then, **kwargs):
        super().__init__(**kwargs)
        self.beam_size, self.gated, self.layers = beam_size, gated, len(model.decoder.blocks)
        self.native = kernels.load()
        # the native attention over the caches, where no attention weights are returned
        self.fused = self.native and then != "log_probs"
        self.embed, self.decoder, self.output = model.tgt_embed, model.decoder, model.output
        self.then = then  # a str, or a Block registered as a child

    def hybrid_forward(self, F, tokens, position, src_valid_len, *inputs):
        gates = inputs[0] if self.gated else None
        caches = inputs[int(self.gated):int(self.gated) + 4 * self.layers]
        more = inputs[int(self.gated) + 4 * self.layers:]
        y = self.embed(tokens, position)  # (R, 1, D)
        # t + 1 positions visible to every row's query: (R,) int32, once for every layer
        visible = F.np.reshape(tokens, (-1,)) * 0 + position + 1
        new_kv, cross_weights = [], None
        for i, block in enumerate(self.decoder.blocks):
            self_k, self_v, cross_k, cross_v = caches[4 * i:4 * i + 4]
            y, kv, cross_weights = block.step(F, y, (self_k, self_v), (cross_k, cross_v),
                                              visible, src_valid_len, gates, self.beam_size,
                                              self.fused)
            new_kv.extend(kv)
        if self.decoder.pre_norm:
            y = self.decoder.final_norm(y)
        y = F.np.squeeze(y, axis=1)  # (R, 1, D) -> (R, D)
        if self.then == "hidden":
            return (y, *new_kv)
        logits = as_float32(F, self.output(y), self.output.compute_dtype)  # (R, V)
        if self.then == "log_probs":
            return (F.npx.log_softmax(logits, axis=-1), cross_weights, *new_kv)
        top_lp, top_ids = ops.top_log_probs(F, logits, self.then.C, self.native)
        return (*self.then(top_lp, top_ids, *more, position), *new_kv)


def cache_chunk(beam_size):
    """Positions added to the self caches at a time. Each growth re-plans the step's memory;
    with beams every step also copies the caches by hypothesis (`reorder_state`), unused
    positions included: 8 then (beam 5 took 0.90-0.95x the time of 16), 16 for greedy search,
    which copies nothing (4 took it 1.12x the time of 16; docs/performance.md)."""
    return 8 if beam_size > 1 else 16


def init_state(model, memory, src_valid_len, head_gates, beam_size):
    """The state (module docstring) of memory (B, S, D) for ``beam_size`` hypotheses per
    sentence, before the first position."""
    rows = memory.shape[0] * beam_size
    caches = []
    for block in model.decoder.blocks:
        cross = block.cross_attention.project_kv(nd, memory, memory)  # (B*H, S, Dh) each
        heads = block.self_attention.num_heads
        empty = np.zeros((rows * heads, cache_chunk(beam_size), block.self_attention.head_dim),
                         dtype=cross[0].dtype, ctx=memory.ctx)
        caches.append({"self": (empty, empty.copy()), "cross": cross})
    return {"caches": caches, "t": 0, "src_valid_len": src_valid_len, "gates": head_gates,
            "beam_size": beam_size}


def step(model, tokens, state, then="log_probs", more=()):
    """tokens (R,) at position state['t'] -> what the `DecodingStep` with ``then`` returns
    beside the keys and values (for "log_probs": (log-probabilities (R, V), the last layer's
    cross-attention weights (B*H, K, S))); writes the position into the caches and advances t.
    The arrays returned are valid until the next step."""
    t, caches, ctx = state["t"], state["caches"], tokens.ctx
    if t == caches[0]["self"][0].shape[1]:
        for cache in caches:
            cache["self"] = tuple(_grown(x, cache_chunk(state["beam_size"]))
                                  for x in cache["self"])
    gates = [] if state["gates"] is None else [state["gates"]]
    stepper = _stepper(model, state["beam_size"], bool(gates), then)
    inputs = [x for cache in caches for x in (*cache["self"], *cache["cross"])]
    tracing = stepper._active and stepper._cached_op is None
    with warnings.catch_warnings() if tracing else contextlib.nullcontext():
        if tracing:  # the cross-attention W_k and W_v, run once per sentence outside the step,
            # are "not used" by its graph
            warnings.filterwarnings("ignore", "Parameter .* is not used by any computation")
        out = stepper(tokens.reshape(-1, 1), np.full((1,), t, dtype="int32", ctx=ctx),
                      state["src_valid_len"], *gates, *inputs, *more)
    out = list(out) if isinstance(out, (list, tuple)) else [out]
    new_kv = out[len(out) - 2 * len(caches):]
    for cache, k_new, v_new in zip(caches, new_kv[0::2], new_kv[1::2]):
        for buffer, new in zip(cache["self"], (k_new, v_new)):
            buffer.as_nd_ndarray()[:, t:t + 1] = new.as_nd_ndarray()  # in place
    state["t"] = t + 1
    return tuple(out[:len(out) - 2 * len(caches)])


def extend(model, state, then, beams):
    """One step of a search: the tokens ``beams[0]`` (R,) at position state['t'] through the
    decoder and the output layer, then the search's block ``then`` (a HybridBlock with ``C``,
    see `DecodingStep`) over each row's C best next tokens, ``beams[1:]`` and the position,
    all in one call -> ``then``'s outputs, copied (a hybridized step reuses the memory of its
    outputs, and the search passes them back in); advances the state like `step`."""
    out = step(model, beams[0], state, then, beams[1:])
    return tuple(x.copy() for x in out)


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


def _grown(cache, chunk):
    """(N, cap, Dh) -> (N, cap + chunk, Dh), the new positions zero."""
    n, _, dh = cache.shape
    return np.concatenate([cache, np.zeros((n, chunk, dh), dtype=cache.dtype, ctx=cache.ctx)],
                          axis=1)


def _stepper(model, beam_size, gated, then):
    """The model's `DecodingStep` for these settings, made once and hybridized (static memory
    and shapes) when the model is."""
    steppers = _STEPPERS.setdefault(model, {})
    key = (beam_size, gated, then, model._active)  # Gluon's "hybridized" flag
    if key not in steppers:
        stepper = DecodingStep(model, beam_size, gated, then)
        if model._active:
            stepper.hybridize(static_alloc=True, static_shape=True)
        steppers[key] = stepper
    return steppers[key]
