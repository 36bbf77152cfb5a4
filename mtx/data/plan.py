"""An epoch's batch plan in NumPy arrays: the token-budget length buckets of gluonnlp's
`FixedBucketSampler` (its bucket keys, batch sizes and shuffles, the same batches in the same
order for the same seed), held as a few bytes a pair instead of a Python list of every index.

`EpochPlan` over N pairs holds:
    ``rows``      (N,) int32 (int64 past 2**31 pairs): the pairs grouped by bucket, each
                  bucket's slice shuffled
    ``starts``    (B,) int64 and ``sizes`` (B,) int64: batch b is ``rows[starts[b]:][:sizes[b]]``
    ``members``   None, or (N,) int64: the pair behind each row (an epoch drawn by corpus
                  weights, `mtx.data.weights`); ``plan[b]`` gives pair indices either way
"""
import numpy as onp


def bucket_keys(lengths, num_buckets, width_ratio):
    """The sorted distinct bucket keys gluonnlp's `ExpWidthBucket` makes for ``lengths``."""
    from gluonnlp.data import ExpWidthBucket
    keys = ExpWidthBucket(bucket_len_step=width_ratio)(int(lengths.max()), int(lengths.min()),
                                                       num_buckets)
    return onp.array(sorted(set(keys)), "int64")


def grouped_rows(lengths, keys, chunk=1 << 20):
    """(rows, bounds): the indices of ``lengths`` grouped by the smallest key that fits each
    (ascending within a bucket, as gluonnlp lists them), empty buckets left out; bucket k is
    ``rows[bounds[k]:bounds[k + 1]]``. Made ``chunk`` pairs at a time: memory beyond the result
    is a byte a pair and the chunk's."""
    bucket = onp.empty(len(lengths), "uint8" if len(keys) < 256 else "int32")
    for a in range(0, len(lengths), chunk):
        bucket[a:a + chunk] = onp.searchsorted(keys, lengths[a:a + chunk])
    counts = onp.bincount(bucket, minlength=len(keys))
    bounds = onp.concatenate([[0], onp.cumsum(counts[counts > 0])]).astype("int64")
    cursor = onp.cumsum(counts) - counts  # where each bucket's next index goes
    rows = onp.empty(len(lengths), "int32" if len(lengths) < 2 ** 31 else "int64")
    for a in range(0, len(lengths), chunk):
        part = bucket[a:a + chunk]
        for k in onp.flatnonzero(counts):
            found = onp.flatnonzero(part == k) + a
            rows[cursor[k]:cursor[k] + len(found)] = found
            cursor[k] += len(found)
    return rows, bounds


class EpochPlan:
    """Token-budget batches of pair indices, as `FixedBucketSampler(lengths, batch_tokens,
    use_average_length=True, ExpWidthBucket(width_ratio))` plans them, with NumPy's global
    generator seeded by ``seed`` for the shuffles (restored after). A sequence: ``len(plan)``
    batches, ``plan[b]`` an index array, ``plan[b:]`` the plan from batch b on."""

    def __init__(self, lengths, batch_tokens, shuffle, seed, num_buckets, width_ratio,
                 members=None):
        lengths = onp.asarray(lengths, "int32")
        assert len(lengths) and lengths.min() > 0, "every pair has a length of 1 or more"
        distinct = int(onp.count_nonzero(onp.bincount(lengths)))
        keys = bucket_keys(lengths, min(num_buckets, distinct), width_ratio)
        self.rows, bounds = grouped_rows(lengths, keys)
        batch_size = [max(int(batch_tokens / (onp.mean(part) + onp.std(part))), 1)
                      for part in (lengths[self.rows[a:b]] for a, b in zip(bounds, bounds[1:]))]
        starts, sizes = [], []
        for k in range(len(batch_size) - 1, -1, -1):  # gluonnlp lists the longest bucket first
            begins = onp.arange(bounds[k], bounds[k + 1], batch_size[k])
            starts.append(begins)
            sizes.append(onp.minimum(batch_size[k], bounds[k + 1] - begins))
        self.starts, self.sizes = onp.concatenate(starts), onp.concatenate(sizes)
        self.members = members
        if shuffle:
            self._shuffle(seed, bounds)

    def _shuffle(self, seed, bounds):
        """The batches' order, then each bucket's rows, with the draws gluonnlp makes."""
        state = onp.random.get_state()
        onp.random.seed(seed % (2 ** 32))
        try:
            order = onp.arange(len(self.starts))
            onp.random.shuffle(order)
            self.starts, self.sizes = self.starts[order], self.sizes[order]
            for a, b in zip(bounds, bounds[1:]):
                onp.random.shuffle(self.rows[a:b])
        finally:
            onp.random.set_state(state)

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, batch):
        if isinstance(batch, slice):
            part = object.__new__(EpochPlan)
            part.rows, part.members = self.rows, self.members
            part.starts, part.sizes = self.starts[batch], self.sizes[batch]
            return part
        start = int(self.starts[batch])
        rows = self.rows[start:start + int(self.sizes[batch])]
        return rows if self.members is None else self.members[rows]

    def __iter__(self):
        return (self[b] for b in range(len(self)))

    @property
    def nbytes(self):
        """The memory the plan holds, in bytes."""
        return sum(a.nbytes for a in (self.rows, self.starts, self.sizes, self.members)
                   if a is not None)
