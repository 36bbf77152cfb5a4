"""Scaled dot-product and multi-head attention, the d2l book's block made complete.

Shape letters, used in every module of `mtx`:
    B batch, S source length, T target length, D model width (num_hiddens),
    H heads, Dh = D / H head width, V vocabulary, K beam, N = B * H.

Masks are *valid lengths*, as in the book: for every query, how many leading keys it may attend to.
``valid_lens`` is ``None`` (attend everywhere), ``(B,)`` (one length per sequence) or
``(B, Tq)`` (one length per query, which also expresses causality). `mtx.model.masks` builds them.
A query whose length is 0 gets all-zero weights (not a uniform spread).
"""
import math

from mxnet import nd
from mxnet.gluon import nn
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from . import ops
from .precision import Linear, fully_connected

__all__ = ["masked_softmax", "transpose_qkv", "transpose_output", "gate_row",
           "DotProductAttention", "MultiHeadAttention"]


def _per_query_lens(F, valid_lens, scores):
    """(N,) or (N, Tq) lengths -> (N, Tq) int32, broadcast against scores of shape (N, Tq, Tk)."""
    lens = F.npx.reshape(valid_lens.astype("int32"), (-2, -1))  # (N,) -> (N, 1); (N, Tq) stays
    zeros = F.npx.arange_like(scores, axis=1).astype("int32") * 0  # (Tq,)
    return lens + zeros  # (N, Tq)


def masked_softmax(scores, valid_lens, F=nd):
    """Softmax over the last axis of ``scores`` (N, Tq, Tk), keeping only the first
    ``valid_lens`` keys of each query. Masked weights are exactly 0; rows of length 0 are all 0.
    One fused op (``npx.softmax(..., use_length=True)``), no fill value."""
    if valid_lens is None:
        return F.npx.softmax(scores, axis=-1)
    lens = _per_query_lens(F, valid_lens, scores)
    return F.npx.softmax(scores, length=lens, axis=-1, use_length=True)


def transpose_qkv(X, num_heads, F=nd):
    """(B, L, D) -> (B*H, L, Dh): split the width into heads so all heads run as one batch."""
    X = ops.reshape(F, X, (-2, -2, num_heads, -1))  # (B, L, D) -> (B, L, H, Dh)
    X = ops.transpose(F, X, (0, 2, 1, 3))  # -> (B, H, L, Dh)
    return ops.reshape(F, X, (-5, -2, -2))  # -> (B*H, L, Dh)


def transpose_output(X, num_heads, F=nd):
    """(B*H, L, Dh) -> (B, L, D): the inverse of `transpose_qkv`."""
    X = ops.reshape(F, X, (-6, -1, num_heads, -2, -2))  # (B*H, L, Dh) -> (B, H, L, Dh)
    X = ops.transpose(F, X, (0, 2, 1, 3))  # -> (B, L, H, Dh)
    return ops.reshape(F, X, (-2, -2, -5))  # -> (B, L, D)


def gate_row(head_gates, row, num_heads):
    """Row ``row`` of the model's head gates (A, H) for a block of ``num_heads`` <= H heads ->
    (num_heads,), or None without gates. A pruned layer's kept heads are the first entries of
    its row; the rest of the row is padding and ignored."""
    return None if head_gates is None else head_gates[row, :num_heads]


@use_np
class DotProductAttention(HybridBlock):
    """Scaled dot-product attention with dropout on the weights; returns (context, weights).

    The width of the queries must be given (``head_dim``) so the block hybridizes."""

    def __init__(self, head_dim, dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        self._scale = 1.0 / math.sqrt(head_dim)
        with self.name_scope():
            self.dropout = nn.Dropout(dropout)

    def hybrid_forward(self, F, queries, keys, values, valid_lens=None):
        scores = F.npx.batch_dot(queries, keys, transpose_b=True)  # (N, Tq, Tk)
        scores = ops.scale(F, scores, self._scale)  # the book's / sqrt(d), on the smaller tensor
        attn_weights = masked_softmax(scores, valid_lens, F)
        context = F.npx.batch_dot(self.dropout(attn_weights), values)  # (N, Tq, dv)
        return context, attn_weights


@use_np
class HeadGatedLinear(Linear):
    """The output projection W_o: (B, Tq, H*Dh) -> (B, Tq, D), with an optional head gate (H,)
    folded into its weight: W_o (gate_h * context_h) = (W_o * gate repeated Dh times) context."""

    def __init__(self, units, head_dim, **kwargs):
        super().__init__(units, **kwargs)
        self.head_dim = head_dim

    def hybrid_forward(self, F, x, head_gate=None, weight=None, bias=None):
        if head_gate is not None:
            columns = F.np.repeat(head_gate.astype("float32"), self.head_dim)  # (H,) -> (H*Dh,)
            columns = ops.legacy(F, "broadcast_like", columns.reshape(1, -1), weight)  # (D, H*Dh)
            weight = ops.legacy(F, "elemwise_mul", weight, columns)
        return fully_connected(F, x, weight, bias, self._units, self.compute_dtype)


@use_np
class MultiHeadAttention(HybridBlock):
    """Multi-head attention (d2l "Multi-Head Attention"), heads in parallel via reshapes.

    forward(queries (B, Tq, D), keys (B, Tk, D), values (B, Tk, D), valid_lens None|(B,)|(B, Tq),
    head_gate None|(H,)) -> (B, Tq, D). ``head_gate`` scales each head's context before ``W_o``
    (1 keeps a head, 0 removes it; applied to W_o's columns, `HeadGatedLinear`). Call `attend`
    to also get the weights (B*H, Tq, Tk).
    Each head is D / H wide, so parameters and FLOPs do not depend on H (docs/attention.md).
    """

    def __init__(self, num_hiddens, num_heads, dropout=0.0, use_bias=False, in_units=None,
                 head_dim=None, **kwargs):
        super().__init__(**kwargs)
        if head_dim is None:  # the book's block: heads split the width
            if num_heads < 1 or num_hiddens % num_heads != 0:
                raise ValueError(f"num_hiddens={num_hiddens} is not divisible by num_heads="
                                 f"{num_heads}: each head is num_hiddens / num_heads wide; "
                                 f"pick a head count that divides the width")
            head_dim = num_hiddens // num_heads
        # A pruned block keeps fewer heads of the original width: H * Dh < D is allowed then.
        self.num_hiddens, self.num_heads, self.head_dim = num_hiddens, num_heads, head_dim
        inner = num_heads * head_dim
        units = dict(use_bias=use_bias, flatten=False, in_units=in_units or 0)  # 0: infer later
        with self.name_scope():
            self.attention = DotProductAttention(head_dim, dropout)
            self.W_q = Linear(inner, prefix="W_q_", **units)
            self.W_k = Linear(inner, prefix="W_k_", **units)
            self.W_v = Linear(inner, prefix="W_v_", **units)
            self.W_o = HeadGatedLinear(num_hiddens, head_dim, prefix="W_o_", use_bias=use_bias,
                                       flatten=False, in_units=inner)

    def hybrid_forward(self, F, queries, keys, values, valid_lens=None, head_gate=None):
        output, _ = self.attend(F, queries, keys, values, valid_lens, head_gate)
        return output

    def project_kv(self, F, keys, values):
        """Keys and values of every head: (B, Tk, D) -> two (B*H, Tk, Dh). Cache these."""
        return (transpose_qkv(self.W_k(keys), self.num_heads, F),
                transpose_qkv(self.W_v(values), self.num_heads, F))

    def attend(self, F, queries, keys, values, valid_lens=None, head_gate=None, kv_heads=None,
               fused=False):
        """Like forward, and also returns the weights (B*H, Tq, Tk). ``kv_heads`` (from
        `project_kv`) skips the key/value projections when they are cached; with ``fused``
        (and valid_lens (B,)) the native kernel attends to them (`ops.cached_attention`, no
        dropout) and the weights are None."""
        q_heads = transpose_qkv(self.W_q(queries), self.num_heads, F)  # (B*H, Tq, Dh)
        k_heads, v_heads = kv_heads if kv_heads is not None else self.project_kv(F, keys, values)
        if valid_lens is not None:
            valid_lens = F.np.repeat(valid_lens, self.num_heads, axis=0)  # (B*H,) | (B*H, Tq)
        if fused:
            context, attn_weights = ops.cached_attention(
                F, q_heads, k_heads, v_heads, valid_lens.astype("float32"),
                self.attention._scale), None
        else:
            context, attn_weights = self.attention(q_heads, k_heads, v_heads, valid_lens)
        context = transpose_output(context, self.num_heads, F)  # (B*H, Tq, Dh) -> (B, Tq, H*Dh)
        return self._output(F, context, head_gate), attn_weights  # (B, Tq, D), (B*H, Tq, Tk)

    def attend_cached(self, F, queries, k_cache, v_cache, visible, head_gate=None, fused=False):
        """Self-attention of one new position per row over itself and a cache of the earlier
        ones (incremental decoding, `mtx.model.incremental`): queries (R, 1, D), caches
        (R*H, cap, Dh) whose first t positions are valid, visible (R,) int32 = t + 1 ->
        (output (R, 1, D), the position's keys and values (R*H, 1, Dh) each, to be cached).
        The new key is scored beside the cache rather than written into it first, so a traced
        graph never writes to its inputs: weights over [new, cache[:t]]. With one position
        per row, splitting into heads and merging them back are reshapes (no transpose). With
        ``fused`` the native kernel attends, reading only the t valid positions of the cache
        (`ops.cached_attention`)."""
        def split(x):  # (R, 1, H*Dh) -> (R*H, 1, Dh)
            return ops.reshape(F, x, (-1, 1, self.head_dim))
        q_heads, k_new, v_new = (split(w(queries)) for w in (self.W_q, self.W_k, self.W_v))
        lens = F.np.repeat(visible, self.num_heads, axis=0)  # (R*H,) t + 1
        if fused:
            context = ops.cached_attention(F, q_heads, k_cache, v_cache, lens.astype("float32"),
                                           self.attention._scale, (k_new, v_new))
        else:
            context = self._attend_new_and_cache(F, q_heads, k_new, v_new, k_cache, v_cache,
                                                 lens)
        context = ops.reshape(F, context, (-1, 1, self.num_heads * self.head_dim))  # (R, 1, H*Dh)
        return self._output(F, context, head_gate), k_new, v_new

    def _attend_new_and_cache(self, F, q_heads, k_new, v_new, k_cache, v_cache, lens):
        """`attend_cached`'s attention with MXNet's operators: q_heads, k_new, v_new
        (R*H, 1, Dh), caches (R*H, cap, Dh), lens (R*H,) = t + 1 -> context (R*H, 1, Dh)."""
        new_score = F.np.sum(q_heads * k_new, axis=-1, keepdims=True)  # (R*H, 1, 1)
        cached_scores = F.npx.batch_dot(q_heads, k_cache, transpose_b=True)  # (R*H, 1, cap)
        scores = ops.scale(F, F.np.concatenate([new_score, cached_scores], axis=-1),
                           self.attention._scale)  # (R*H, 1, 1 + cap)
        weights = F.npx.softmax(scores, length=ops.reshape(F, lens, (-1, 1)), axis=-1,
                                use_length=True)  # (R*H, 1, 1 + cap)
        on_new = ops.legacy(F, "slice_axis", weights, axis=-1, begin=0, end=1)  # (R*H, 1, 1)
        on_cache = ops.legacy(F, "slice_axis", weights, axis=-1, begin=1, end=None)
        return on_new * v_new + F.npx.batch_dot(on_cache, v_cache)  # (R*H, 1, Dh)

    def _output(self, F, context, head_gate):
        """W_o of the heads' context (B, Tq, H*Dh) -> (B, Tq, D), each head scaled by its gate.
        In a traced graph the gate scales W_o's weight columns (D, H*Dh): in training that is
        cheaper than scaling the (B, T, H*Dh) context and its gradient (its size does not grow
        with the batch). Imperative calls (decoding one position at a time) scale the small
        context instead, so W_o's own cached graph is always called without a gate."""
        if head_gate is None:
            return self.W_o(context)
        if F is nd:
            columns = F.np.repeat(head_gate.astype("float32", copy=False), self.head_dim)
            return self.W_o(context * columns.reshape(1, 1, -1))  # (H,) -> (1, 1, H*Dh)
        return self.W_o(context, head_gate)
