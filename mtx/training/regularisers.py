"""Regularisers of a training step beside dropout and label smoothing: word dropout on the inputs
(`drop_words`) and R-Drop's consistency between two dropout passes (`rdrop_loss`)."""
import dataclasses

import numpy as onp

from ..data.vocab import EOS, UNK


def drop_words(batch, probability, seed):
    """The host `Batch` with each source subword and decoder-input subword (not BOS, EOS or PAD)
    replaced by UNK with ``probability``; the loss's targets (tgt_out) are unchanged. The same
    ``seed`` drops the same words."""
    rng = onp.random.default_rng(seed)
    dropped = {}
    for name in ("src_tokens", "tgt_in"):
        tokens = getattr(batch, name).copy()  # (B, S) or (B, T)
        tokens[(rng.random(tokens.shape) < probability) & (tokens > EOS)] = UNK
        dropped[name] = tokens
    return dataclasses.replace(batch, **dropped)


def rdrop_loss(pieces, src, src_len, tgt_in, tgt_out, tgt_len):
    """R-Drop (Liang et al. 2021): the rows through the model twice in one call (the batch
    stacked on itself, (2B, ...)), so each pass has its own dropout -> (loss, nll) of
    ``pieces.rdrop_fn`` (`mtx.training.loss.RDropLoss`), summed over the valid target tokens."""
    from mxnet import np
    twice = lambda x: np.concatenate([x, x], axis=0)  # noqa: E731
    logits = pieces.model(twice(src), twice(src_len), twice(tgt_in))  # (2B, T, V)
    return pieces.rdrop_fn(logits, twice(tgt_out), twice(tgt_len))
