"""Greedy and beam search over a batch with incremental (cached) decoding, `Translator`, which
turns lines of text into lines of text, and `load_decoder`, a run's model ready to decode.

Scores are sums of log-probabilities; beam search ranks hypotheses by the GNMT length-normalised
score ``sum_logp / ((5 + length) / 6) ** alpha`` (Wu et al. 2016), length counting the EOS
(but not the EOS forced on a sentence that reached its length limit), and stops a sentence at its
output limit (both in `mtx.decoding.search_rules`, which the CTranslate2 backend follows too).
"""

import numpy as onp
from mxnet import np

from ..data.batching import length_groups, source_batch
from ..errors import ConfigError
from ..hardware.allocator import release_free_memory
from .lines import LineTranslator
from ..data.vocab import BOS, EOS, SPECIALS
from .beam_step import NEG_INF, beam_step
from .search_rules import gnmt_penalty, output_limits

MAX_TRANSLATION_ROWS = 256  # sentences per translation batch at most
# hypotheses (sentences x beam) per translation batch at most: the decoder caches grow with
# them, and MXNet keeps the memory of a batch's largest arrays for the process's life
MAX_TRANSLATION_HYPOTHESES = 640


def load_decoder(run_dir, ctx, which="auto", precision="float32"):
    """(model, tokenizer, the run's DataConfig) of run directory ``run_dir`` (checkpoint
    ``which``, as `mtx.runs.rundir.load_run` takes it) on ``ctx``, its products in ``precision``
    (`DecodeConfig.precision`), hybridized with static memory: the one way every command and
    benchmark loads a model to translate with. ConfigError when the precision cannot run here."""
    from ..model.precision import set_precision
    from ..runs.rundir import load_run
    model, tokenizer, data_cfg = load_run(run_dir, ctx, which)
    try:
        set_precision(model, precision)
    except ValueError as err:
        raise ConfigError(f"decode.{err}; use decode.precision=float32") from None
    model.hybridize(static_alloc=True)
    return model, tokenizer, data_cfg


def beam_search(model, src_tokens, src_valid_len, beam_size=5, length_penalty=1.0,
                max_len_a=1.5, max_len_b=10, nbest=1, head_gates=None):
    """src_tokens (B, S), src_valid_len (B,) on the model's device -> for each sentence a list of
    ``nbest`` (token ids without EOS, normalised score), best first. Beam 1 is greedy search.
    ``head_gates`` (A, H) scales heads as in `Transformer.forward`.

    Each step keeps, per hypothesis, only its K best next tokens (the length penalty is the same
    for every token of a hypothesis, so the sentence's K best candidates are among those), then
    ranks the K*K candidates of each sentence. When a sentence's K hypotheses have all ended its
    result is read off the history; ended sentences leave the batch (and the cache) together,
    once a quarter of the batch has ended."""
    B, K = src_tokens.shape[0], beam_size
    ctx = src_tokens.ctx
    limits = output_limits(src_valid_len.asnumpy(), max_len_a, max_len_b, model.cfg.max_src_len)
    steps = max(int(limits.max()), 1)  # a limit of 0 still takes the step that forces EOS
    state = model.init_state(src_tokens, src_valid_len, head_gates, beam_size=K)
    alive = onp.arange(B)  # the sentence of each group of K rows
    # (tokens, raw, length, finished, limit) of the R = B*K rows: the last tokens (R,) int32,
    # the sums of log-probabilities (R,) (only the first beam of each sentence is alive at
    # t = 0), the lengths (R,) incl. EOS (frozen at EOS or at the limit), 1.0 once ended (R,),
    # the output limits (R, 1)
    beams = (np.full((B * K,), BOS, dtype="int32", ctx=ctx),
             np.array(onp.tile([0.0] + [NEG_INF] * (K - 1), B), dtype="float32", ctx=ctx),
             np.zeros((B * K,), ctx=ctx), np.zeros((B * K,), ctx=ctx),
             np.array(onp.repeat(limits, K), dtype="float32", ctx=ctx).reshape(-1, 1))
    alpha = np.array([length_penalty], dtype="float32", ctx=ctx)
    search_step = beam_step(K, model.cfg.vocab_size)
    history = []  # per step, host arrays over that step's rows: (tokens, rows of the step before)
    results = [None] * B
    read = onp.zeros(B, bool)  # per sentence in the batch: its results are stored
    for t in range(steps):
        *extended, origin = model.extend(state, search_step, (*beams, alpha))
        beams = (*extended, beams[4])
        history.append((beams[0].asnumpy(), origin.asnumpy()))
        ended = beams[3].asnumpy()  # (R,) in the next step's rows
        done = ended.reshape(-1, K).min(axis=1) > 0  # (R/K,) all K ended
        if done.all() or t == steps - 1:
            _read_off(results, alive, ~read, history, beams, K, length_penalty, nbest)
            break
        if (done & ~read).any():
            _read_off(results, alive, done & ~read, history, beams, K, length_penalty, nbest)
            read |= done
        # Ended sentences go on (EOS at no cost) until a quarter of the batch has: dropping
        # rows changes the step's shapes, and a hybridized step plans its memory again.
        if read.sum() * 4 >= len(read):
            keep = onp.flatnonzero(~read)  # sentences that go on, in (R/K,)
            rows = (keep[:, None] * K + onp.arange(K)).reshape(-1)  # their rows, in (R,)
            history.append((None, rows))  # a step that only renumbers rows
            alive, read = alive[keep], read[keep]
            rows_nd = np.array(rows, dtype="int32", ctx=ctx)
            origin = np.take(origin, rows_nd)
            beams = tuple(np.take(x, rows_nd, axis=0) for x in beams)
            model.reorder_state(state, origin, np.array(keep, dtype="int32", ctx=ctx))
        elif K > 1:  # with one hypothesis per sentence every row extends itself
            model.reorder_state(state, origin)
    return results


def _read_off(results, alive, done, history, beams, K, alpha, nbest):
    """Store in ``results`` the hypotheses of the sentences ``alive[done]``: follow each of their
    rows back through ``history`` (host arrays, see `beam_search`); ``beams`` as in
    `beam_search`, whose raw (R,) and length (R,) the search scored them by."""
    raw, length = beams[1].asnumpy(), beams[2].asnumpy()
    for group in onp.flatnonzero(done):
        hyps = []
        for row in range(group * K, group * K + K):
            ids, r = [], row
            for step_tokens, origins in reversed(history):
                if step_tokens is not None:
                    ids.append(int(step_tokens[r]))
                r = int(origins[r])
            ids.reverse()
            ids = ids[:ids.index(EOS)] if EOS in ids else ids
            hyps.append((ids, float(raw[row] / gnmt_penalty(int(length[row]), alpha))))
        hyps.sort(key=lambda h: -h[1])
        results[alive[group]] = hyps[:nbest]


def attention_of(model, src_ids, out_ids, ctx, head_gates=None):
    """Every layer's attention in a teacher-forced pass of one sentence and its translation:
    source ids and output ids (no EOS) -> one host array (H, Tq, Tk) per attention layer in
    `ModelConfig.attention_layers` order; source positions are src_ids + EOS, target positions
    BOS + out_ids (the position each output token is predicted from)."""
    src, src_len = (np.array(a, ctx=ctx) for a in source_batch([src_ids]))  # (1, S), (1,)
    tgt_in = np.array([[BOS] + out_ids], dtype="int32", ctx=ctx)  # (1, T)
    weights = model.attention_weights(src, src_len, tgt_in, head_gates)  # (1*H, Tq, Tk) each
    return [w.asnumpy() for w in weights]


def attention_axes(tokenizer, src_ids, out_ids):
    """The labels of `attention_of`'s key and query axes: (source pieces + '</s>', '<s>' +
    output pieces)."""
    return (tokenizer.source.pieces(src_ids) + [SPECIALS[EOS]],
            [SPECIALS[BOS]] + tokenizer.pieces(out_ids))


class Translator(LineTranslator):
    """Lines of text -> lines of text with a trained model: tokenize, batch by source length,
    search, detokenize, and return results in input order. Empty lines translate to ''."""

    def __init__(self, model, tokenizer, decode_cfg, ctx, head_gates=None):
        self.model, self.tokenizer, self.cfg, self.ctx = model, tokenizer, decode_cfg, ctx
        self.head_gates = head_gates
        self.max_src_len = model.cfg.max_src_len

    def search(self, src_ids):
        """Non-empty lists of source ids (no EOS) -> per sentence [(ids, score)] (nbest of
        them), searched in batches of similar length."""
        results = [None] * len(src_ids)
        rows = max(1, min(MAX_TRANSLATION_ROWS, MAX_TRANSLATION_HYPOTHESES // self.cfg.beam_size))
        for group in length_groups([len(ids) + 1 for ids in src_ids], self.cfg.batch_tokens, rows):
            src, src_len = source_batch([src_ids[j] for j in group])  # (B, S), (B,)
            hyps = beam_search(self.model, np.array(src, ctx=self.ctx),
                               np.array(src_len, ctx=self.ctx), self.cfg.beam_size,
                               self.cfg.length_penalty, self.cfg.max_len_a, self.cfg.max_len_b,
                               self.cfg.nbest, self.head_gates)
            for j, h in zip(group, hyps):
                results[j] = h
            release_free_memory()  # the batch's caches, before the next batch allocates
        return results

