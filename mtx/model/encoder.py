"""Transformer encoder: self-attention masked by the source valid lengths, then the FFN."""
from mxnet.gluon import nn
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from .attention import MultiHeadAttention, gate_row
from ..config import ModelConfig
from .layers import LayerNorm, PositionWiseFFN, Residual


@use_np
class EncoderBlock(HybridBlock):
    """Encoder layer ``layer``: (B, S, D) -> (B, S, D). Its attention takes row ``self.row`` of
    the model's head gates (`ModelConfig.attention_layers`)."""

    def __init__(self, cfg: ModelConfig, layer, **kwargs):
        super().__init__(**kwargs)
        D = cfg.num_hiddens
        self.row = cfg.attention_row("encoder self", layer)
        with self.name_scope():
            self.attention = MultiHeadAttention(D, cfg.heads_of(self.row), cfg.attention_dropout,
                                                in_units=D, head_dim=cfg.head_dim)
            self.addnorm1 = Residual(D, cfg.dropout, cfg.pre_norm)
            self.ffn = PositionWiseFFN(cfg.ffn_num_hiddens, D)
            self.addnorm2 = Residual(D, cfg.dropout, cfg.pre_norm)

    def attention_rows(self):
        """{gate row: MultiHeadAttention} of this layer."""
        return {self.row: self.attention}

    def hybrid_forward(self, F, X, src_valid_len, head_gates=None):
        return self.forward_with_weights(F, X, src_valid_len, head_gates)[0]

    def forward_with_weights(self, F, X, src_valid_len, head_gates=None):
        """head_gates None | (A, H) -> (output (B, S, D), self-attention weights (B*H, S, S))."""
        h = self.addnorm1.sublayer_input(X)
        gate = gate_row(head_gates, self.row, self.attention.num_heads)
        out, weights = self.attention.attend(F, h, h, h, src_valid_len, gate)
        X = self.addnorm1(X, out)
        return self.addnorm2(X, self.ffn(self.addnorm2.sublayer_input(X))), weights


@use_np
class Encoder(HybridBlock):
    """Embedded source (B, S, D), src_valid_len (B,), head_gates None | (A, H) (the model's
    gates, all rows; None: no gating) -> memory (B, S, D)."""

    def __init__(self, cfg: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.pre_norm = cfg.pre_norm
        with self.name_scope():
            self.blocks = nn.HybridSequential()
            for i in range(cfg.num_encoder_layers):
                self.blocks.add(EncoderBlock(cfg, i))
            self.final_norm = LayerNorm(in_channels=cfg.num_hiddens) if cfg.pre_norm else None

    def hybrid_forward(self, F, X, src_valid_len, head_gates=None):
        return self.forward_with_weights(F, X, src_valid_len, head_gates)[0]

    def forward_with_weights(self, F, X, src_valid_len, head_gates=None):
        """-> (memory (B, S, D), {gate row: self-attention weights (B*H, S, S)})."""
        weights = {}
        for block in self.blocks:
            X, weights[block.row] = block.forward_with_weights(F, X, src_valid_len, head_gates)
        return (self.final_norm(X) if self.pre_norm else X), weights
