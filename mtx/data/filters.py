"""Which training pairs are dropped, and why, counted (`Filter`): an empty side, too long, a
length ratio beyond the bound (OpenNMT's and Moses' cleaning), and for text read from files a
copy (the target is the source) or a pair seen before (`SeenPairs`), which crawled corpora are
full of; and how a vocabulary cuts a split (`UnknownCount`)."""
import hashlib

import numpy as onp

from .vocab import UNK


def drops_duplicates(cfg):
    """Whether the `DataConfig` ``cfg`` drops repeated pairs: `data.drop_duplicates`, null
    resolved by the corpus (data=files: yes; Multi30k's benchmark pairs stay whole)."""
    return cfg.name == "files" if cfg.drop_duplicates is None else cfg.drop_duplicates


def is_blank(src, tgt):
    return not src.strip() or not tgt.strip()


class Filter:
    """Why a training pair is dropped, counted in ``counts`` under the first reason that holds:
    an empty side, the target a ``copy`` of the source (`data.drop_copies`; compared without
    case when the source is lowercased), a ``duplicate`` of an earlier pair
    (`data.drop_duplicates`), more than ``max_pair_len`` - 1 subwords on a side (with its EOS,
    over ``max_pair_len``), or one side over ``max_ratio`` times the other's subwords."""

    def __init__(self, max_pair_len, max_ratio, copies=False, duplicates=False,
                 source_lowercased=False):
        self.max_pair_len, self.max_ratio = max_pair_len, max_ratio
        self.copies, self.source_lowercased = copies, source_lowercased
        self.seen = SeenPairs() if duplicates else None
        reasons = ["empty", "too_long", "length_ratio"] + ["copy"] * copies + \
            ["duplicate"] * duplicates
        self.counts = dict.fromkeys(reasons, 0)

    def reason(self, src_ids, tgt_ids):
        short, long = sorted((len(src_ids), len(tgt_ids)))
        if short == 0:
            return "empty"
        if long >= self.max_pair_len:
            return "too_long"
        if long > self.max_ratio * short:
            return "length_ratio"
        return None

    def keep(self, src_ids, tgt_ids):
        reason = self.reason(src_ids, tgt_ids)
        if reason:
            self.counts[reason] += 1
        return reason is None

    def kept_rows(self, pairs, src_ids, tgt_ids):
        """The rows of a chunk of (source, target) text ``pairs`` (their ids ``src_ids``,
        ``tgt_ids``) that are kept, in order; the others counted."""
        repeated = self.seen.repeated(pairs) if self.seen is not None else None
        rows = []
        for i, (src, tgt) in enumerate(pairs):
            if is_blank(src, tgt):
                self.counts["empty"] += 1
            elif self.copies and self.is_copy(src, tgt):
                self.counts["copy"] += 1
            elif repeated is not None and repeated[i]:
                self.counts["duplicate"] += 1
            elif self.keep(src_ids[i], tgt_ids[i]):
                rows.append(i)
        return rows

    def is_copy(self, src, tgt):
        src, tgt = src.strip(), tgt.strip()
        return src == tgt or (self.source_lowercased and src == tgt.lower())

    def described(self):
        return ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in self.counts.items())


class SeenPairs:
    """The pairs read so far as 64-bit hashes of their text: 8 bytes a pair (two different
    pairs share a hash with a chance of about n² / 2^65: 3e-6 at 10M pairs), in sorted arrays
    merged once the newer ones hold MERGE_AT."""

    MERGE_AT = 1 << 20

    def __init__(self):
        self.merged, self.recent = onp.zeros(0, onp.uint64), []

    def repeated(self, pairs):
        """A flag per (source, target) of ``pairs``: seen before, in an earlier chunk or earlier
        in this one. All of them are seen from now on."""
        keys = onp.fromiter((int.from_bytes(hashlib.blake2b(
            f"{src}\0{tgt}".encode("utf-8"), digest_size=8).digest(), "little")
            for src, tgt in pairs), onp.uint64, len(pairs))
        unique, first = onp.unique(keys, return_index=True)
        repeated = onp.ones(len(keys), bool)
        repeated[first] = False
        for run in [self.merged, *self.recent]:
            if len(run):
                at = onp.minimum(onp.searchsorted(run, keys), len(run) - 1)
                repeated |= run[at] == keys
        self.recent.append(unique)
        if sum(len(run) for run in self.recent) >= self.MERGE_AT:
            self.merged, self.recent = onp.union1d(self.merged, onp.concatenate(self.recent)), []
        return repeated


class UnknownCount:
    """How a vocabulary cuts each side of a split: how many subwords are ``<unk>`` (characters
    it lacks), of how many, for how many words (whitespace-separated): ``counts`` {side:
    [unknown, subwords, words]}. A fine-tuning run's log shows how well its parent's vocabulary
    fits the new text."""

    def __init__(self, counts=None):
        self.counts = counts or {"src": [0, 0, 0], "tgt": [0, 0, 0]}

    def add(self, side, id_lists, texts):
        counts = self.counts[side]
        for ids, text in zip(id_lists, texts):
            counts[0] += ids.count(UNK)
            counts[1] += len(ids)
            counts[2] += len(text.split())

    def described(self):
        return ", ".join(f"<unk> {100 * n / max(total, 1):.3f}% of the {name} subwords "
                         f"({total / max(words, 1):.2f} a word)" for name, (n, total, words)
                         in zip(("source", "target"), self.counts.values()))
