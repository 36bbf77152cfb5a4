"""Sentence pairs as subword ids, compact: each side one flat int32 array with offsets, in memory
or memory-mapped from a prepared corpus (`mtx.data.prepare`); `mtx.data.batching` collates
batches from them.

A side of N sentences is ``ids`` (all sentences' ids, no specials, concatenated) and ``offsets``
(N + 1,) int64: sentence i is ``ids[offsets[i]:offsets[i + 1]]``. A WMT-sized corpus (millions
of pairs) costs about 8 bytes a subword and 16 a pair this way, and nothing when mapped.
"""
import os
from pathlib import Path

import numpy as onp

ID_DTYPE, OFFSET_DTYPE = onp.int32, onp.int64
LENGTHS_CHUNK = 1 << 20  # pairs whose lengths are computed at once


class Side:
    """One side (source or target) of N sentences: flat ``ids`` and ``offsets`` (N + 1,)."""

    def __init__(self, ids, offsets):
        self.ids, self.offsets = ids, offsets

    @classmethod
    def from_lists(cls, sentences):
        lengths = onp.fromiter((len(s) for s in sentences), OFFSET_DTYPE, len(sentences))
        offsets = onp.zeros(len(sentences) + 1, OFFSET_DTYPE)
        onp.cumsum(lengths, out=offsets[1:])
        ids = onp.fromiter((i for s in sentences for i in s), ID_DTYPE, int(offsets[-1]))
        return cls(ids, offsets)

    @classmethod
    def mapped(cls, prefix, dtype=ID_DTYPE):
        """The side `SideWriter` wrote at ``prefix`` (``<prefix>.ids``, ``<prefix>.offsets``),
        memory-mapped read-only."""
        offsets = onp.memmap(f"{prefix}.offsets", OFFSET_DTYPE, "r")
        ids_path = Path(f"{prefix}.ids")
        ids = (onp.memmap(ids_path, dtype, "r") if ids_path.stat().st_size
               else onp.zeros(0, dtype))  # numpy cannot map an empty file
        return cls(ids, offsets)

    @classmethod
    def concatenate(cls, sides):
        """One side of every sentence of ``sides`` in order (in memory)."""
        offsets, end = [onp.zeros(1, OFFSET_DTYPE)], 0
        for side in sides:
            offsets.append(side.offsets[1:] - side.offsets[0] + end)
            end = int(offsets[-1][-1]) if len(side) else end
        ids = [side.ids[side.offsets[0]:side.offsets[-1]] for side in sides]
        return cls(onp.concatenate(ids or [onp.zeros(0, ID_DTYPE)]), onp.concatenate(offsets))

    def __len__(self):
        return len(self.offsets) - 1

    def lengths(self):
        return onp.diff(self.offsets)

    def __getitem__(self, i):
        return self.ids[self.offsets[i]:self.offsets[i + 1]]

    def to_lists(self):
        return [self[i].tolist() for i in range(len(self))]


class PairIds:
    """N aligned (source, target) sentences of subword ids (`Side` each)."""

    def __init__(self, src, tgt):
        assert len(src) == len(tgt), (len(src), len(tgt))
        self.src, self.tgt = src, tgt

    @classmethod
    def from_lists(cls, src_ids, tgt_ids):
        return cls(Side.from_lists(src_ids), Side.from_lists(tgt_ids))

    @classmethod
    def concatenate(cls, parts):
        return cls(Side.concatenate([p.src for p in parts]),
                   Side.concatenate([p.tgt for p in parts]))

    def __len__(self):
        return len(self.src)

    def bucket_lengths(self):
        """(N,) int32: each pair's longer side with its EOS (what batches are bucketed by), from
        the (mapped) offsets a chunk at a time: memory holds the result, 4 bytes a pair."""
        lengths = onp.empty(len(self), "int32")
        for a in range(0, len(self), LENGTHS_CHUNK):
            b = min(a + LENGTHS_CHUNK, len(self))
            lengths[a:b] = onp.maximum(onp.diff(self.src.offsets[a:b + 1]),
                                       onp.diff(self.tgt.offsets[a:b + 1])) + 1
        return lengths

    def to_lists(self):
        return self.src.to_lists(), self.tgt.to_lists()


class SideWriter:
    """Appends sentences (lists of ids, or ``bytes`` for text: `Side.mapped` with uint8) to
    ``<prefix>.ids`` and ``<prefix>.offsets``, a chunk at a time (memory holds one chunk)."""

    def __init__(self, prefix):
        self.ids = open(f"{prefix}.ids", "wb")
        self.offsets = open(f"{prefix}.offsets", "wb")
        self.total = 0
        onp.zeros(1, OFFSET_DTYPE).tofile(self.offsets)

    def write(self, sentences):
        if not sentences:
            return
        lengths = onp.fromiter((len(s) for s in sentences), OFFSET_DTYPE, len(sentences))
        ends = self.total + onp.cumsum(lengths)
        if isinstance(sentences[0], bytes):
            self.ids.write(b"".join(sentences))
        else:
            onp.fromiter((i for s in sentences for i in s), ID_DTYPE,
                         int(lengths.sum())).tofile(self.ids)
        ends.tofile(self.offsets)
        self.total = int(ends[-1])

    def close(self):
        for f in (self.ids, self.offsets):
            f.flush()
            os.fsync(f.fileno())
            f.close()
