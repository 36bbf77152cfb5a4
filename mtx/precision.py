"""bfloat16 or float16 matrix multiplies, weights kept in float32, and the choice between them.

`Linear` and the output projection cast input, weight and bias to the compute dtype around the
product and the product back to float32, so parameters, optimizer state, LayerNorm, softmax and the
loss stay float32 (the casts' gradients flow back to the float32 weights).

bfloat16 is for CPUs with AVX512-BF16: MXNet 1.9.1's pip wheel runs ``FullyConnected`` in bfloat16
through oneDNN at twice the float32 peak on an AMD EPYC (docs/performance.md), but at 0.54x on an
Intel Xeon that reports the same flag, so `choose_precision` decides ``train.precision=auto`` by
timing the products (`probe_matmul_speed`), not by CPU flags. MXNet knows bfloat16 only as the
structured dtype ``mxnet.contrib.amp.amp.bfloat16``: the string 'bfloat16' fails, and so does
``amp.convert_hybrid_block``.

float16 is for GPUs: MXNet 1.9's float16 ``FullyConnected`` is cuDNN-only. Train it with dynamic
loss scaling (`mtx.optimizer.DynamicLossScale`, on by default with float16).
"""
import logging
import statistics
import time

import numpy as onp
from mxnet.base import MXNetError
from mxnet.contrib.amp.amp import bfloat16
from mxnet.gluon import nn
from mxnet.util import use_np

from .config import PRECISIONS
from .errors import ConfigError
from .ops import legacy

log = logging.getLogger(__name__)

# (tokens, in, out) of the default model's products (conf/model/small.yaml, an 8000-subword
# vocabulary): the FFN's first and second layer and the output projection, at 2048 tokens, the
# shapes every recorded probe ratio was measured at (the default batch is 1024 since issue #15).
PROBE_SHAPES = ((2048, 256, 1024), (2048, 1024, 256), (2048, 256, 8000))
PROBE_ROUNDS = 7  # interleaved float32/bfloat16 rounds (throughput drifts by ±15% within a minute)
PROBE_SECONDS = 2.0  # fewer rounds (at least 3) where they take longer: a busy or slow CPU
# bfloat16 only from this speed-up of the products. The threshold must sit between the machines,
# not inside one machine's spread: the same AMD EPYC measured 1.22x, 1.33x and 1.53x at the start
# of three hours (docs/results.md), an Intel Xeon 0.54-0.64x; at 1.25 `auto` chose float32 in one
# of the AMD hours and bfloat16 in the others.
BF16_MIN_SPEEDUP = 1.1


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


def probe_matmul_speed(ctx, shapes=PROBE_SHAPES, rounds=PROBE_ROUNDS, max_seconds=PROBE_SECONDS,
                       dtypes=("float32", "bfloat16")):
    """{dtype: GFLOP/s} of `fully_connected` (casts included) over ``shapes`` (tokens, in, out)
    on ``ctx``: one warm-up, then the median of ``rounds`` interleaved rounds (at least 3, fewer
    than ``rounds`` once ``max_seconds`` have passed). Raises MXNetError (or TypeError) when a
    dtype cannot run here."""
    import mxnet as mx
    rng = onp.random.RandomState(0)
    arrays = [[mx.np.array(rng.uniform(-1, 1, size), dtype="float32", ctx=ctx)
               for size in ((tokens, n_in), (n_out, n_in), (n_out,))]
              for tokens, n_in, n_out in shapes]

    def seconds(dtype):
        start = time.perf_counter()
        outs = [fully_connected(mx.nd, x, w, b, w.shape[0], dtype) for x, w, b in arrays]
        for out in outs:
            out.wait_to_read()
        return time.perf_counter() - start

    times, start = {dtype: [] for dtype in dtypes}, time.perf_counter()
    for dtype in dtypes:
        seconds(dtype)  # oneDNN builds its primitives and reorders the weights
    for done in range(rounds):
        if done >= 3 and time.perf_counter() - start > max_seconds:
            break
        for dtype in dtypes:
            times[dtype].append(seconds(dtype))
    flops = sum(2 * tokens * n_in * n_out for tokens, n_in, n_out in shapes)
    return {dtype: flops / statistics.median(t) / 1e9 for dtype, t in times.items()}


def check_device(precision, ctxs):
    """ConfigError if ``precision`` cannot run on the devices ``ctxs``."""
    if precision == "float16" and any(c.device_type == "cpu" for c in ctxs):
        raise ConfigError("train.precision=float16 needs a GPU (MXNet 1.9's float16 "
                          "FullyConnected is cuDNN-only): on a CPU use train.precision="
                          "bfloat16 (AVX512-BF16), auto or float32")


def choose_precision(requested, ctxs, recorded=None):
    """The matrix-multiply precision to train in, as a dict for the log and report.json: ``used``,
    ``requested``, ``reason`` and, when measured, ``probe`` (both GFLOP/s, their ratio, the
    threshold). ``recorded``: the choice a resumed run started with, kept as it is. ``auto``:
    float32 on a GPU; on CPUs bfloat16 when its products run `BF16_MIN_SPEEDUP` times as fast."""
    if recorded is not None:
        if requested not in ("auto", recorded["used"]):
            log.warning("train.precision=%s is not used: this run started in %s and a resumed "
                        "run keeps it (a new hydra.run.dir starts a run in %s)", requested,
                        recorded["used"], requested)
        try:
            check_device(recorded["used"], ctxs)
        except ConfigError:
            raise ConfigError(f"this run trains in {recorded['used']}, which needs a GPU: resume "
                              f"it on one (device=gpu), or start a new hydra.run.dir") from None
        log.info("matrix products in %s, as when the run started (%s)", recorded["used"],
                 recorded["reason"])
        return dict(recorded)
    check_device(requested, ctxs)
    if requested != "auto":
        choice = {"used": requested, "reason": f"train.precision={requested}"}
    elif any(c.device_type != "cpu" for c in ctxs):
        choice = {"used": "float32", "reason": "auto on a GPU: float32, not probed (bfloat16 is "
                                               "for CPUs; float16 is train.precision=float16)"}
    else:
        choice = probe_choice(ctxs[0])
    log.info("matrix products in %s: %s", choice["used"], choice["reason"])
    return {"used": choice.pop("used"), "requested": requested, **choice}


def probe_choice(ctx):
    """`choose_precision`'s ``auto`` on a CPU: {used, reason, probe}."""
    start = time.perf_counter()
    try:
        speed = probe_matmul_speed(ctx)
    except (MXNetError, TypeError) as err:
        message = (str(err).strip().splitlines() or [""])[0]
        return {"used": "float32", "reason": f"auto: bfloat16 products fail here "
                                             f"({type(err).__name__}: {message[:200]}), float32"}
    ratio = speed["bfloat16"] / speed["float32"]
    used = "bfloat16" if ratio >= BF16_MIN_SPEEDUP else "float32"
    probe = {"float32_gflop_s": round(speed["float32"], 1),
             "bfloat16_gflop_s": round(speed["bfloat16"], 1), "ratio": round(ratio, 3),
             "min_ratio": BF16_MIN_SPEEDUP, "seconds": round(time.perf_counter() - start, 2)}
    return {"used": used, "probe": probe,
            "reason": f"auto: bfloat16 products {probe['bfloat16_gflop_s']} GFLOP/s, float32 "
                      f"{probe['float32_gflop_s']}: {ratio:.2f}x, bfloat16 from "
                      f"{BF16_MIN_SPEEDUP}x, so {used}"}
