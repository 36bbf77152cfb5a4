"""The machine a benchmark ran on, and its matrix-multiply peaks (the MFU denominators)."""
import os
import time
from pathlib import Path

from ..cpu import cpu_flags, cpu_model, isa_cap
from .flops import FLOPS_PER_MULTIPLY_ADD, FORWARD_AND_BACKWARD

# Instruction-set flags that decide bfloat16 (and float32) matrix-multiply speed in oneDNN.
RELEVANT_FLAG_PREFIXES = ("avx2", "avx512", "amx")
GEMM_SIZE = 2048     # square FullyConnected, (GEMM_SIZE, GEMM_SIZE) x (GEMM_SIZE, GEMM_SIZE)
GEMM_REPEATS = 10    # the best of these many
SHAPE_REPEATS = 5    # forward + backward of each of a step's products: the best of these many
DECODE_REPEATS = 20  # a decoding step's products (each well under a millisecond): the best of these


def best_seconds(run, repeats):
    """The fastest of ``repeats`` timed calls of ``run`` (which waits for its own result)."""
    best = float("inf")
    for _ in range(repeats):
        tic = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - tic)
    return best


def cpu_info():
    """(model name, sorted relevant flags) of this CPU; ("unknown", []) off Linux."""
    return cpu_model(), sorted(f for f in cpu_flags() if f.startswith(RELEVANT_FLAG_PREFIXES))


def describe():
    """CPU model and its AVX2/AVX512/AMX flags, the oneDNN cap if set, core count, MXNet and
    CTranslate2 versions, OMP_NUM_THREADS. The versions come from the package metadata: importing MXNet would add its
    memory to the peak of a process that measures CTranslate2."""
    from importlib.metadata import PackageNotFoundError, version
    model, flags = cpu_info()
    try:
        ctranslate2 = version("ctranslate2")
    except PackageNotFoundError:
        ctranslate2 = None
    return {"cpu": model, "cpu_flags": flags, "isa_cap": isa_cap(), "cores": os.cpu_count(),
            "mxnet": version("mxnet"),
            "onednn": onednn_version(), "ctranslate2": ctranslate2,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def onednn_version():
    """The oneDNN version MXNet was built with, from the header its wheel ships
    (include/mkldnn/oneapi/dnnl/dnnl_version.h), or None; MXNet is not imported."""
    import importlib.util
    import re
    spec = importlib.util.find_spec("mxnet")
    if spec is None or not spec.submodule_search_locations:
        return None
    header = (Path(list(spec.submodule_search_locations)[0]) / "include" / "mkldnn" / "oneapi"
              / "dnnl" / "dnnl_version.h")
    try:
        text = header.read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define DNNL_VERSION_{p}\s+(\d+)", text) for p in
             ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def kernel_status():
    """Whether mtx's native kernels (the LayerNorm operator) are in use in this process:
    `mtx.kernels.status()` where it exists, else whether `mtx.kernels.load()` registered them."""
    from .. import kernels
    status = getattr(kernels, "status", None)
    return dict(status()) if callable(status) else {"native_layer_norm": kernels.load()}


def gemm_peak(dtype="float32"):
    """Best of 10 2048^3 FullyConnected, GFLOP/s. ``bfloat16`` runs through oneDNN with MXNet's
    own bfloat16 dtype (`mxnet.contrib.amp.amp.bfloat16`, a structured numpy dtype): the string
    'bfloat16' is not understood by `amp_cast` in the 1.9.1 wheel, this dtype is. None where
    bfloat16 products cannot run (`mtx.precision.bfloat16_unavailable`: decided in a child)."""
    import mxnet as mx
    from ..precision import bfloat16_unavailable
    if dtype == "bfloat16" and bfloat16_unavailable():
        return None
    shape = (GEMM_SIZE, GEMM_SIZE)
    a, w = mx.nd.random.normal(shape=shape), mx.nd.random.normal(shape=shape)
    if dtype == "bfloat16":
        from mxnet.contrib.amp.amp import bfloat16
        a, w = mx.nd.amp_cast(a, dtype=bfloat16), mx.nd.amp_cast(w, dtype=bfloat16)
    best = best_seconds(
        lambda: mx.nd.FullyConnected(a, w, num_hidden=GEMM_SIZE, no_bias=True).wait_to_read(),
        GEMM_REPEATS)
    return round(2 * GEMM_SIZE ** 3 / best / 1e9, 1)


def gemm_peaks(isa_cap=None):
    """{"float32": GFLOP/s, "bfloat16": GFLOP/s or None} (`gemm_peak`), here, or in a child
    process with oneDNN capped at ``isa_cap`` (a DNNL_MAX_CPU_ISA value, e.g. 'AVX2')."""
    if isa_cap is None:
        return {dtype: gemm_peak(dtype) for dtype in ("float32", "bfloat16")}
    import json
    import subprocess
    import sys
    code = "import json; from mtx.bench.machine import gemm_peaks; print(json.dumps(gemm_peaks()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "DNNL_MAX_CPU_ISA": isa_cap}, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def products_speed(products):
    """The matrix products of a step [(rows, in, out, count)], each timed alone forward and
    backward (FullyConnected with bias: the forward and both gradients, best of SHAPE_REPEATS) ->
    {"gflop_s": their FLOPs over their summed time, "products": [{rows, in, out, count, ms,
    gflop_s}]}: the speed the step's products would have if nothing else ran."""
    import mxnet as mx
    from mxnet import autograd
    rows_out, flops, seconds = [], 0.0, 0.0
    for rows, n_in, n_out, count in products:
        x, w = mx.nd.random.normal(shape=(rows, n_in)), mx.nd.random.normal(shape=(n_out, n_in))
        b = mx.nd.zeros((n_out,))
        for a in (x, w, b):
            a.attach_grad()

        def forward_backward(x=x, w=w, b=b, n_out=n_out):
            with autograd.record():
                y = mx.nd.FullyConnected(x, w, b, num_hidden=n_out)
            y.backward(mx.nd.ones_like(y))
            mx.nd.waitall()
        best = best_seconds(forward_backward, SHAPE_REPEATS)
        product_flops = FLOPS_PER_MULTIPLY_ADD * FORWARD_AND_BACKWARD * rows * n_in * n_out
        flops, seconds = flops + count * product_flops, seconds + count * best
        rows_out.append({"rows": rows, "in": n_in, "out": n_out, "count": count,
                         "ms": round(1000 * best, 2),
                         "gflop_s": round(product_flops / best / 1e9, 1)})
    return {"gflop_s": round(flops / seconds / 1e9, 1), "ms_per_step": round(1000 * seconds, 1),
            "products": rows_out}


def decode_parts_speed(parts):
    """Each part of a decoding step ({part: [(kind, shape, count)]}, `flops.decode_step_parts`)
    timed alone, forward only, each product the best of DECODE_REPEATS -> {part: ms per step}:
    what the step's products cost if nothing else ran."""
    import mxnet as mx
    ms = {}
    for part, products in parts.items():
        seconds = 0.0
        for kind, shape, count in products:
            if kind == "dense":
                rows, n_in, n_out = shape
                args = (mx.nd.random.normal(shape=(rows, n_in)),
                        mx.nd.random.normal(shape=(n_out, n_in)), mx.nd.zeros((n_out,)))

                def product(x, w, b, n_out=n_out):
                    return mx.nd.FullyConnected(x, w, b, num_hidden=n_out)
            else:
                batch, m, k, n = shape
                args = (mx.nd.random.normal(shape=(batch, m, k)),
                        mx.nd.random.normal(shape=(batch, k, n)))
                product = mx.nd.batch_dot
            seconds += count * best_seconds(lambda: product(*args).wait_to_read(),
                                            DECODE_REPEATS)
        ms[part] = round(1000 * seconds, 3)
    return ms
