"""Model FLOPs of a training step (the MFU numerator), counted as the peers' comparison counts them
(the same formula for gluonnlp and d2l): on real (unpadded) tokens, a multiply-add is 2 FLOPs
and forward + backward 3 x forward, so 6 x the parameters a token passes through (encoder layer
4 D^2 + 2 D F a source token; decoder layer 8 D^2 + 2 D F and the output layer D V a target
token) plus attention's 2 products of D x Tq x Tk per layer (Le S^2 + Ld (T^2 + T S)). Softmax,
LayerNorm and embeddings are left out.
"""
import numpy as onp

from ..errors import ConfigError


def train_flops(model_cfg, batch):
    """FLOPs of one training step of ``model_cfg`` on ``batch`` (src_valid_len and tgt_valid_len,
    (B,) each, count the tokens)."""
    if model_cfg.heads_per_layer is not None:
        raise ConfigError("the FLOP count assumes num_heads in every layer; a pruned model "
                          "(model.heads_per_layer) is not a benchmark configuration")
    d, ffn = model_cfg.num_hiddens, model_cfg.ffn_num_hiddens
    enc_layers, dec_layers = model_cfg.num_encoder_layers, model_cfg.num_decoder_layers
    s = onp.asarray(batch.src_valid_len).astype(onp.int64)
    t = onp.asarray(batch.tgt_valid_len).astype(onp.int64)
    dense = (enc_layers * (4 * d * d + 2 * d * ffn) * s.sum()
             + (dec_layers * (8 * d * d + 2 * d * ffn) + d * model_cfg.vocab_size) * t.sum())
    attention = 2 * d * (enc_layers * (s * s).sum() + dec_layers * ((t * t).sum() + (t * s).sum()))
    return float(6 * (dense + attention))


def step_products(model_cfg, tokens):
    """The dense products of one training step of ``model_cfg``, as (rows, in, out) with
    ``tokens`` rows each (a batch's padded target tokens; the source side taken as long):
    per encoder layer W_q, W_k, W_v, W_o and the FFN's two; per decoder layer those of its self-
    and cross-attention and its FFN; the output layer."""
    d, ffn, vocab = model_cfg.num_hiddens, model_cfg.ffn_num_hiddens, model_cfg.vocab_size
    layer = [(tokens, d, ffn), (tokens, ffn, d)]
    return ((layer + [(tokens, d, d)] * 4) * model_cfg.num_encoder_layers
            + (layer + [(tokens, d, d)] * 8) * model_cfg.num_decoder_layers
            + [(tokens, d, vocab)])
