"""The sequence-to-sequence Transformer: embeddings, encoder, decoder, output projection."""
from mxnet import nd, np
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from ..config import ModelConfig
from . import incremental
from .decoder import Decoder
from .encoder import Encoder
from .layers import TokenEmbedding
from .masks import causal_valid_len
from .precision import as_float32, fully_connected


@use_np
class OutputProjection(HybridBlock):
    """(B, T, D) -> logits (B, T, V) in the compute dtype (`as_float32` makes them float32).
    Built with ``tied_to`` (an nn.Embedding), the output layer uses the embedding matrix (V, D)
    as its weight (Gluon parameter sharing by name)."""

    def __init__(self, vocab_size, num_hiddens, tied_to=None, **kwargs):
        if tied_to is not None:
            kwargs.update(prefix=tied_to.prefix, params=tied_to.params)
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(vocab_size, num_hiddens))
            self.bias = self.params.get("bias", shape=(vocab_size,), init="zeros")

    compute_dtype = "float32"  # `mtx.model.precision.set_precision`

    def hybrid_forward(self, F, X, weight, bias):
        return fully_connected(F, X, weight, bias, self.vocab_size, self.compute_dtype,
                               to_float32=False)


@use_np
class Transformer(HybridBlock):
    """forward(src_tokens (B, S), src_valid_len (B,), tgt_in (B, T), head_gates None | (A, H))
    -> logits (B, T, V), float32, or with ``logits_in_compute_dtype`` set (before the first
    forward) in the output layer's compute dtype, for a loss that reads bfloat16 itself.

    Head gates: row a scales the heads of attention layer a of `ModelConfig.attention_layers`
    (`attention_layers` gives the blocks); 1 keeps a head, 0 removes it. H = cfg.num_heads; a
    pruned layer with fewer heads reads the first entries of its row (its kept heads in order)
    and ignores the rest. A hybridized model's graph always takes the gates as an input (all
    ones when not given), so one traced graph serves calls with and without them; imperative
    calls (decoding steps, `attention_weights`) gate only when gates are given.

    With ``cfg.tie_embeddings`` source, target and output share one (V, D) matrix (one joint
    vocabulary); with separate ones (``cfg.src_vocab_size`` > 0) the target and output only.
    `encode`, `init_state` and `step` are the inference path (`mtx.decoding.search`)."""

    logits_in_compute_dtype = False  # `mtx.training.build.build_pieces` sets it

    def __init__(self, cfg: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        if cfg.vocab_size < 1:
            raise ValueError("ModelConfig.vocab_size is not set; it comes from the data")
        self.cfg = cfg
        V, D = cfg.vocab_size, cfg.num_hiddens
        with self.name_scope():
            self.src_embed = TokenEmbedding(cfg.src_vocab_size or V, D, cfg.dropout, cfg.max_len)
            self.tgt_embed_own = (None if cfg.tie_embeddings and not cfg.src_vocab_size
                                  else TokenEmbedding(V, D, cfg.dropout, cfg.max_len))
            self.encoder = Encoder(cfg)
            self.decoder = Decoder(cfg)
            tied_to = self.tgt_embed.embedding if cfg.tie_embeddings else None
            self.output = OutputProjection(V, D, tied_to=tied_to)
        if cfg.tie_embeddings:
            assert self.output.weight is self.tgt_embed.embedding.weight

    @property
    def tgt_embed(self):
        return self.src_embed if self.tgt_embed_own is None else self.tgt_embed_own

    def count_parameters(self):
        """Trainable parameters (the positional table is a constant and not counted; a tied
        embedding counts once)."""
        return sum(int(p.data().size) for p in self.collect_params().values()
                   if p.grad_req != "null")

    def attention_layers(self):
        """(row, name, MultiHeadAttention block) of every attention layer, in the order of
        `ModelConfig.attention_layers` (the rows of head gates)."""
        blocks = {row: block for stack in (self.encoder, self.decoder) for layer in stack.blocks
                  for row, block in layer.attention_rows().items()}
        for layer in self.cfg.attention_layers():
            yield layer.row, layer.name, blocks[layer.row]

    def _gates(self, head_gates, like):
        """``head_gates`` as given; if None, ones (A, H) for a hybridized model (its traced
        graphs take them as an input), else None (imperative calls skip gating)."""
        if head_gates is None and self._active:  # Gluon's "hybridized" flag
            return np.ones((self.cfg.num_attention_layers, self.cfg.num_heads), ctx=like.ctx)
        return head_gates

    def forward(self, src_tokens, src_valid_len, tgt_in, head_gates=None):
        # The gates are always an input of the traced graph (ones by default), so one graph
        # serves calls with and without them. In the graph they scale W_o's (D, H*Dh) weight
        # (`MultiHeadAttention._output`): one small multiply per attention layer, where scaling
        # the (B, T, H*Dh) context would add a broadcast to the backward pass of every batch.
        return super().forward(src_tokens, src_valid_len, tgt_in,
                               self._gates(head_gates, src_tokens))

    def hybrid_forward(self, F, src_tokens, src_valid_len, tgt_in, head_gates=None):
        memory = self.encoder(self.src_embed(src_tokens), src_valid_len, head_gates)  # (B, S, D)
        Y = self.tgt_embed(tgt_in)  # (B, T, D)
        self_valid_len = causal_valid_len(F, Y, src_valid_len)  # (B, T)
        hidden = self.decoder(Y, memory, src_valid_len, self_valid_len, head_gates)
        logits = self.output(hidden)  # (B, T, V)
        if self.logits_in_compute_dtype:
            return logits
        return as_float32(F, logits, self.output.compute_dtype)

    # -- inference ---------------------------------------------------------------------------
    def encode(self, src_tokens, src_valid_len, head_gates=None):
        """(B, S) -> memory (B, S, D); head_gates None | (A, H) as in forward."""
        head_gates = self._gates(head_gates, src_tokens)
        return self.encoder(self.src_embed(src_tokens), src_valid_len, head_gates)

    def init_state(self, src_tokens, src_valid_len, head_gates=None, beam_size=1):
        """Decoder state (`mtx.model.incremental`) for incremental decoding of ``beam_size``
        hypotheses per sentence, rows b*K + k: the source's cross-attention keys/values once
        per sentence (the beams' queries attend to them together), empty self caches."""
        memory = self.encode(src_tokens, src_valid_len, head_gates)
        return incremental.init_state(self, memory, src_valid_len, head_gates, beam_size)

    def step(self, tokens, state):
        """tokens (B*K,) at position state['t'] -> log-probabilities (B*K, V); advances the
        state. Also returns the last layer's cross-attention weights (B*H, K, S). The arrays
        returned are valid until the next step."""
        return incremental.step(self, tokens, state)

    def extend(self, state, then, more):
        """One step of a search in one call: the tokens ``more[0]`` (B*K,) at position
        state['t'] through the decoder, then the search's block ``then`` over each row's
        ``then.C`` best next tokens and ``more[1:]`` -> ``then``'s outputs
        (`mtx.model.incremental.extend`); advances the state."""
        return incremental.extend(self, state, then, more)

    def reorder_state(self, state, rows, sentences=None):
        """Keep the decoder caches of hypotheses ``rows`` (R',) int32 of the R = sentences * K
        (rows b*K + k); with ``sentences`` (R'/K,) int32 also only those sentences' source side."""
        incremental.reorder_state(state, rows, sentences)

    def attention_weights(self, src_tokens, src_valid_len, tgt_in, head_gates=None):
        """Teacher-forced pass (imperative) -> one (B*H, Tq, Tk) weight array per attention
        layer, in `attention_layers` order."""
        memory, weights = self.encoder.forward_with_weights(nd, self.src_embed(src_tokens),
                                                            src_valid_len, head_gates)
        Y = self.tgt_embed(tgt_in)  # (B, T, D)
        _, decoder_weights = self.decoder.forward_with_weights(
            nd, Y, memory, src_valid_len, causal_valid_len(nd, Y, src_valid_len), head_gates)
        weights.update(decoder_weights)
        return [weights[row] for row, _, _ in self.attention_layers()]
