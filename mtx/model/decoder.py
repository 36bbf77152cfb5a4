"""Transformer decoder: causal self-attention, cross-attention to the encoder memory, FFN.

Training runs all target positions at once (`hybrid_forward`). Inference runs one position at a
time (`step`) with a cache: the self-attention keys/values of earlier positions are kept per layer
and grow by one position a step; the cross-attention keys/values are computed once per sentence.
"""
from mxnet import nd, np
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
        h = self.addnorm1.sublayer_input(Y)
        out, self_weights = self.self_attention.attend(F, h, h, h, self_valid_len, self_gate)
        Y = self.addnorm1(Y, out)
        h = self.addnorm2.sublayer_input(Y)
        out, cross_weights = self.cross_attention.attend(F, h, memory, memory, src_valid_len,
                                                         cross_gate)
        Y = self.addnorm2(Y, out)
        return self.addnorm3(Y, self.ffn(self.addnorm3.sublayer_input(Y))), self_weights, cross_weights

    def step(self, y, cache, src_valid_len, head_gates=None, beam_size=1):
        """One position of B*K hypotheses (rows b*K + k): y (B*K, 1, D) -> (B*K, 1, D).
        ``cache`` holds this layer's 'self' keys and values of the earlier positions, each
        (B*K*H, t, Dh), grown here, and the 'cross' ones of the source, each (B*H, S, Dh): the
        K queries of a sentence attend to them as one (B, K, D) batch. Also returns the self-
        and cross-attention weights, (B*K*H, 1, t+1) and (B*H, K, S)."""
        self_gate, cross_gate = self._gates(head_gates)
        h = self.addnorm1.sublayer_input(y)
        k_new, v_new = self.self_attention.project_kv(nd, h, h)  # (B*H, 1, Dh) each
        if cache.get("self") is not None:
            k_new = np.concatenate([cache["self"][0], k_new], axis=1)  # (B*H, t+1, Dh)
            v_new = np.concatenate([cache["self"][1], v_new], axis=1)
        cache["self"] = (k_new, v_new)
        # every cached position is visible; lengths (not None) keep the attention block's cached
        # graph the same as in forward_with_weights
        visible = np.full((y.shape[0],), k_new.shape[1], dtype="int32", ctx=y.ctx)  # (B,)
        out, self_weights = self.self_attention.attend(nd, h, None, None, visible, self_gate,
                                                       kv_heads=cache["self"])
        y = self.addnorm1(y, out)
        h = ops.reshape(nd, self.addnorm2.sublayer_input(y), (-1, beam_size, -2))  # (B, K, D)
        out, cross_weights = self.cross_attention.attend(nd, h, None, None, src_valid_len,
                                                         cross_gate, kv_heads=cache["cross"])
        y = self.addnorm2(y, ops.reshape(nd, out, (-1, 1, -2)))  # (B, K, D) -> (B*K, 1, D)
        y = self.addnorm3(y, self.ffn(self.addnorm3.sublayer_input(y)))
        return y, self_weights, cross_weights


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

    def init_cache(self, memory, src_valid_len):
        """Per layer: cross-attention keys/values of the memory, computed once; empty self cache."""
        return [{"cross": block.cross_attention.project_kv(nd, memory, memory), "self": None}
                for block in self.blocks]

    def step(self, y, caches, src_valid_len, head_gates=None, beam_size=1):
        """y (B*K, 1, D), head_gates None | (A, H) -> (B*K, 1, D) and the last layer's
        cross-attention weights (B*H, K, S) (`DecoderBlock.step`)."""
        for block, cache in zip(self.blocks, caches):
            y, _, cross_weights = block.step(y, cache, src_valid_len, head_gates, beam_size)
        return (self.final_norm(y) if self.pre_norm else y), cross_weights
