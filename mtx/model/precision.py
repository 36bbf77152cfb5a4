"""bfloat16 or float16 matrix multiplies with weights kept in float32: the layers that apply a
precision chosen elsewhere (`mtx.training.precision`).

`Linear` and the output projection cast input, weight and bias to the compute dtype around the
product; `Linear` casts the product back to float32, the output projection leaves it to its
callers (`as_float32`), so that training's native loss can read bfloat16 logits as they are.
``bfloat16-mkl`` is one operator, ``mtx_mkl_dense`` (`mtx.kernels.mkl`), with float32 inputs and
outputs: it rounds the operands to bfloat16 itself and accumulates in float32.
Parameters, optimizer state, LayerNorm, softmax and the loss's arithmetic stay float32. MXNet
knows bfloat16 only as the dtype ``mxnet.contrib.amp.amp.bfloat16``.
"""
from mxnet.contrib.amp.amp import bfloat16
from mxnet.gluon import nn
from mxnet.util import use_np

from ..config import MKL_BFLOAT16, PRECISIONS
from ..kernels import mkl
from .ops import legacy

FLOAT32_PRODUCTS = ("float32", MKL_BFLOAT16)  # the precisions whose products come out float32


def fully_connected(F, x, weight, bias, num_hidden, compute_dtype, to_float32=True):
    """x (..., in) -> (..., num_hidden) float32; the product in ``compute_dtype`` (and with
    ``to_float32=False`` left in it: `as_float32` casts it where float32 is needed)."""
    if compute_dtype == "float32":
        return F.npx.fully_connected(x, weight, bias, num_hidden=num_hidden, flatten=False,
                                     no_bias=bias is None)
    if compute_dtype == MKL_BFLOAT16:
        operands = [a.as_nd_ndarray() for a in (x, weight) + (() if bias is None else (bias,))]
        return F.mtx_mkl_dense(*operands, no_bias=bias is None).as_np_ndarray()
    dtype = bfloat16 if compute_dtype == "bfloat16" else compute_dtype
    args = [legacy(F, "amp_cast", a, dtype=dtype)  # amp_cast exists only in the legacy API
            for a in (x, weight) + (() if bias is None else (bias,))]
    out = F.npx.fully_connected(*args, num_hidden=num_hidden, flatten=False, no_bias=bias is None)
    return as_float32(F, out, compute_dtype) if to_float32 else out


def as_float32(F, x, compute_dtype):
    """``x``, a product computed in ``compute_dtype``, as float32 (no operator if it is)."""
    return x if compute_dtype in FLOAT32_PRODUCTS else legacy(F, "amp_cast", x, dtype="float32")


@use_np
class Linear(nn.Dense):
    """`nn.Dense` (flatten=False) whose product can run in bfloat16 (`set_precision`)."""

    compute_dtype = "float32"

    def hybrid_forward(self, F, x, weight, bias=None):
        out = fully_connected(F, x, weight, bias, self._units, self.compute_dtype)
        return out if self.act is None else self.act(out)


def set_precision(model, precision):
    """Every `Linear` of ``model`` in ``precision``, one that `mtx.training.precision` chose or
    checked for this machine; before a hybridized model's first forward."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision}: choose one of {', '.join(PRECISIONS)}")
    reason = mkl.unavailable() if precision == MKL_BFLOAT16 else None
    if reason:
        raise ValueError(f"precision={precision} cannot run here: {reason}")
    model.apply(lambda block: setattr(block, "compute_dtype", precision)
                if hasattr(type(block), "compute_dtype") else None)
    return model


