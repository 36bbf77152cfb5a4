"""Data parallelism on MXNet's own machinery.

A training batch is defined in tokens for the whole job. It is split by rows into one part per
device of every worker: this process trains on its parts (`local_parts`), the Gluon Trainer's
KVStore sums the gradients (over this machine's devices, and with ``dist_sync`` over the workers
of a cluster started by `mxnet.tools.launch`), and the update divides by the job's token count.
So the schedule, the step count and the result do not depend on how many devices share a batch.
"""
import hashlib
import logging

import mxnet as mx
import numpy as onp


log = logging.getLogger(__name__)

FLAG_KEY = 1 << 20  # our own KVStore keys, far beyond the Trainer's parameter indices
DIGEST_KEY = FLAG_KEY + 1
MEAN_KEY = FLAG_KEY + 2
DIGEST_PARTS = 4    # 64 bits of a SHA-256 as 16-bit parts: their sum over up to 256 workers is
                    # an integer float32 holds exactly


def split_rows(batch, parts):
    """A `Batch` -> ``parts`` Batches of consecutive rows (sizes differ by at most one; a part
    may be empty when the batch has fewer rows than ``parts``)."""
    pieces = onp.array_split(onp.arange(len(batch.ids)), parts)
    return [batch.rows(rows) for rows in pieces]


class DataParallel:
    """Who this process is in the job (rank among ``num_workers``) and its devices ``ctxs``.

    ``kvstore``: ``device``/``local`` for the devices of one process (the Trainer creates it when
    there is more than one device), ``dist_sync``/``dist_device_sync`` for a cluster (created here,
    so rank and worker count are known before training starts)."""

    def __init__(self, ctxs, kvstore="device"):
        self.ctxs, self.kvstore_name = list(ctxs), kvstore
        self.kv = mx.kv.create(kvstore) if kvstore.startswith("dist") else None
        self.rank = self.kv.rank if self.kv else 0
        self.num_workers = self.kv.num_workers if self.kv else 1
        if self.kv:
            self.kv.init(FLAG_KEY, mx.nd.zeros(1))
            self.kv.init(DIGEST_KEY, mx.nd.zeros(DIGEST_PARTS))
            self.kv.init(MEAN_KEY, mx.nd.zeros(1))

    @property
    def trainer_kvstore(self):
        return self.kv if self.kv else self.kvstore_name

    @property
    def distributed(self):
        return self.kv is not None

    @property
    def is_chief(self):
        """Rank 0 alone writes checkpoints, metrics, logs and the report."""
        return self.rank == 0

    def local_parts(self, batch):
        """This process's parts of the job's ``batch``: one per device, in ``ctxs`` order."""
        per_worker = len(self.ctxs)
        parts = split_rows(batch, self.num_workers * per_worker)
        return parts[self.rank * per_worker:(self.rank + 1) * per_worker]

    def any(self, flag):
        """True on every worker when ``flag`` is true on any (a sum over the KVStore; without
        one, ``flag`` itself). Every worker must call it at the same point."""
        if self.kv is None:
            return bool(flag)
        return self._sum(FLAG_KEY, [1.0 if flag else 0.0])[0] > 0

    def mean(self, value):
        """The mean of ``value`` over the workers, the same number on every one (without a
        KVStore, ``value`` itself). Every worker must call it at the same point."""
        if self.kv is None:
            return value
        return self._sum(MEAN_KEY, [value])[0] / self.num_workers

    def same(self, text):
        """True on every worker when ``text`` (e.g. the digest of the checkpoint it restored) is
        the same on all of them, compared by 64 bits of its SHA-256. Every worker must call it
        at the same point."""
        if self.kv is None:
            return True
        digest = hashlib.sha256(text.encode()).digest()
        parts = [float(int.from_bytes(digest[2 * i:2 * i + 2], "big")) for i in range(DIGEST_PARTS)]
        totals = self._sum(DIGEST_KEY, parts)
        return not self.any(any(t != p * self.num_workers for t, p in zip(totals, parts)))

    def _sum(self, key, values):
        """``values`` summed over the workers (a push and a pull of KVStore key ``key``)."""
        self.kv.push(key, mx.nd.array(values))
        total = mx.nd.zeros(len(values))
        self.kv.pull(key, out=total)
        return [float(v) for v in total.asnumpy()]
