"""mtx.model.masks: causal lengths, and what they mean once they reach masked_softmax."""
import numpy as onp
from mxnet import nd, np

from mtx.model.attention import masked_softmax
from mtx.model.masks import causal_valid_len


def test_causal_valid_len_is_one_to_t_per_row():
    lens = causal_valid_len(nd, np.zeros((2, 3, 4)), np.array([3, 1]))  # (B, T, D), (B,)
    assert lens.dtype == onp.int32
    onp.testing.assert_array_equal(lens.asnumpy(), [[1, 2, 3], [1, 2, 3]])


def test_causal_lengths_give_lower_triangular_weights():
    T = 4
    lens = causal_valid_len(nd, np.zeros((2, T, 8)), np.array([4, 2]))
    weights = masked_softmax(np.array(onp.random.standard_normal((2, T, T)).astype("float32")),
                             lens).asnumpy()
    future = onp.triu(onp.ones((T, T), dtype=bool), k=1)  # key j > query i
    assert (weights[:, future] == 0).all()
    assert (weights[:, ~future] > 0).all()
    onp.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)
