"""MXNet's legacy operators called on NumPy-interface arrays, where they are faster.

In MXNet 1.9.1 some NumPy-interface operators are slower than their legacy twins on the same
data: ``np.transpose`` against ``transpose``, and a same-shape ``a + b`` (whose backward runs a
broadcast reduction) against ``elemwise_add``; docs/performance.md has the training-step profile
(`scripts/bench.py profile`). `legacy` runs the legacy operator without copying
(``as_nd_ndarray`` / ``as_np_ndarray`` are views, also on symbols), so hybridized graphs and
imperative decoding use the same code.
"""


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
