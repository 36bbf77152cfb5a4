"""mtx.model.attention: the book's example, parity with d2l 1.0.3, masking, head gates, hybridization."""
import numpy as onp
import pytest
from mxnet import autograd, nd, np
from d2l import mxnet as d2l  # npx.set_np() ran in conftest

from mtx.model.attention import MultiHeadAttention, masked_softmax

WEIGHTS = ("W_q", "W_k", "W_v", "W_o")
B, TQ, TK, D = 2, 3, 5, 16
LENS_1D = [2, 5]  # (B,): every query of a sentence sees the same keys
LENS_2D = [[1, 3, 5], [2, 5, 4]]  # (B, Tq): one length per query


def _randn(*shape):
    return np.array(onp.random.standard_normal(shape).astype("float32"))


def _qkv():
    return _randn(B, TQ, D), _randn(B, TK, D), _randn(B, TK, D)


def _lens(kind):
    return {"none": None, "1d": np.array(LENS_1D), "2d": np.array(LENS_2D)}[kind]


def _block(num_heads, hybridize=False, source=None):
    """A dropout-free block with known input width; ``source`` gives it that block's weights."""
    block = MultiHeadAttention(D, num_heads, 0.0, in_units=D)
    block.initialize()
    if source is not None:
        for name in WEIGHTS:
            getattr(block, name).weight.set_data(getattr(source, name).weight.data().copy())
    if hybridize:
        block.hybridize()
    return block


def _set_rows(dense, rows, values):
    weight = dense.weight.data().asnumpy()
    weight[rows] = values
    dense.weight.set_data(np.array(weight))


# -- the book's example -------------------------------------------------------------------------

def test_book_shape_example():
    attention = MultiHeadAttention(100, 5, 0.5)
    attention.initialize()
    X, Y = np.ones((2, 4, 100)), np.ones((2, 6, 100))
    assert attention(X, Y, Y, np.array([3, 2])).shape == (2, 4, 100)


def test_valid_lens_none_attends_everywhere():
    """The book's listing requires valid_lens; here None works and means 'all keys'."""
    attention = MultiHeadAttention(100, 5, 0.5)
    attention.initialize()
    X, Y = _randn(2, 4, 100), _randn(2, 6, 100)
    out = attention(X, Y, Y)
    assert out.shape == (2, 4, 100)
    onp.testing.assert_allclose(out.asnumpy(), attention(X, Y, Y, np.array([6, 6])).asnumpy(),
                                rtol=1e-5, atol=1e-6)


# -- parity with d2l 1.0.3 ----------------------------------------------------------------------

def _forward_and_grads(block, q, k, v, valid_lens, cotangent):
    """Output, gradients w.r.t. (queries, keys, values) and w.r.t. W_q, W_k, W_v, W_o."""
    inputs = [x.copy() for x in (q, k, v)]
    for x in inputs:
        x.attach_grad()
    with autograd.record():
        out = block(*inputs, valid_lens)
        loss = (out * cotangent).sum()
    loss.backward()
    return (out.asnumpy(), [x.grad.asnumpy() for x in inputs],
            [getattr(block, name).weight.grad().asnumpy() for name in WEIGHTS])


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("kind", ["1d", "2d"])
@pytest.mark.parametrize("num_heads", [1, 2, 4, 8])
def test_matches_d2l_forward_and_gradients(num_heads, kind, hybridize):
    q, k, v = _qkv()
    ours = _block(num_heads)
    book = d2l.MultiHeadAttention(D, num_heads, 0.0)
    book.initialize()
    book(q, k, v, None)  # infer the book's deferred shapes, then copy our weights in
    for name in WEIGHTS:
        getattr(book, name).weight.set_data(getattr(ours, name).weight.data().copy())
    if hybridize:
        ours.hybridize()
    cotangent = _randn(B, TQ, D)
    out, input_grads, weight_grads = _forward_and_grads(ours, q, k, v, _lens(kind), cotangent)
    ref, ref_input_grads, ref_weight_grads = _forward_and_grads(book, q, k, v, _lens(kind),
                                                                cotangent)
    onp.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    for got, want in zip(input_grads + weight_grads, ref_input_grads + ref_weight_grads):
        onp.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert onp.abs(weight_grads[0]).max() > 0  # the comparison is not between zeros


def _row_lens(valid_lens, shape):
    """Per-query lengths (B, Tq) for 1-D or 2-D valid lengths."""
    return onp.broadcast_to(onp.asarray(valid_lens).reshape(shape[0], -1), shape[:2])


@pytest.mark.parametrize("valid_lens", [[3, 0], [[0, 2, 5], [1, 0, 4]]], ids=["1d", "2d"])
def test_masked_softmax_matches_d2l(valid_lens):
    """Same values and gradients as d2l on rows with length >= 1; zeros on length-0 rows
    (d2l fills with -1e6, so its length-0 rows are uniform instead)."""
    scores, lens = _randn(B, TQ, TK), np.array(valid_lens)
    cotangent = _randn(B, TQ, TK)
    results = []
    for fn in (masked_softmax, d2l.masked_softmax):
        x = scores.copy()
        x.attach_grad()
        with autograd.record():
            weights = fn(x, lens)
            (weights * cotangent).sum().backward()
        results.append((weights.asnumpy(), x.grad.asnumpy()))
    (ours, ours_grad), (book, book_grad) = results
    rows = _row_lens(valid_lens, (B, TQ)) >= 1
    onp.testing.assert_allclose(ours[rows], book[rows], rtol=1e-5, atol=1e-7)
    onp.testing.assert_allclose(ours_grad[rows], book_grad[rows], rtol=1e-4, atol=1e-6)
    assert (ours[~rows] == 0).all() and (ours_grad[~rows] == 0).all()
    onp.testing.assert_allclose(book[~rows], 1.0 / TK)  # the book's behaviour, for contrast


# -- masking ------------------------------------------------------------------------------------

@pytest.mark.parametrize("valid_lens", [[3, 0], [[0, 2, 5], [1, 0, 4]]], ids=["1d", "2d"])
def test_masked_weights_are_zero_and_rows_sum_to_one(valid_lens):
    weights = masked_softmax(_randn(B, TQ, TK), np.array(valid_lens)).asnumpy()
    row_lens = _row_lens(valid_lens, (B, TQ))
    for b in range(B):
        for i in range(TQ):
            n = row_lens[b, i]
            assert (weights[b, i, n:] == 0).all()
            assert (weights[b, i, :n] > 0).all()
            assert weights[b, i].sum() == pytest.approx(1.0 if n else 0.0, abs=1e-6)


@pytest.mark.parametrize("num_heads", [1, 2, 4])
def test_multi_head_weights_respect_valid_lens(num_heads):
    q, k, v = _qkv()
    _, weights = _block(num_heads).attend(nd, q, k, v, np.array(LENS_2D))  # (B*H, Tq, Tk)
    weights = weights.asnumpy().reshape(B, num_heads, TQ, TK)
    for b in range(B):
        for i, n in enumerate(LENS_2D[b]):
            assert (weights[b, :, i, n:] == 0).all()
            onp.testing.assert_allclose(weights[b, :, i].sum(-1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("num_heads", [1, 2, 4])
def test_keys_past_valid_len_change_nothing(num_heads, hybridize):
    q, k, v = _qkv()
    block = _block(num_heads, hybridize)
    lens = np.array(LENS_1D)
    out = block(q, k, v, lens).asnumpy()
    k2, v2 = k.asnumpy(), v.asnumpy()
    for b, n in enumerate(LENS_1D):
        k2[b, n:] += 100.0
        v2[b, n:] -= 100.0
    onp.testing.assert_array_equal(block(q, np.array(k2), np.array(v2), lens).asnumpy(), out)
    k2[0, 0] += 1.0  # a key inside the valid length does matter
    assert not onp.allclose(block(q, np.array(k2), v, lens).asnumpy()[0], out[0], atol=1e-4)


@pytest.mark.parametrize("num_heads", [1, 2])
def test_per_query_lens_hide_later_keys(num_heads):
    """2-D lengths: perturbing the last key changes exactly the queries whose length is Tk."""
    q, k, v = _qkv()
    block = _block(num_heads)
    out = block(q, k, v, np.array(LENS_2D)).asnumpy()
    k2, v2 = k.asnumpy(), v.asnumpy()
    k2[:, -1] += 10.0
    v2[:, -1] += 10.0
    changed = block(q, np.array(k2), np.array(v2), np.array(LENS_2D)).asnumpy() != out
    onp.testing.assert_array_equal(changed.any(-1), onp.array(LENS_2D) == TK)


# -- head gates ---------------------------------------------------------------------------------

@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("kind", ["none", "1d", "2d"])
@pytest.mark.parametrize("num_heads", [1, 4])
def test_all_ones_gate_equals_no_gate(num_heads, kind, hybridize):
    q, k, v = _qkv()
    plain = _block(num_heads)
    gated = _block(num_heads, hybridize, source=plain)
    want = plain(q, k, v, _lens(kind)).asnumpy()
    got = gated(q, k, v, _lens(kind), np.ones((num_heads,))).asnumpy()
    onp.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("hybridize", [False, True])
@pytest.mark.parametrize("num_heads, head", [(2, 0), (4, 2), (4, 3)])
def test_zero_gate_removes_the_head(num_heads, head, hybridize):
    q, k, v = _qkv()
    block = _block(num_heads, hybridize)
    gate = onp.ones(num_heads, dtype="float32")
    gate[head] = 0.0
    gate, ones, lens = np.array(gate), np.ones((num_heads,)), np.array(LENS_1D)
    gated, ungated = block(q, k, v, lens, gate).asnumpy(), block(q, k, v, lens, ones).asnumpy()
    head_dim = D // num_heads
    rows = slice(head * head_dim, (head + 1) * head_dim)
    for name in ("W_q", "W_k", "W_v"):
        _set_rows(getattr(block, name), rows, _randn(head_dim, D).asnumpy())
    onp.testing.assert_allclose(block(q, k, v, lens, gate).asnumpy(), gated, rtol=1e-5,
                                atol=1e-6)
    assert not onp.allclose(block(q, k, v, lens, ones).asnumpy(), ungated, atol=1e-3)


# -- construction and hybridization -------------------------------------------------------------

def test_indivisible_width_is_rejected():
    with pytest.raises(ValueError, match=r"num_hiddens=10\b.*num_heads=3\b"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("kind", ["none", "1d", "2d"])
@pytest.mark.parametrize("num_heads", [1, 2, 4])
def test_hybridized_equals_imperative(num_heads, kind, gate):
    q, k, v = _qkv()
    args = (q, k, v, _lens(kind)) + ((np.array([1.0, 0.5, 0.0, 2.0][:num_heads]),) if gate else ())
    imperative = _block(num_heads)
    hybrid = _block(num_heads, hybridize=True, source=imperative)
    want = imperative(*args).asnumpy()
    got = hybrid(*args).asnumpy()
    assert hybrid._cached_graph  # the symbolic path really ran
    onp.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
