"""Transformer decoder: causal self-attention, cross-attention to the encoder memory, FFN.

Training runs all target positions at once (`hybrid_forward`). Inference runs one position at a
time (`DecoderBlock.step`, driven by `mtx.model.incremental`) over caches of the earlier
positions' self-attention keys/values and of the source's cross-attention keys/values.
"""
from mxnet.gluon import nn
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from . import ops
from .attention import MultiHeadAttention, gate_row
from ..config import ModelConfig
from .layers import LayerNorm, PositionWiseFFN, Residual


@use_np
class DecoderBlock(HybridBlock):
    """Decoder layer ``layer``: (B, T, D) with memory (B, S, D) -> (B, T, D). Its attentions
    take rows ``self.self_row`` and ``self.cross_row`` of the model's head gates."""

    def __init__(self, cfg: ModelConfig, layer, **kwargs):
        super().__init__(**kwargs)
        D = cfg.num_hiddens
        attn = dict(dropout=cfg.attention_dropout, in_units=D, head_dim=cfg.head_dim)
        self.self_row = cfg.attention_row("decoder self", layer)
        self.cross_row = cfg.attention_row("decoder cross", layer)
        with self.name_scope():
            self.self_attention = MultiHeadAttention(D, cfg.heads_of(self.self_row), **attn)
            self.addnorm1 = Residual(D, cfg.dropout, cfg.pre_norm)
            self.cross_attention = MultiHeadAttention(D, cfg.heads_of(self.cross_row), **attn)
            self.addnorm2 = Residual(D, cfg.dropout, cfg.pre_norm)
            self.ffn = PositionWiseFFN(cfg.ffn_num_hiddens, D)
            self.addnorm3 = Residual(D, cfg.dropout, cfg.pre_norm)

    def attention_rows(self):
        """{gate row: MultiHeadAttention} of this layer."""
        return {self.self_row: self.self_attention, self.cross_row: self.cross_attention}

    def _gates(self, head_gates):
        """(self, cross) gates (H,) of this layer from the model's (A, H) gates, or Nones."""
        return (gate_row(head_gates, self.self_row, self.self_attention.num_heads),
                gate_row(head_gates, self.cross_row, self.cross_attention.num_heads))

    def hybrid_forward(self, F, Y, memory, src_valid_len, self_valid_len, head_gates=None):
        return self.forward_with_weights(F, Y, memory, src_valid_len, self_valid_len,
                                         head_gates)[0]

    def forward_with_weights(self, F, Y, memory, src_valid_len, self_valid_len, head_gates=None):
        """head_gates None | (A, H) -> (output (B, T, D), self weights (B*H, T, T), cross
        weights (B*H, T, S))."""
        self_gate, cross_gate = self._gates(head_gates)
        Y, (self_weights,), cross_weights = self._sublayers(
            Y, lambda h: self.self_attention.attend(F, h, h, h, self_valid_len, self_gate),
            lambda h: self.cross_attention.attend(F, h, memory, memory, src_valid_len,
                                                  cross_gate))
        return Y, self_weights, cross_weights

    def step(self, F, y, self_cache, cross_cache, visible, src_valid_len, head_gates, beam_size,
             fused=False):
        """One position of R = B*K hypotheses (rows b*K + k): y (R, 1, D) -> (R, 1, D), the
        position's self-attention keys and values (R*H, 1, Dh) each (the caller caches them),
        and the cross-attention weights (B*H, K, S). ``self_cache``: this layer's keys and
        values of the t earlier positions, (R*H, cap, Dh) each, visible (R,) = t + 1;
        ``cross_cache``: the source's, (B*H, S, Dh) each: the K queries of a sentence attend to
        them as one (B, K, D) batch. With ``fused`` both attentions run in the native kernel
        (`mtx.model.ops.cached_attention`) and the cross-attention weights are None."""
        self_gate, cross_gate = self._gates(head_gates)

        def attend_source(h):  # (R, 1, D) -> (B, K, D) queries -> (R, 1, D)
            out, weights = self.cross_attention.attend(
                F, ops.reshape(F, h, (-1, beam_size, -2)), None, None, src_valid_len,
                cross_gate, kv_heads=cross_cache, fused=fused)
            return ops.reshape(F, out, (-1, 1, -2)), weights
        y, (k_new, v_new), cross_weights = self._sublayers(
            y, lambda h: self.self_attention.attend_cached(F, h, *self_cache, visible, self_gate,
                                                           fused),
            attend_source)
        return y, (k_new, v_new), cross_weights

    def _sublayers(self, Y, attend_self, attend_cross):
        """The layer's three sublayers, the one block of training and of the cached step:
        Y -> (output, what ``attend_self`` gave beside its output, what ``attend_cross`` gave
        beside it). ``attend_self(h)``, ``attend_cross(h)``: a sublayer's input -> (its output,
        ...)."""
        out, *self_more = attend_self(self.addnorm1.sublayer_input(Y))
        Y = self.addnorm1(Y, out)
        out, cross_more = attend_cross(self.addnorm2.sublayer_input(Y))
        Y = self.addnorm2(Y, out)
        return self.addnorm3(Y, self.ffn(self.addnorm3.sublayer_input(Y))), self_more, cross_more


@use_np
class Decoder(HybridBlock):
    """Embedded target (B, T, D), memory (B, S, D), src_valid_len (B,), self_valid_len (B, T),
    head_gates None | (A, H) (the model's gates, all rows; None: no gating) -> hidden states
    (B, T, D)."""

    def __init__(self, cfg: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.pre_norm = cfg.pre_norm
        with self.name_scope():
            self.blocks = nn.HybridSequential()
            for i in range(cfg.num_decoder_layers):
                self.blocks.add(DecoderBlock(cfg, i))
            self.final_norm = LayerNorm(in_channels=cfg.num_hiddens) if cfg.pre_norm else None

    def hybrid_forward(self, F, Y, memory, src_valid_len, self_valid_len, head_gates=None):
        return self.forward_with_weights(F, Y, memory, src_valid_len, self_valid_len,
                                         head_gates)[0]

    def forward_with_weights(self, F, Y, memory, src_valid_len, self_valid_len, head_gates=None):
        """-> (hidden (B, T, D), {gate row: weights, self (B*H, T, T) or cross (B*H, T, S)})."""
        weights = {}
        for block in self.blocks:
            Y, weights[block.self_row], weights[block.cross_row] = block.forward_with_weights(
                F, Y, memory, src_valid_len, self_valid_len, head_gates)
        return (self.final_norm(Y) if self.pre_norm else Y), weights
