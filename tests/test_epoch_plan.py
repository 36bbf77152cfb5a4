"""The epoch plan in NumPy arrays (`mtx.data.plan`): gluonnlp's FixedBucketSampler's batches, in
its order, at a few bytes a pair."""
import tracemalloc

import numpy as onp
import pytest

from mtx.data.batching import BUCKET_WIDTH_RATIO, NUM_BUCKETS, batch_plan


def gluonnlp_plan(lengths, batch_tokens, seed):
    """What batch_plan returned before: the sampler's lists, NumPy's generator seeded."""
    from gluonnlp.data import ExpWidthBucket, FixedBucketSampler
    sampler = FixedBucketSampler(lengths.tolist(), batch_size=batch_tokens,
                                 num_buckets=min(NUM_BUCKETS, len(set(lengths.tolist()))),
                                 shuffle=True, use_average_length=True,
                                 bucket_scheme=ExpWidthBucket(bucket_len_step=BUCKET_WIDTH_RATIO))
    onp.random.seed(seed)
    return list(sampler)


@pytest.mark.parametrize("seed, size, longest", [(1, 3000, 60), (7, 500, 5), (42, 20, 130),
                                                 (3, 1, 9)])
def test_the_plan_is_gluonnlps_batches_in_its_order(seed, size, longest):
    rng = onp.random.RandomState(seed)
    lengths = onp.minimum(rng.geometric(0.08, size), longest).astype("int32") + 1
    ours = batch_plan(lengths, 1024, shuffle=True, seed=seed)
    theirs = gluonnlp_plan(lengths, 1024, seed)
    assert [group.tolist() for group in ours] == theirs
    assert [group.tolist() for group in ours[3:]] == theirs[3:]


def test_an_epoch_plan_for_ten_million_pairs_holds_under_five_bytes_a_pair():
    """The bound: the lengths (int32, the caller's) aside, the plan keeps 4 bytes a pair (its
    rows, int32) and 16 a batch, under 5 a pair; building it peaks under 12 a pair (measured:
    4.06 and 9.0). The lists it replaced held 36 a pair (a pointer and an int object)."""
    n = 10_000_000
    lengths = (onp.random.RandomState(0).geometric(0.07, n).clip(1, 127) + 1).astype("int32")
    tracemalloc.start()
    try:
        plan = batch_plan(lengths, 4096, shuffle=True, seed=1)
        resident, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert plan.nbytes < 5 * n and resident < 5 * n, (plan.nbytes, resident)
    assert peak < 12 * n, peak
    rows = onp.concatenate([plan[b] for b in range(0, len(plan), 97)])
    assert len(onp.unique(rows)) == len(rows)  # no pair twice
    assert sum(int(s) for s in plan.sizes) == n


def test_bucket_lengths_come_from_the_offsets_a_chunk_at_a_time(monkeypatch):
    from mtx.data import pairs as pairs_module
    monkeypatch.setattr(pairs_module, "LENGTHS_CHUNK", 3)
    pairs = pairs_module.PairIds.from_lists([[4], [4, 5, 6], [], [7, 8], [9]] * 2,
                                            [[4, 4], [5], [6], [7, 8, 9, 9], []] * 2)
    lengths = pairs.bucket_lengths()
    assert lengths.dtype == onp.int32 and lengths.tolist() == [3, 4, 2, 5, 2] * 2
