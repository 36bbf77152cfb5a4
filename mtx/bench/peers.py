"""The peers of `mtx.bench`, built from the benchmark's `ModelConfig`: the d2l book's Transformer
(its exported encoder and the chapter's decoder, written as the chapter has it) and gluonnlp
0.10's Transformer (`get_transformer_encoder_decoder` + `NMTModel`). Each exposes
``train_step(batch) -> loss`` and ``greedy(src, src_len, steps, bos)`` over numpy int32 batches.

Both take one layer count for encoder and decoder, one dropout rate, and separate (untied)
source, target and output embeddings; `peer_sizes` rejects a config they cannot express."""
import math

from ..errors import ConfigError

PEER_LEARNING_RATE = 5e-4   # Adam; the step's cost does not depend on it
PEER_MAX_LENGTH = 500       # gluonnlp's positional-encoding table (its scripts' value)


def peer_sizes(model_cfg):
    """(V, D, F, H, layers, dropout) of ``model_cfg``; ConfigError where a peer cannot build it."""
    cfg = model_cfg
    problems = [text for bad, text in [
        (cfg.num_encoder_layers != cfg.num_decoder_layers, "encoder and decoder layers differ"),
        (cfg.dropout != cfg.attention_dropout, "dropout and attention_dropout differ"),
        (cfg.tie_embeddings, "embeddings are tied"),
        (cfg.pre_norm, "pre_norm is set"),
        (cfg.heads_per_layer is not None, "heads_per_layer is set")] if bad]
    if problems:
        raise ConfigError(f"the peers (gluonnlp, d2l) cannot build this model: "
                          f"{'; '.join(problems)}")
    return (cfg.vocab_size, cfg.num_hiddens, cfg.ffn_num_hiddens, cfg.num_heads,
            cfg.num_encoder_layers, cfg.dropout)


class D2LPeer:
    """d2l==1.0.3 (MXNet): plain nn.Blocks; hybridize() compiles only the leaf layers."""

    def __init__(self, model_cfg, hybridize):
        from mxnet import autograd, gluon, np, npx
        from mxnet.gluon import nn
        from d2l import mxnet as d2l
        self.np, self.npx, self.autograd = np, npx, autograd

        class DecoderBlock(nn.Block):  # d2l 11.7.4, MXNet version
            def __init__(self, num_hiddens, ffn_num_hiddens, num_heads, dropout, i):
                super().__init__()
                self.i = i
                self.attention1 = d2l.MultiHeadAttention(num_hiddens, num_heads, dropout)
                self.addnorm1 = d2l.AddNorm(dropout)
                self.attention2 = d2l.MultiHeadAttention(num_hiddens, num_heads, dropout)
                self.addnorm2 = d2l.AddNorm(dropout)
                self.ffn = d2l.PositionWiseFFN(ffn_num_hiddens, num_hiddens)
                self.addnorm3 = d2l.AddNorm(dropout)

            def forward(self, X, state):
                enc_outputs, enc_valid_lens = state[0], state[1]
                key_values = X if state[2][self.i] is None else np.concatenate(
                    (state[2][self.i], X), axis=1)
                state[2][self.i] = key_values
                if autograd.is_training():
                    batch_size, num_steps, _ = X.shape
                    dec_valid_lens = np.tile(np.arange(1, num_steps + 1, ctx=X.ctx),
                                             (batch_size, 1))
                else:
                    dec_valid_lens = None
                Y = self.addnorm1(X, self.attention1(X, key_values, key_values, dec_valid_lens))
                Z = self.addnorm2(Y, self.attention2(Y, enc_outputs, enc_outputs, enc_valid_lens))
                return self.addnorm3(Z, self.ffn(Z)), state

        class Decoder(d2l.AttentionDecoder):
            def __init__(self, vocab_size, num_hiddens, ffn_num_hiddens, num_heads, num_blks,
                         dropout):
                super().__init__()
                self.num_hiddens, self.num_blks = num_hiddens, num_blks
                self.embedding = nn.Embedding(vocab_size, num_hiddens)
                self.pos_encoding = d2l.PositionalEncoding(num_hiddens, dropout)
                self.blks = nn.Sequential()
                for i in range(num_blks):
                    self.blks.add(DecoderBlock(num_hiddens, ffn_num_hiddens, num_heads, dropout, i))
                self.dense = nn.Dense(vocab_size, flatten=False)
                self.initialize()

            def init_state(self, enc_outputs, enc_valid_lens):
                return [enc_outputs, enc_valid_lens, [None] * self.num_blks]

            def forward(self, X, state):
                X = self.pos_encoding(self.embedding(X) * math.sqrt(self.num_hiddens))
                for blk in self.blks:
                    X, state = blk(X, state)
                return self.dense(X), state

        V, D, F, H, L, p = peer_sizes(model_cfg)
        self.encoder = d2l.TransformerEncoder(V, D, F, H, L, p)
        self.decoder = Decoder(V, D, F, H, L, p)
        self.model = d2l.EncoderDecoder(self.encoder, self.decoder)
        if hybridize:
            self.model.hybridize()
        self.loss = d2l.MaskedSoftmaxCELoss()
        self.trainer = gluon.Trainer(self.model.collect_params(), "adam",
                                     {"learning_rate": PEER_LEARNING_RATE})

    def train_step(self, b):
        np = self.np
        src, src_len = np.array(b.src_tokens), np.array(b.src_valid_len)
        tgt_in, tgt_out = np.array(b.tgt_in), np.array(b.tgt_out)
        tgt_len = np.array(b.tgt_valid_len)
        with self.autograd.record():
            out = self.model(src, tgt_in, src_len)
            loss = self.loss(out, tgt_out, tgt_len).sum()
        loss.backward()
        self.trainer.step(b.num_tgt_tokens)
        return loss

    def greedy(self, src, src_len, steps, bos):
        np = self.np
        src, src_len = np.array(src), np.array(src_len)
        state = self.decoder.init_state(self.encoder(src, src_len), src_len)
        y, outs = np.full((src.shape[0], 1), bos), []
        for _ in range(steps):
            logits, state = self.decoder(y, state)
            y = logits.argmax(axis=2)
            outs.append(y)
        return np.concatenate(outs, axis=1).asnumpy()


class GluonNLPPeer:
    """gluonnlp 0.10: hybridized with static_alloc, as its train_transformer.py does."""

    def __init__(self, model_cfg, hybridize):
        import warnings
        warnings.filterwarnings("ignore")
        import mxnet as mx
        from mxnet import autograd, gluon, nd
        import gluonnlp as nlp
        from gluonnlp.model.transformer import get_transformer_encoder_decoder
        from gluonnlp.model.translation import NMTModel
        self.nd, self.autograd = nd, autograd
        V, D, F, H, L, p = peer_sizes(model_cfg)

        class Vocab:
            def __len__(self):
                return V

        enc, dec, one = get_transformer_encoder_decoder(
            num_layers=L, num_heads=H, scaled=True, units=D, hidden_size=F, dropout=p,
            max_src_length=PEER_MAX_LENGTH, max_tgt_length=PEER_MAX_LENGTH)
        self.model = NMTModel(src_vocab=Vocab(), tgt_vocab=Vocab(), encoder=enc, decoder=dec,
                              one_step_ahead_decoder=one, share_embed=False,
                              embed_size=D, tie_weights=False,
                              embed_initializer=None, prefix="transformer_")
        self.model.initialize(init=mx.init.Xavier(magnitude=3.0))
        self.loss = nlp.loss.MaskedSoftmaxCELoss()
        if hybridize:
            self.model.hybridize(static_alloc=True)
            self.loss.hybridize(static_alloc=True)
        self.trainer = gluon.Trainer(self.model.collect_params(), "adam",
                                     {"learning_rate": PEER_LEARNING_RATE})

    def train_step(self, b):
        nd = self.nd
        arr = lambda a: nd.array(a, dtype="float32")
        with self.autograd.record():
            out, _ = self.model(arr(b.src_tokens), arr(b.tgt_in), arr(b.src_valid_len),
                                arr(b.tgt_valid_len))
            loss = self.loss(out, arr(b.tgt_out), arr(b.tgt_valid_len)).sum()
        loss.backward()
        self.trainer.step(b.num_tgt_tokens)
        return loss

    def greedy(self, src, src_len, steps, bos):
        nd = self.nd
        src, src_len = nd.array(src, dtype="float32"), nd.array(src_len, dtype="float32")
        enc_out, _ = self.model.encode(src, valid_length=src_len)
        states = self.model.decoder.init_state_from_encoder(enc_out, src_len)
        y, outs = nd.full((src.shape[0],), bos, dtype="float32"), []
        for _ in range(steps):
            logits, states, _ = self.model.decode_step(y, states)
            y = logits.argmax(axis=1)
            outs.append(y)
        return nd.stack(*outs, axis=1).asnumpy()


PEERS = {"gluonnlp": GluonNLPPeer, "d2l": D2LPeer}
PEER_PACKAGES = {"gluonnlp": "gluonnlp==0.10.0", "d2l": "d2l==1.0.3"}  # module: pip requirement


def installed(name):
    """Whether peer ``name``'s package imports (mtx's own implementations always do)."""
    if name not in PEERS:
        return True
    try:
        __import__(name)
        return True
    except ImportError:
        return False
