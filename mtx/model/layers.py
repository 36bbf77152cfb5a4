"""Building blocks around attention: embeddings with positions, the FFN, residual + LayerNorm."""
import math

import numpy as onp
from mxnet import init
from mxnet.gluon import nn
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from .. import kernels
from . import ops
from .precision import Linear


def sinusoid_table(max_len, num_hiddens):
    """(max_len, D) table of sines and cosines (Vaswani et al. 2017), as in the d2l book."""
    positions = onp.arange(max_len, dtype=onp.float32)[:, None]
    freqs = onp.power(10000, onp.arange(0, num_hiddens, 2, dtype=onp.float32) / num_hiddens)
    table = onp.zeros((max_len, num_hiddens), dtype=onp.float32)
    table[:, 0::2] = onp.sin(positions / freqs)
    table[:, 1::2] = onp.cos(positions / freqs[: num_hiddens // 2])
    return table


@use_np
class TokenEmbedding(HybridBlock):
    """Token ids (B, L) -> sqrt(D) * embedding + position, then dropout: (B, L, D). With
    ``first_position`` (1,) int32 (incremental decoding) the L positions start there, not at 0."""

    def __init__(self, vocab_size, num_hiddens, dropout, max_len, **kwargs):
        super().__init__(**kwargs)
        self._scale = math.sqrt(num_hiddens)
        with self.name_scope():
            self.embedding = nn.Embedding(vocab_size, num_hiddens,
                                          weight_initializer=init.Normal(num_hiddens ** -0.5))
            self.positions = self.params.get_constant("positions",
                                                      sinusoid_table(max_len, num_hiddens))
            self.dropout = nn.Dropout(dropout)

    def hybrid_forward(self, F, tokens, first_position=None, positions=None):
        steps = F.npx.arange_like(tokens, axis=1).astype("int32")  # (L,)
        if first_position is not None:
            steps = steps + first_position
        position_vectors = F.np.expand_dims(F.np.take(positions, steps, axis=0), 0)  # (1, L, D)
        embedded = ops.scale(F, self.embedding(tokens), self._scale)  # (B, L, D)
        return self.dropout(ops.legacy(F, "broadcast_add", embedded, position_vectors))


@use_np
class PositionWiseFFN(HybridBlock):
    """(B, L, D) -> (B, L, D): Dense(ffn_num_hiddens, relu) then Dense(D). Dropout is applied to
    the output by the residual around it (no inner dropout, as in gluonnlp and fairseq)."""

    def __init__(self, ffn_num_hiddens, num_hiddens, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense1 = Linear(ffn_num_hiddens, activation="relu", flatten=False,
                                   in_units=num_hiddens)
            self.dense2 = Linear(num_hiddens, flatten=False, in_units=ffn_num_hiddens)

    def hybrid_forward(self, F, X):
        return self.dense2(self.dense1(X))


@use_np
class LayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` (same parameters and names, so checkpoints load either way) computed by
    mtx's native kernel (`mtx.kernels`) when it loads and the axis is the last one, by MXNet's
    operator otherwise. The choice is made once, when the layer is built (`mtx.kernels.status`
    records it; speed in docs/performance.md). (..., D) -> (..., D)."""

    def __init__(self, axis=-1, **kwargs):
        super().__init__(axis=axis, **kwargs)
        self._native = axis == -1 and kernels.load()

    def hybrid_forward(self, F, data, gamma, beta):
        if not self._native:
            return super().hybrid_forward(F, data, gamma, beta)
        out = F.mtx_layer_norm(data.as_nd_ndarray(), gamma.as_nd_ndarray(),
                               beta.as_nd_ndarray(), eps=self._epsilon)
        return out[0].as_np_ndarray()  # (mean and 1/std per row are kept for the backward)


@use_np
class Residual(HybridBlock):
    """Residual connection with LayerNorm around a sublayer: post-norm ``norm(X + drop(Y))`` as in
    the book, or pre-norm ``X + drop(Y)`` where the caller applies `norm` to the sublayer input."""

    def __init__(self, num_hiddens, dropout, pre_norm, **kwargs):
        super().__init__(**kwargs)
        self.pre_norm = pre_norm
        with self.name_scope():
            self.dropout = nn.Dropout(dropout)
            self.norm = LayerNorm(in_channels=num_hiddens)

    def sublayer_input(self, X):
        return self.norm(X) if self.pre_norm else X

    def hybrid_forward(self, F, X, Y):
        out = ops.add(F, X, self.dropout(Y))
        return out if self.pre_norm else self.norm(out)
