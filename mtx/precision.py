"""bfloat16 or float16 matrix multiplies, weights kept in float32.

`Linear` and the output projection cast input, weight and bias to the compute dtype around the
product and the product back to float32, so parameters, optimizer state, LayerNorm, softmax and the
loss stay float32 (the casts' gradients flow back to the float32 weights).

bfloat16 is for CPUs with AVX512-BF16: MXNet 1.9.1's pip wheel runs ``FullyConnected`` in bfloat16
through oneDNN at twice the float32 peak here (docs/performance.md), but it knows bfloat16 only as
the structured dtype ``mxnet.contrib.amp.amp.bfloat16``: the string 'bfloat16' fails, and so does
``amp.convert_hybrid_block``.

float16 is for GPUs: MXNet 1.9's float16 ``FullyConnected`` is cuDNN-only. Train it with dynamic
loss scaling (`mtx.optimizer.DynamicLossScale`, on by default with float16).
"""
from mxnet.contrib.amp.amp import bfloat16
from mxnet.gluon import nn
from mxnet.util import use_np

from .config import PRECISIONS
from .ops import legacy


def cast(F, x, dtype):
    """amp_cast of a NumPy-interface array or symbol (the op exists only in the legacy API)."""
    return legacy(F, "amp_cast", x, dtype=dtype)


def fully_connected(F, x, weight, bias, num_hidden, compute_dtype):
    """x (..., in) -> (..., num_hidden) float32; the product in ``compute_dtype``."""
    if compute_dtype == "float32":
        return F.npx.fully_connected(x, weight, bias, num_hidden=num_hidden, flatten=False,
                                     no_bias=bias is None)
    dtype = bfloat16 if compute_dtype == "bfloat16" else compute_dtype
    args = [cast(F, a, dtype) for a in (x, weight) + (() if bias is None else (bias,))]
    out = F.npx.fully_connected(*args, num_hidden=num_hidden, flatten=False, no_bias=bias is None)
    return cast(F, out, "float32")


@use_np
class Linear(nn.Dense):
    """`nn.Dense` (flatten=False) whose product can run in bfloat16 (`set_precision`)."""

    compute_dtype = "float32"

    def hybrid_forward(self, F, x, weight, bias=None):
        out = fully_connected(F, x, weight, bias, self._units, self.compute_dtype)
        return out if self.act is None else self.act(out)


def set_precision(model, precision):
    """Run every `Linear` and the output projection of ``model`` in ``precision``. Call before
    the first forward of a hybridized model (the graph is traced with it)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision}: choose one of {', '.join(PRECISIONS)}")

    def visit(block):
        if hasattr(type(block), "compute_dtype"):
            block.compute_dtype = precision
    model.apply(visit)
    return model
