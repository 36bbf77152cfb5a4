"""Model FLOPs of one training step, from the `ModelConfig` the step was built with; the matrix
products of a training step and of a cached decoding step (`step_products`, `decode_step_parts`).

Counted on real (unpadded) tokens, forward + backward = 3 x forward, so a multiply-add is 2 FLOPs
forward and 6 per step. With D = num_hiddens, F = ffn_num_hiddens, V = vocab_size, Le/Ld encoder
and decoder layers, and per sentence S source and T target tokens:
    dense       6 x (params the token passes through) x tokens:
                encoder layer 4 D^2 (Q, K, V, out) + 2 D F (FFN)   per source token
                decoder layer 8 D^2 (self + cross) + 2 D F         per target token
                output projection D V                              per target token
    attention   3 x 2 x 2 x D x Tq x Tk per layer (scores and weighted sum):
                Le x S^2 + Ld x (T^2 + T S)
This is the count of the peers' comparison (the same formula for gluonnlp and d2l): it charges the
cross-attention K/V projections to target tokens and ignores softmax, LayerNorm and embeddings.
"""
import numpy as onp

from ..errors import ConfigError

FLOPS_PER_MULTIPLY_ADD = 2
FORWARD_AND_BACKWARD = 3   # the backward pass costs about twice the forward
ATTENTION_PRODUCTS = 2     # Q K^T and weights x V


def train_flops(model_cfg, batch):
    """FLOPs of one training step of ``model_cfg`` on ``batch`` (its src_valid_len (B,) and
    tgt_valid_len (B,) count the tokens)."""
    if model_cfg.heads_per_layer is not None:
        raise ConfigError("the FLOP count assumes num_heads in every layer; a pruned model "
                          "(model.heads_per_layer) is not a benchmark configuration")
    d, ffn = model_cfg.num_hiddens, model_cfg.ffn_num_hiddens
    enc_layers, dec_layers = model_cfg.num_encoder_layers, model_cfg.num_decoder_layers
    step = FLOPS_PER_MULTIPLY_ADD * FORWARD_AND_BACKWARD
    enc = enc_layers * (4 * d * d + 2 * d * ffn)
    dec = dec_layers * (8 * d * d + 2 * d * ffn)
    out = d * model_cfg.vocab_size
    s = onp.asarray(batch.src_valid_len).astype(onp.int64)
    t = onp.asarray(batch.tgt_valid_len).astype(onp.int64)
    dense = step * (enc * s.sum() + (dec + out) * t.sum())
    attn = step * ATTENTION_PRODUCTS * d * (enc_layers * (s * s).sum()
                                            + dec_layers * ((t * t).sum() + (t * s).sum()))
    return float(dense + attn)


def step_products(model_cfg, src_rows, tgt_rows):
    """The matrix products (FullyConnected) one training step of ``model_cfg`` runs, with the
    rows they really run on (padded positions included; cross-attention keys and values on the
    source rows): [(rows, in, out, how many per step)]."""
    d, ffn = model_cfg.num_hiddens, model_cfg.ffn_num_hiddens
    enc_layers, dec_layers = model_cfg.num_encoder_layers, model_cfg.num_decoder_layers
    return [(src_rows, d, d, 4 * enc_layers + 2 * dec_layers),  # encoder Q K V O, cross K V
            (src_rows, d, ffn, enc_layers), (src_rows, ffn, d, enc_layers),
            (tgt_rows, d, d, 6 * dec_layers),  # decoder self Q K V O, cross Q O
            (tgt_rows, d, ffn, dec_layers), (tgt_rows, ffn, d, dec_layers),
            (tgt_rows, d, model_cfg.vocab_size, 1)]  # the output layer


def decode_step_parts(model_cfg, rows, src_len, cache_len):
    """The matrix products of one cached decoding step of ``model_cfg`` (a pruned model's
    `heads_per_layer` included) for ``rows`` hypotheses against ``src_len`` source positions and
    ``cache_len`` earlier target positions, by part of the decoder: {part: [(kind, shape,
    count)]}, kind "dense" with shape (rows, in, out), or "batched" with shape (batch, m, k, n)
    for a batch of (m, k) x (k, n) products. The cross-attention keys and values are projected
    once per sentence, before the steps, and are not part of a step."""
    d, ffn, dh = model_cfg.num_hiddens, model_cfg.ffn_num_hiddens, model_cfg.head_dim
    parts = {"self-attention projections": [], "self-attention products": [],
             "cross-attention projections": [], "cross-attention products": []}
    keys = {"decoder self": cache_len + 1, "decoder cross": src_len}
    for layer in model_cfg.attention_layers():
        if layer.kind not in keys:
            continue
        side, width = layer.kind.split()[1], model_cfg.heads_of(layer.row) * dh
        batch = rows * model_cfg.heads_of(layer.row)
        projections = 3 if side == "self" else 1  # Q (K, V of the new position) ...
        parts[f"{side}-attention projections"] += [("dense", (rows, d, width), projections),
                                                   ("dense", (rows, width, d), 1)]  # ... and O
        parts[f"{side}-attention products"] += [
            ("batched", (batch, 1, dh, keys[layer.kind]), 1),   # scores q k^T
            ("batched", (batch, 1, keys[layer.kind], dh), 1)]   # weights x values
    parts["FFN"] = [("dense", (rows, d, ffn), model_cfg.num_decoder_layers),
                    ("dense", (rows, ffn, d), model_cfg.num_decoder_layers)]
    parts["output layer"] = [("dense", (rows, d, model_cfg.vocab_size), 1)]
    return parts
