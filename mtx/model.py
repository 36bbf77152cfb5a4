"""The sequence-to-sequence Transformer: embeddings, encoder, decoder, output projection."""
from mxnet import nd, npx
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from .config import ModelConfig
from .decoder import Decoder, layer_gates
from .encoder import Encoder
from .layers import TokenEmbedding
from .masks import causal_valid_len
from .precision import fully_connected


@use_np
class OutputProjection(HybridBlock):
    """(B, T, D) -> logits (B, T, V). Built with ``tied_to`` (an nn.Embedding), the output layer
    uses the embedding matrix (V, D) as its weight (Gluon parameter sharing by name)."""

    def __init__(self, vocab_size, num_hiddens, tied_to=None, **kwargs):
        if tied_to is not None:
            kwargs.update(prefix=tied_to.prefix, params=tied_to.params)
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(vocab_size, num_hiddens))
            self.bias = self.params.get("bias", shape=(vocab_size,), init="zeros")

    compute_dtype = "float32"  # `mtx.precision.set_precision`

    def hybrid_forward(self, F, X, weight, bias):
        return fully_connected(F, X, weight, bias, self.vocab_size, self.compute_dtype)


@use_np
class Transformer(HybridBlock):
    """forward(src_tokens (B, S), src_valid_len (B,), tgt_in (B, T), head_gates None | (A, H))
    -> logits (B, T, V). A = cfg.num_attention_layers: rows are encoder self-attention layers,
    then (self, cross) for each decoder layer; 1 keeps a head, 0 removes it.

    With ``cfg.tie_embeddings`` source, target and output share one (V, D) matrix (one joint
    vocabulary). `encode`, `init_state` and `step` are the inference path (`mtx.search`)."""

    def __init__(self, cfg: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        if cfg.vocab_size < 1:
            raise ValueError("ModelConfig.vocab_size is not set; it comes from the data")
        self.cfg = cfg
        V, D = cfg.vocab_size, cfg.num_hiddens
        with self.name_scope():
            self.src_embed = TokenEmbedding(V, D, cfg.dropout, cfg.max_len)
            self.tgt_embed_own = (None if cfg.tie_embeddings
                                  else TokenEmbedding(V, D, cfg.dropout, cfg.max_len))
            self.encoder = Encoder(cfg)
            self.decoder = Decoder(cfg)
            tied_to = self.src_embed.embedding if cfg.tie_embeddings else None
            self.output = OutputProjection(V, D, tied_to=tied_to)
        if cfg.tie_embeddings:
            assert self.output.weight is self.tgt_embed.embedding.weight

    @property
    def tgt_embed(self):
        return self.src_embed if self.tgt_embed_own is None else self.tgt_embed_own

    def hybrid_forward(self, F, src_tokens, src_valid_len, tgt_in, head_gates=None):
        enc_gates, dec_gates = self._split_gates(head_gates)
        memory = self.encoder(self.src_embed(src_tokens), src_valid_len, enc_gates)  # (B, S, D)
        Y = self.tgt_embed(tgt_in)  # (B, T, D)
        self_valid_len = causal_valid_len(F, Y, src_valid_len)  # (B, T)
        hidden = self.decoder(Y, memory, src_valid_len, self_valid_len, dec_gates)
        return self.output(hidden)  # (B, T, V)

    # -- inference ---------------------------------------------------------------------------
    def _split_gates(self, head_gates):
        if head_gates is None:
            return None, None
        return head_gates[:self.cfg.num_encoder_layers], head_gates[self.cfg.num_encoder_layers:]

    def encode(self, src_tokens, src_valid_len, head_gates=None):
        """(B, S) -> memory (B, S, D). Pass head_gates always or never to a hybridized model."""
        enc_gates = self._split_gates(head_gates)[0]
        if enc_gates is None:
            return self.encoder(self.src_embed(src_tokens), src_valid_len)
        return self.encoder(self.src_embed(src_tokens), src_valid_len, enc_gates)

    def init_state(self, src_tokens, src_valid_len, head_gates=None):
        """Decoder state for incremental decoding: per-layer caches, source lengths, gates."""
        memory = self.encode(src_tokens, src_valid_len, head_gates)
        return {"caches": self.decoder.init_cache(memory, src_valid_len),
                "src_valid_len": src_valid_len, "t": 0,
                "gates": self._split_gates(head_gates)[1]}

    def step(self, tokens, state):
        """tokens (B,) at position state['t'] -> log-probabilities (B, V); advances the state.
        Also returns the last layer's cross-attention weights (B*H, 1, S)."""
        y = self.tgt_embed.step(tokens.reshape(-1, 1), state["t"])  # (B, 1, D)
        hidden, cross_weights = self.decoder.step(y, state["caches"], state["src_valid_len"],
                                                  state["gates"])
        state["t"] += 1
        logits = self.output(hidden)[:, 0, :]  # (B, 1, V) -> (B, V)
        return npx.log_softmax(logits, axis=-1), cross_weights

    def attention_weights(self, src_tokens, src_valid_len, tgt_in, head_gates=None):
        """Teacher-forced pass (imperative) -> one (B*H, Tq, Tk) weight array per attention
        layer, in head_gates row order (encoder self, then decoder self and cross per layer)."""
        enc_gates, dec_gates = self._split_gates(head_gates)
        weights, X = [], self.src_embed(src_tokens)
        for i, block in enumerate(self.encoder.blocks):
            gate = None if enc_gates is None else enc_gates[i]
            X, w = block.forward_with_weights(nd, X, src_valid_len, gate)
            weights.append(w)
        memory = self.encoder.final_norm(X) if self.cfg.pre_norm else X
        Y = self.tgt_embed(tgt_in)
        self_valid_len = causal_valid_len(nd, Y, src_valid_len)
        for i, block in enumerate(self.decoder.blocks):
            Y, w_self, w_cross = block.forward_with_weights(nd, Y, memory, src_valid_len,
                                                            self_valid_len, *layer_gates(dec_gates, i))
            weights += [w_self, w_cross]
        return weights
