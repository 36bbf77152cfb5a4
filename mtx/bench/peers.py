"""The peers, built from the benchmark's `ModelConfig`: the d2l book's Transformer (its exported
encoder and the chapter's decoder as it trains) and gluonnlp 0.10's
(`get_transformer_encoder_decoder` + `NMTModel`). Each has ``train_step(batch) -> loss``, with
Adam and plain masked cross-entropy as their own scripts train. Both take one layer count and one
dropout rate; `inputs.load` gives them untied embeddings and post-norm layers."""
import math

from ..errors import ConfigError

PEER_LEARNING_RATE = 5e-4   # Adam; the step's cost does not depend on it
PEER_MAX_LENGTH = 500       # gluonnlp's positional-encoding table (its scripts' value)
PEER_PACKAGES = {"gluonnlp": "gluonnlp==0.10.0", "d2l": "d2l==1.0.3"}


def peer_sizes(cfg, name):
    """(V, D, F, H, layers, dropout) of ``cfg``; ConfigError where peer ``name`` cannot build it."""
    try:
        __import__(name)
    except ImportError:
        raise ConfigError(f"--impl {name}: not installed; pip install {PEER_PACKAGES[name]}")
    problems = [text for bad, text in [
        (cfg.num_encoder_layers != cfg.num_decoder_layers, "encoder and decoder layers differ"),
        (cfg.dropout != cfg.attention_dropout, "dropout and attention_dropout differ"),
        (cfg.heads_per_layer is not None, "heads_per_layer is set")] if bad]
    if problems:
        raise ConfigError(f"the peers cannot build this model: {'; '.join(problems)}")
    return (cfg.vocab_size, cfg.num_hiddens, cfg.ffn_num_hiddens, cfg.num_heads,
            cfg.num_encoder_layers, cfg.dropout)


def d2l_decoder(d2l, V, D, F, H, L, p):
    """The d2l chapter's Transformer decoder (11.7.4, MXNet), which d2l does not export, as it
    trains (the chapter's key/value cache serves only prediction)."""
    from mxnet import np
    from mxnet.gluon import nn

    class DecoderBlock(nn.Block):
        def __init__(self):
            super().__init__()
            self.attention1, self.addnorm1 = d2l.MultiHeadAttention(D, H, p), d2l.AddNorm(p)
            self.attention2, self.addnorm2 = d2l.MultiHeadAttention(D, H, p), d2l.AddNorm(p)
            self.ffn, self.addnorm3 = d2l.PositionWiseFFN(F, D), d2l.AddNorm(p)

        def forward(self, X, state):
            enc_outputs, enc_valid_lens = state
            dec_valid_lens = np.tile(np.arange(1, X.shape[1] + 1, ctx=X.ctx), (X.shape[0], 1))
            Y = self.addnorm1(X, self.attention1(X, X, X, dec_valid_lens))
            Z = self.addnorm2(Y, self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens))
            return self.addnorm3(Z, self.ffn(Z)), state

    class Decoder(d2l.AttentionDecoder):
        def __init__(self):
            super().__init__()
            self.embedding, self.pos_encoding = nn.Embedding(V, D), d2l.PositionalEncoding(D, p)
            self.blks = nn.Sequential()
            self.blks.add(*[DecoderBlock() for _ in range(L)])
            self.dense = nn.Dense(V, flatten=False)
            self.initialize()

        def init_state(self, enc_outputs, enc_valid_lens):
            return enc_outputs, enc_valid_lens

        def forward(self, X, state):
            X = self.pos_encoding(self.embedding(X) * math.sqrt(D))
            for blk in self.blks:
                X, state = blk(X, state)
            return self.dense(X), state
    return Decoder()


class D2LPeer:
    """d2l==1.0.3 (MXNet): plain nn.Blocks; hybridize() compiles only the leaf layers."""

    def __init__(self, model_cfg):
        from mxnet import gluon
        from d2l import mxnet as d2l
        sizes = peer_sizes(model_cfg, "d2l")
        self.model = d2l.EncoderDecoder(d2l.TransformerEncoder(*sizes), d2l_decoder(d2l, *sizes))
        self.model.hybridize()
        self.loss = d2l.MaskedSoftmaxCELoss()
        self.trainer = gluon.Trainer(self.model.collect_params(), "adam",
                                     {"learning_rate": PEER_LEARNING_RATE})

    def train_step(self, b):
        from mxnet import autograd, np
        src, src_len, tgt_in, tgt_out, tgt_len = (np.array(a) for a in (
            b.src_tokens, b.src_valid_len, b.tgt_in, b.tgt_out, b.tgt_valid_len))
        with autograd.record():
            loss = self.loss(self.model(src, tgt_in, src_len), tgt_out, tgt_len).sum()
        loss.backward()
        self.trainer.step(b.num_tgt_tokens)
        return loss


class GluonNLPPeer:
    """gluonnlp 0.10: hybridized with static_alloc, as its train_transformer.py does."""

    def __init__(self, model_cfg):
        import warnings
        warnings.filterwarnings("ignore")
        import mxnet as mx
        import gluonnlp as nlp
        from gluonnlp.model.transformer import get_transformer_encoder_decoder
        from gluonnlp.model.translation import NMTModel
        V, D, F, H, L, p = peer_sizes(model_cfg, "gluonnlp")
        vocab = range(V)  # NMTModel reads only the length of its vocabularies
        enc, dec, one = get_transformer_encoder_decoder(
            num_layers=L, num_heads=H, scaled=True, units=D, hidden_size=F, dropout=p,
            max_src_length=PEER_MAX_LENGTH, max_tgt_length=PEER_MAX_LENGTH)
        self.model = NMTModel(src_vocab=vocab, tgt_vocab=vocab, encoder=enc, decoder=dec,
                              one_step_ahead_decoder=one, share_embed=False, embed_size=D,
                              tie_weights=False, embed_initializer=None, prefix="transformer_")
        self.model.initialize(init=mx.init.Xavier(magnitude=3.0))
        self.loss = nlp.loss.MaskedSoftmaxCELoss()
        self.model.hybridize(static_alloc=True)
        self.loss.hybridize(static_alloc=True)
        self.trainer = mx.gluon.Trainer(self.model.collect_params(), "adam",
                                        {"learning_rate": PEER_LEARNING_RATE})

    def train_step(self, b):
        from mxnet import autograd, nd
        src, tgt_in, tgt_out, src_len, tgt_len = (nd.array(a, dtype="float32") for a in (
            b.src_tokens, b.tgt_in, b.tgt_out, b.src_valid_len, b.tgt_valid_len))
        with autograd.record():
            out, _ = self.model(src, tgt_in, src_len, tgt_len)
            loss = self.loss(out, tgt_out, tgt_len).sum()
        loss.backward()
        self.trainer.step(b.num_tgt_tokens)
        return loss


PEERS = {"gluonnlp": GluonNLPPeer, "d2l": D2LPeer}
