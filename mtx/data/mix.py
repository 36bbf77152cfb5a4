"""Several training corpora in one epoch: each corpus's share by its weight and its tag.

The prepared training split holds the corpora (``data.train``'s prefixes) one after another;
``sizes`` are their kept pairs. Without weights an epoch is every pair once, as one corpus.
With ``data.train_weights`` an epoch still has N = sum(sizes) pairs, corpus c giving
N * w_c / sum(w) of them (OpenNMT-py's corpus weights; rounded by largest remainder): a corpus
with more than its pairs repeats each of them as often as it fits and draws the rest, one with
fewer draws its pairs, each epoch anew from the epoch's seed (without repeats within a draw).
"""
import logging

import numpy as onp

from ..config.data import TAG
from ..errors import ConfigError, DataError

log = logging.getLogger(__name__)


class CorpusMix:
    """The corpora of a training split: ``names`` (their prefixes), ``sizes`` (kept pairs, in
    order), ``weights`` (one > 0 a corpus, or empty) and ``tags`` (one, or None, a corpus)."""

    def __init__(self, names, sizes, weights=(), tags=()):
        self.names, self.sizes = list(names), [int(n) for n in sizes]
        self.weights, self.tags = list(weights), list(tags) or [None] * len(self.names)
        self.starts = onp.concatenate([[0], onp.cumsum(self.sizes)]).astype("int64")

    def per_epoch(self):
        """How many pairs each corpus gives every epoch."""
        if not self.weights:
            return list(self.sizes)
        total, weight = sum(self.sizes), float(sum(self.weights))
        exact = [total * w / weight for w in self.weights]
        counts = [int(x) for x in exact]
        by_remainder = sorted(range(len(exact)), key=lambda c: counts[c] - exact[c])
        for c in by_remainder[:total - sum(counts)]:
            counts[c] += 1
        return counts

    def members(self, seed):
        """(M,) the pair indices of the epoch of ``seed`` (corpus by corpus), or None when
        there are no weights (every pair once, in order)."""
        if not self.weights:
            return None
        rng = onp.random.default_rng(seed % 2 ** 32)
        dtype = "int32" if self.starts[-1] < 2 ** 31 else "int64"
        parts = []
        for start, size, count in zip(self.starts, self.sizes, self.per_epoch()):
            whole, rest = divmod(count, size) if size else (0, 0)
            every = onp.arange(start, start + size, dtype=dtype)
            parts.extend([every] * whole)
            parts.append((start + rng.choice(size, rest, replace=False)).astype(dtype))
        return onp.concatenate(parts)

    def described(self):
        """Each corpus's line for the log: its pairs, weight, tag and pairs an epoch."""
        lines = []
        for c, (name, size, count) in enumerate(zip(self.names, self.sizes, self.per_epoch())):
            weight = f", weight {self.weights[c]:g}" if self.weights else ""
            tag = f", tag {self.tags[c]}" if self.tags[c] else ""
            lines.append(f"training corpus {c + 1} ({name}{tag}{weight}): {size} pairs kept, "
                         f"{count} an epoch ({count / max(size, 1):.2f} times each)")
        return lines

    def record(self):
        """What run.json keeps of the corpora: prefix, kept pairs, weight, tag, pairs an epoch."""
        return [{"prefix": name, "pairs": size, "weight": self.weights[c] if self.weights else None,
                 "tag": self.tags[c], "pairs_per_epoch": count}
                for c, (name, size, count) in enumerate(zip(self.names, self.sizes,
                                                            self.per_epoch()))]


def run_tags(train_tags, user_symbols):
    """The tags a run knows: its corpora's, and its user symbols written as tags (<name>); a
    translation may start with one of them (`mtx.data.vocab.check_tags`)."""
    return [tag for tag in train_tags if tag] + [s for s in user_symbols if TAG.fullmatch(s)]


def check_tag_pieces(tokenizer, tags):
    """ConfigError (one line) for a corpus tag that is not one piece of the source vocabulary
    (one given: data.spm_model, a parent's)."""
    for tag in tags:
        if tag and not tokenizer.source.has_piece(tag):
            raise ConfigError(f"data.train_tags: {tag} is not a piece of the vocabulary given "
                              f"(data.spm_model or init_from's); learn one (the tags become "
                              f"its user-defined symbols) or give a model that has it")


def corpus_mix(cfg, file_pairs, sizes):
    """The `CorpusMix` of the training ``file_pairs`` (data.train's prefixes, or the files)
    with their kept pairs ``sizes``, logged; DataError for a weighted corpus with none."""
    names = (list(cfg.train) if cfg.name == "files" and len(cfg.train or ()) == len(file_pairs)
             else [str(src) for src, _ in file_pairs])
    mix = CorpusMix(names, sizes, cfg.train_weights, cfg.train_tags)
    for name, size in zip(names, sizes):
        if cfg.train_weights and not size:
            raise DataError(f"{name}: no training pair of this corpus is left after the "
                            f"filters, so its weight cannot be met; remove it from data.train")
    if len(names) > 1 or cfg.train_weights or any(cfg.train_tags):
        for line in mix.described():
            log.info("%s", line)
    return mix
