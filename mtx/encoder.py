"""Transformer encoder: self-attention masked by the source valid lengths, then the FFN."""
from mxnet.gluon import nn
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from .attention import MultiHeadAttention
from .config import ModelConfig
from .layers import LayerNorm, PositionWiseFFN, Residual


@use_np
class EncoderBlock(HybridBlock):
    """(B, S, D) -> (B, S, D)."""

    def __init__(self, cfg: ModelConfig, num_heads, **kwargs):
        super().__init__(**kwargs)
        D = cfg.num_hiddens
        with self.name_scope():
            self.attention = MultiHeadAttention(D, num_heads, cfg.attention_dropout,
                                                in_units=D, head_dim=cfg.head_dim)
            self.addnorm1 = Residual(D, cfg.dropout, cfg.pre_norm)
            self.ffn = PositionWiseFFN(cfg.ffn_num_hiddens, D)
            self.addnorm2 = Residual(D, cfg.dropout, cfg.pre_norm)

    def hybrid_forward(self, F, X, src_valid_len, head_gate=None):
        return self.forward_with_weights(F, X, src_valid_len, head_gate)[0]

    def forward_with_weights(self, F, X, src_valid_len, head_gate=None):
        """-> (output (B, S, D), self-attention weights (B*H, S, S))."""
        h = self.addnorm1.sublayer_input(X)
        out, weights = self.attention.attend(F, h, h, h, src_valid_len, head_gate)
        X = self.addnorm1(X, out)
        return self.addnorm2(X, self.ffn(self.addnorm2.sublayer_input(X))), weights


@use_np
class Encoder(HybridBlock):
    """Embedded source (B, S, D), src_valid_len (B,), head_gates None | (Le, H) -> memory (B, S, D)."""

    def __init__(self, cfg: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.pre_norm = cfg.pre_norm
        with self.name_scope():
            self.blocks = nn.HybridSequential()
            for i in range(cfg.num_encoder_layers):
                self.blocks.add(EncoderBlock(cfg, cfg.heads_of(i)))
            self.final_norm = LayerNorm(in_channels=cfg.num_hiddens) if cfg.pre_norm else None

    def hybrid_forward(self, F, X, src_valid_len, head_gates=None):
        for i, block in enumerate(self.blocks):
            X = block(X, src_valid_len, None if head_gates is None else head_gates[i])
        return self.final_norm(X) if self.pre_norm else X
