"""An mtx Transformer as a CTranslate2 model spec (`ctranslate2.specs.TransformerSpec`), built with
CTranslate2's own Python model-spec API; `mtx.deploy.export` has it validated, quantized and
written by a `ctranslate2.converters.Converter`, never by writing the binary format by hand.

What maps to what (mtx -> CTranslate2; every one of these changes the numbers):

    src_embed / tgt_embed .embedding      encoder.embeddings[0] / decoder.embeddings, times
                                          sqrt(D) (``scale_embeddings``, as `TokenEmbedding`)
    the book's positions (sin in even, cos in odd columns, max_len rows)
                                          position_encodings.encodings: the table itself, since
                                          CTranslate2's built-in sinusoids put all sines first
    W_q, W_k, W_v (no bias), W_o          self_attention.linear[0] = [W_q; W_k; W_v], linear[1];
                                          cross: attention.linear[0] = W_q, [1] = [W_k; W_v], [2]
    addnorm1/2/3.norm, epsilon 1e-5       (self_)attention.layer_norm, ffn.layer_norm; pre- or
                                          post-norm as ``model.pre_norm`` (``pre_norm`` of the spec)
    final_norm (pre-norm only)            encoder.layer_norm, decoder.layer_norm
    ffn.dense1 (relu), dense2             ffn.linear_0, ffn.linear_1
    output (weight, bias; tied or not)    decoder.projection (a tied matrix is one array)
    vocabulary, pad/unk/bos/eos 0..3      the tokenizer's pieces in id order for source and
                                          target (each side's own when separate, data.vocab);
                                          the source gets EOS appended
                                          (``add_source_eos``), decoding starts from <s>

Pruned runs (`ModelConfig.heads_per_layer`): CTranslate2 has one head count per model, so a
layer with h < H heads gets H - h heads of zero weights (W_q, W_k, W_v rows and W_o columns).
Such a head's values are 0, so its context is 0 and W_o's zero columns add exact zeros: the
outputs are those of the pruned model, but CTranslate2 computes (and stores) all H heads, so
pruning saves nothing there (`padded_heads` in mtx_export.json counts them).
"""
import numpy as onp

from ..errors import ConfigError
from ..data.vocab import SPECIALS
from . import require

LAYER_NORM_EPSILON = 1e-5  # Gluon's LayerNorm default, which mtx keeps


def _array(param):
    """A Gluon parameter as a float32 host array; stored half-precision weights are refused."""
    value = param.data().asnumpy()
    if value.dtype != onp.float32:
        raise ConfigError(f"parameter {param.name} is stored as {value.dtype}; the export reads "
                          f"float32 weights only (train without half-precision weights)")
    return value


def _pad_rows(weight, rows):
    """(r, D) -> (rows, D), zero rows appended."""
    return onp.concatenate([weight, onp.zeros((rows - weight.shape[0], weight.shape[1]),
                                              weight.dtype)])


def _set_linear(spec, weight, bias=None):
    spec.weight = onp.ascontiguousarray(weight)
    if bias is not None:
        spec.bias = bias


def _set_norm(spec, norm):
    spec.gamma, spec.beta = _array(norm.gamma), _array(norm.beta)


def _attention(spec, block, num_heads, self_attention):
    """A `MultiHeadAttention` block into a MultiHeadAttentionSpec, its heads zero-padded to
    ``num_heads``. -> the number of padded heads."""
    inner = num_heads * block.head_dim
    q, k, v = (_pad_rows(_array(w.weight), inner) for w in (block.W_q, block.W_k, block.W_v))
    w_o = _pad_rows(_array(block.W_o.weight).T, inner).T  # (D, h*Dh) -> (D, H*Dh)
    if self_attention:
        _set_linear(spec.linear[0], onp.concatenate([q, k, v]))  # (3*H*Dh, D)
    else:
        _set_linear(spec.linear[0], q)
        _set_linear(spec.linear[1], onp.concatenate([k, v]))  # (2*H*Dh, D)
    _set_linear(spec.linear[-1], w_o)
    return num_heads - block.num_heads


def _ffn(spec, ffn):
    _set_linear(spec.linear_0, _array(ffn.dense1.weight), _array(ffn.dense1.bias))
    _set_linear(spec.linear_1, _array(ffn.dense2.weight), _array(ffn.dense2.bias))


def _embedding(stack_spec, embed_spec, token_embedding):
    embed_spec.weight = _array(token_embedding.embedding.weight)
    stack_spec.scale_embeddings = True
    stack_spec.position_encodings.encodings = _array(token_embedding.positions)


def transformer_spec(model, vocabulary, source_vocabulary=None):
    """An mtx `Transformer` and its vocabulary (pieces in id order; the source's when separate)
    -> (TransformerSpec, number of zero heads added)."""
    specs = require().specs
    cfg = model.cfg
    H, padded = cfg.num_heads, 0
    encoder = specs.TransformerEncoderSpec(cfg.num_encoder_layers, H, pre_norm=cfg.pre_norm)
    decoder = specs.TransformerDecoderSpec(cfg.num_decoder_layers, H, pre_norm=cfg.pre_norm)
    _embedding(encoder, encoder.embeddings[0], model.src_embed)
    _embedding(decoder, decoder.embeddings, model.tgt_embed)
    for layer, block in zip(encoder.layer, model.encoder.blocks):
        padded += _attention(layer.self_attention, block.attention, H, True)
        _set_norm(layer.self_attention.layer_norm, block.addnorm1.norm)
        _ffn(layer.ffn, block.ffn)
        _set_norm(layer.ffn.layer_norm, block.addnorm2.norm)
    for layer, block in zip(decoder.layer, model.decoder.blocks):
        padded += _attention(layer.self_attention, block.self_attention, H, True)
        _set_norm(layer.self_attention.layer_norm, block.addnorm1.norm)
        padded += _attention(layer.attention, block.cross_attention, H, False)
        _set_norm(layer.attention.layer_norm, block.addnorm2.norm)
        _ffn(layer.ffn, block.ffn)
        _set_norm(layer.ffn.layer_norm, block.addnorm3.norm)
    if cfg.pre_norm:
        _set_norm(encoder.layer_norm, model.encoder.final_norm)
        _set_norm(decoder.layer_norm, model.decoder.final_norm)
    _set_linear(decoder.projection, _array(model.output.weight), _array(model.output.bias))
    spec = specs.TransformerSpec(encoder, decoder)
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.register_source_vocabulary(source_vocabulary or vocabulary)
    spec.register_target_vocabulary(vocabulary)
    return spec, padded


def vocabulary_of(tokenizer, vocab_size):
    """The tokenizer's pieces in id order; ConfigError if they cannot be CTranslate2's."""
    pieces = tokenizer.pieces(range(len(tokenizer)))
    if len(pieces) != vocab_size:
        raise ConfigError(f"the tokenizer has {len(pieces)} pieces but the model "
                          f"{vocab_size} embeddings; export a run with its own tokenizer")
    if tuple(pieces[:len(SPECIALS)]) != SPECIALS or len(set(pieces)) != len(pieces):
        raise ConfigError(f"the tokenizer's pieces must be unique and start with "
                          f"{', '.join(SPECIALS)}; CTranslate2 looks tokens up by their text")
    return pieces
