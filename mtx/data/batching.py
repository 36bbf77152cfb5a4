"""Subword ids -> padded batches: length buckets for training, source-length groups for
translation.

A `Batch` holds host (numpy) int32 arrays:
    src_tokens (B, S)  source ids + EOS, padded with PAD    src_valid_len (B,)
    tgt_in     (B, T)  BOS + target ids                     tgt_valid_len (B,)
    tgt_out    (B, T)  target ids + EOS                     ids (B,) sentence indices
"""
import queue
import threading
from dataclasses import dataclass

import numpy as onp

from .pairs import PairIds
from .plan import EpochPlan
from .vocab import BOS, EOS, PAD

NUM_BUCKETS = 16            # gluonnlp FixedBucketSampler buckets of the longer side's length
BUCKET_WIDTH_RATIO = 1.2    # each bucket this much wider than the one before (ExpWidthBucket)
PREFETCH_BATCHES = 8        # training batches collated ahead of the step that uses them


@dataclass
class Batch:
    src_tokens: onp.ndarray
    src_valid_len: onp.ndarray
    tgt_in: onp.ndarray
    tgt_out: onp.ndarray
    tgt_valid_len: onp.ndarray
    ids: onp.ndarray

    @property
    def num_tgt_tokens(self):
        return int(self.tgt_valid_len.sum())

    @property
    def padded_shape(self):
        """((B, S), (B, T)): what a hybridized graph is planned for."""
        return self.src_tokens.shape, self.tgt_in.shape

    def rows(self, rows):
        """The sub-batch of rows ``rows`` (an index array)."""
        return Batch(self.src_tokens[rows], self.src_valid_len[rows], self.tgt_in[rows],
                     self.tgt_out[rows], self.tgt_valid_len[rows], self.ids[rows])


def source_batch(sentences):
    """Source sentences (lists or arrays of ids, no EOS) -> what the encoder takes, as host int32
    arrays: src_tokens (B, S), each sentence's ids + EOS padded with PAD, and src_valid_len (B,).
    The one place where a source gets its EOS (training, translation, attention)."""
    lengths = onp.array([len(ids) + 1 for ids in sentences], "int32")
    tokens = onp.full((len(sentences), int(lengths.max())), PAD, "int32")
    for row, ids in enumerate(sentences):
        tokens[row, :len(ids)] = ids
        tokens[row, len(ids)] = EOS
    return tokens, lengths


def collate(src_ids, tgt_ids, ids):
    """Sentences (lists of ids, no specials) -> a padded `Batch` of sentences ``ids``."""
    return collate_pairs(PairIds.from_lists(src_ids, tgt_ids), ids)


def collate_pairs(pairs, ids):
    """Pairs ``ids`` (indices) of a `mtx.data.pairs.PairIds` -> a padded `Batch`."""
    src, src_len = source_batch([pairs.src[i] for i in ids])
    targets = [pairs.tgt[i] for i in ids]
    tgt_len = onp.array([len(t) + 1 for t in targets], "int32")
    tgt_in = onp.full((len(targets), int(tgt_len.max())), PAD, "int32")
    tgt_out = onp.full_like(tgt_in, PAD)
    for row, t in enumerate(targets):
        tgt_in[row, 0], tgt_in[row, 1:len(t) + 1] = BOS, t
        tgt_out[row, :len(t)], tgt_out[row, len(t)] = t, EOS
    return Batch(src, src_len, tgt_in, tgt_out, tgt_len, onp.array(ids, "int64"))


def batch_plan(lengths, batch_tokens, shuffle, seed, num_buckets=NUM_BUCKETS, members=None):
    """Token-budget batches of pair indices (`mtx.data.plan.EpochPlan`, a sequence of index
    arrays), from the pairs' ``lengths`` alone (each pair's longer side with its EOS), as
    gluonnlp's FixedBucketSampler makes them (exponential-width buckets, about
    ``batch_tokens`` padded tokens each). Every pair appears exactly once (every row of
    ``members``, the pairs an epoch drew, when given); with ``shuffle`` the order within
    buckets and of batches depends only on ``seed``."""
    return EpochPlan(lengths, batch_tokens, shuffle, seed, num_buckets, BUCKET_WIDTH_RATIO,
                     members)


def bucket_batches(src_ids, tgt_ids, batch_tokens, shuffle, seed, num_buckets=NUM_BUCKETS):
    """Every `batch_plan` batch of sentences (lists of ids) collated (for the small held splits
    and studies; training collates as it goes, `prefetched`)."""
    pairs = PairIds.from_lists(src_ids, tgt_ids)
    return [collate_pairs(pairs, group) for group in batch_plan(pairs.bucket_lengths(), batch_tokens,
                                                         shuffle, seed, num_buckets)]


def prefetched(pairs, plan, depth=PREFETCH_BATCHES):
    """The batches of ``plan`` (lists of indices into ``pairs``, a `PairIds`), collated in a
    background thread up to ``depth`` ahead of the one in use; memory holds those only. The
    thread ends when the batches are used up or the caller stops iterating."""
    ready, stop = queue.Queue(maxsize=depth), threading.Event()

    def offer(item):
        """Put ``item`` in the queue unless the caller stopped; False if it did."""
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def collate_all():
        try:
            for group in plan:
                if not offer(collate_pairs(pairs, group)):
                    return
        except BaseException as err:  # raised again in the loop's thread
            offer(err)

    worker = threading.Thread(target=collate_all, name="mtx-batches", daemon=True)
    worker.start()
    try:
        for _ in plan:
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def length_groups(lengths, batch_tokens, max_rows=None):
    """Indices sorted by ``lengths`` (longest first) and grouped so that each group's size times
    its longest length stays within ``batch_tokens`` (and at most ``max_rows`` a group); a list of
    index lists covering every index once."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups, current, longest = [], [], 0
    for i in order:
        longest_if_added = max(longest, lengths[i])
        if current and (longest_if_added * (len(current) + 1) > batch_tokens
                        or (max_rows and len(current) >= max_rows)):
            groups.append(current)
            current, longest_if_added = [], lengths[i]
        current.append(i)
        longest = longest_if_added
    if current:
        groups.append(current)
    return groups
