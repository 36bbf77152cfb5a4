"""MXNet's legacy operators called on NumPy-interface arrays, where they are faster.

In MXNet 1.9.1 some NumPy-interface operators are slower than their legacy twins on the same
data: ``np.transpose`` against ``transpose``, and a same-shape ``a + b`` (whose backward runs a
broadcast reduction) against ``elemwise_add``; docs/performance.md has the training-step profile
(MXNet's profiler). `legacy` runs the legacy operator without copying
(``as_nd_ndarray`` / ``as_np_ndarray`` are views, also on symbols), so hybridized graphs and
imperative decoding use the same code.
"""


from mxnet import autograd, nd


def legacy(F, op, *arrays, **kwargs):
    """``F.<op>(*arrays, **kwargs)`` with the legacy operator ``op``, on NumPy-interface arrays
    or symbols; returns a NumPy-interface array or symbol."""
    return getattr(F, op)(*(a.as_nd_ndarray() for a in arrays), **kwargs).as_np_ndarray()


def transpose(F, x, axes):
    return legacy(F, "transpose", x, axes=axes)


def add(F, a, b):
    """a + b of the same shape."""
    return legacy(F, "elemwise_add", a, b)


def scale(F, x, factor):
    """x * factor for a Python number ``factor``."""
    return (x.as_nd_ndarray() * factor).as_np_ndarray()  # legacy _mul_scalar


def reshape(F, x, shape):
    """``F.npx.reshape(x, shape)`` (codes: -1 infer, -2 keep the dimension, -5 merge two, -6 split
    one into the two that follow). Imperative calls outside autograd return a view: MXNet 1.9's
    reshape operators copy the data when called imperatively (about 23 ms for a 41 MB decoder
    cache on 2 cores), the legacy ``NDArray.reshape`` method does not."""
    if F is nd and not autograd.is_recording():
        legacy_codes = {-2: 0, -5: -3, -6: -4}
        return x.as_nd_ndarray().reshape([legacy_codes.get(d, d) for d in shape]).as_np_ndarray()
    return F.npx.reshape(x, shape)


def take_groups(x, rows, groups):
    """x (groups*G, ...) seen as ``groups`` groups of G consecutive rows -> the groups ``rows``
    (R,) int32, in that order: (R*G, ...). Imperative, one copy."""
    flat = x.as_nd_ndarray().reshape((groups, -1))  # a view
    taken = nd.take(flat, rows.as_nd_ndarray(), axis=0)  # (R, G*...)
    return taken.reshape((-1,) + x.shape[1:]).as_np_ndarray()


def top_log_probs(F, logits, k, native):
    """logits (R, V) float32 -> (log-probabilities (R, k), token ids (R, k) float32) of each
    row's k most probable tokens, best first: with ``native`` mtx's fused kernel
    (``mtx_top_log_probs``, `mtx.kernels`), else MXNet's log_softmax then topk."""
    if native:
        out = F.mtx_top_log_probs(logits.as_nd_ndarray(), k=k)
        if F is not nd:  # in a traced graph: the kernel has no gradient, and a graph over
            # parameters that train is differentiated when it is built; stopped, it need not be
            out = [F.BlockGrad(x) for x in (out[0], out[1])]
        return out[0].as_np_ndarray(), out[1].as_np_ndarray()
    return F.npx.topk(F.npx.log_softmax(logits, axis=-1), k=k, axis=-1, ret_typ="both")


def cached_attention(F, q, keys, values, lens, scale, new=None):
    """One decoding step's attention in mtx's native kernel (``mtx_cached_attention``,
    `mtx.kernels`): q (N, Q, Dh) over the first ``lens`` (N,) float32 keys of keys and values
    (N, L, Dh), or with ``new`` (new keys, new values (N, 1, Dh) each; Q = 1) over the new
    key and the first lens - 1 cached ones -> context (N, Q, Dh). Reads only the valid
    positions; no weights are returned."""
    new_k, new_v = new if new is not None else (q, q)
    out = F.mtx_cached_attention(*(a.as_nd_ndarray() for a in (q, keys, values, lens, new_k, new_v)),
                                 scale=scale, with_new=int(new is not None))
    if F is not nd:  # no gradient: see `top_log_probs`
        out = F.BlockGrad(out)
    return out.as_np_ndarray()
