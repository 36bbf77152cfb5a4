"""The precision of a run's matrix products, chosen once at its start: float32, bfloat16 by
MXNet's oneDNN or by oneMKL (``bfloat16-mkl``, AMX where the CPU has it; both timed against
float32 on this CPU) or float16 (GPUs), and kept by its resumes.

Its speed against float32 differs between CPUs with the same flags (docs/performance.md), so
``train.precision=auto`` times the products. oneDNN 2.x builds bfloat16 products only from
avx512_core up and not under a cap such as ``DNNL_MAX_CPU_ISA=AVX2``, and a failed MXNet operator
is raised again at a later synchronisation of the same process: no process runs one before a
child has shown that it works (`bfloat16_unavailable`). float16 is for GPUs (cuDNN only).
"""
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as onp

from ..errors import ConfigError
from ..hardware.cpu import AVX512_CORE, cpu_flags, isa_cap
from ..model.precision import MKL_BFLOAT16, fully_connected

log = logging.getLogger(__name__)

PROBE_SHAPES = ((2048, 256, 1024), (2048, 1024, 256), (2048, 256, 8000))  # small.yaml FFN, output
PROBE_ROUNDS = 15  # interleaved float32/bfloat16 rounds, each timed alone; the fastest counts
PROBE_SECONDS = 3.0  # fewer rounds (at least 3) where they take longer: a busy or slow CPU
# bfloat16 from this speed-up: between the kinds of machine measured (AMD EPYC 1.22-1.53x, Intel
BF16_MIN_SPEEDUP = 1.1  # Xeon 0.54-0.64x), not inside one machine's spread (docs/performance.md)
CHILD_SECONDS = 300  # the child's import of MXNet and its probe take a few seconds
_child_results = {}  # `child_probe`'s answers by (kind of probe, oneDNN cap), once per process


def probe_matmul_speed(ctx, shapes=PROBE_SHAPES, rounds=PROBE_ROUNDS, max_seconds=PROBE_SECONDS,
                       dtypes=("float32", "bfloat16"), backward=False):
    """{dtype: GFLOP/s} of `fully_connected` (casts included) over ``shapes`` (tokens, in, out)
    on ``ctx``, forward (or with ``backward`` forward and both gradients): the fastest of
    ``rounds`` interleaved rounds after a warm-up (at least 3 rounds, none begun after
    ``max_seconds``). Another job or a busy moment only ever slows a round, so the fastest is what
    the CPU does when nothing else runs; a median moves with how many rounds were disturbed."""
    import mxnet as mx
    rng = onp.random.RandomState(0)
    arrays = [[mx.np.array(rng.uniform(-1, 1, size), dtype="float32", ctx=ctx)
               for size in ((tokens, n_in), (n_out, n_in), (n_out,))]
              for tokens, n_in, n_out in shapes]
    for array in (a for group in arrays for a in group) if backward else ():
        array.attach_grad()

    def seconds(dtype):
        start = time.perf_counter()
        for x, w, b in arrays:
            with mx.autograd.record() if backward else contextlib.nullcontext():
                out = fully_connected(mx.nd, x, w, b, w.shape[0], dtype)
            if backward:
                out.backward(mx.np.ones_like(out))
        mx.nd.waitall()
        return time.perf_counter() - start

    times, start = {dtype: [] for dtype in dtypes}, time.perf_counter()
    for dtype in dtypes:
        seconds(dtype)  # oneDNN builds its primitives and reorders the weights
    for done in range(rounds):
        if done >= 3 and time.perf_counter() - start > max_seconds:
            break
        for dtype in dtypes:
            times[dtype].append(seconds(dtype))
    flops = (3 if backward else 1) * sum(2 * t * n_in * n_out for t, n_in, n_out in shapes)
    return {dtype: flops / min(t) / 1e9 for dtype, t in times.items()}


def cpu_lacks_bfloat16(flags=None):
    """Why this CPU's flags rule bfloat16 products out, or None when they do not."""
    missing = [f for f in AVX512_CORE if f not in (cpu_flags() if flags is None else flags)]
    return (f"this CPU has no {'/'.join(missing)} (oneDNN's bfloat16 products need AVX-512: "
            f"avx512_core)") if missing else None


def child_probe(measure):
    """bfloat16 products in a child (this process's oneDNN cap) -> {"ok": True, with ``measure``
    {dtype: GFLOP/s} too} or {"error": one line}; once per process, kind of probe and cap."""
    cap = isa_cap()
    key = ("speed" if measure else "works", cap)
    if key not in _child_results:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(  # this mtx
            __file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))}
        try:
            done = subprocess.run([sys.executable, "-c", f"from mtx.training.precision import probe_here; "
                                   f"probe_here({bool(measure)})"], capture_output=True,
                                  text=True, timeout=CHILD_SECONDS, env=env)
            result = json.loads(done.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            stderr = done.stderr.strip().splitlines() or [f"the probe exited with status "
                                                          f"{done.returncode}"]
            result = {"error": stderr[-1].strip()[:200]}
        except (OSError, subprocess.SubprocessError) as err:
            result = {"error": f"the probe did not run ({type(err).__name__}: {err})"}
        _child_results[key] = result
        if "error" not in result:
            _child_results.setdefault(("works", cap), {"ok": True})
    return _child_results[key]


def probe_here(measure):
    """The child's side of `child_probe`: a small bfloat16 product forward and backward (what a
    training step runs), then with ``measure`` the speed probe, oneMKL's products too where
    they can run (else its reason); prints one JSON line."""
    import mxnet as mx
    from ..kernels import mkl
    try:
        probe_matmul_speed(mx.cpu(), [(8, 16, 32)], rounds=1, dtypes=("bfloat16",), backward=True)
        result = {"ok": True}
        if measure:
            no_mkl = mkl.unavailable()
            dtypes = ("float32", "bfloat16") + (() if no_mkl else (MKL_BFLOAT16,))
            result.update(probe_matmul_speed(mx.cpu(), dtypes=dtypes),
                          **({"mkl_unavailable": no_mkl} if no_mkl else {}))
    except Exception as err:  # the operator's own error, whatever MXNet wraps it in
        message = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
        message = message.removeprefix(f"{type(err).__name__}: ")  # MXNet repeats its name
        result = {"error": f"{type(err).__name__}: {message[:200]}"}
    print(json.dumps(result), flush=True)


def bfloat16_unavailable():
    """Why bfloat16 products cannot run here (CPU flags, then a child under this cap), or None."""
    reason = cpu_lacks_bfloat16()
    error = reason is None and child_probe(measure=False).get("error")
    return reason or (failed_here(error) if error else None)


def failed_here(error):
    """The reason bfloat16 products failed in the child, with the oneDNN cap if one is set."""
    cap = isa_cap()
    return f"oneDNN cannot build bfloat16 products here{f' (under {cap})' if cap else ''}: {error}"


def require_bfloat16(what):
    """ConfigError naming the reason when bfloat16 products cannot run on this CPU."""
    reason = bfloat16_unavailable()
    if reason:
        raise ConfigError(f"{what} cannot run on this CPU: {reason}; use train.precision=auto "
                          f"or float32")


def check_device(precision, ctxs):
    """ConfigError if ``precision`` cannot run on the devices ``ctxs``."""
    on_cpu = any(c.device_type == "cpu" for c in ctxs)
    if precision == "float16" and on_cpu:
        raise ConfigError("train.precision=float16 needs a GPU (MXNet 1.9's float16 "
                          "FullyConnected is cuDNN-only): on a CPU use train.precision="
                          "bfloat16 (AVX512-BF16), auto or float32")
    if precision == "bfloat16" and on_cpu:
        require_bfloat16("train.precision=bfloat16")
    if precision == MKL_BFLOAT16:
        reason = products_unavailable(precision) if on_cpu else "oneMKL's products are for CPUs"
        if reason:
            raise ConfigError(f"train.precision={precision} cannot run here: {reason}; use "
                              f"train.precision=auto or float32")


def products_unavailable(precision):
    """Why products in ``precision`` cannot run on this CPU (one line), or None."""
    if precision == "bfloat16":
        return bfloat16_unavailable()
    if precision == MKL_BFLOAT16:
        from ..kernels import mkl
        return mkl.unavailable()
    return None


def choose_precision(requested, ctxs, recorded=None):
    """The matrix-multiply precision to train in: {used, requested, reason, probe when measured}
    for the log and report.json; ``recorded``: what a resumed run started with."""
    if recorded is not None:
        return resumed_precision(requested, ctxs, recorded)
    check_device(requested, ctxs)
    if requested != "auto":
        choice = {"used": requested, "reason": f"train.precision={requested}"}
    elif any(c.device_type != "cpu" for c in ctxs):
        choice = {"used": "float32", "reason": "auto on a GPU: float32, not probed (bfloat16 is "
                                               "for CPUs; float16 is train.precision=float16)"}
    else:
        choice = probe_choice()
    log.info("matrix products in %s: %s", choice["used"], choice["reason"])
    return {"used": choice.pop("used"), "requested": requested, **choice}


def resumed_precision(requested, ctxs, recorded):
    """A resumed run keeps its precision (``recorded``), or goes on in float32 if told so."""
    used = recorded["used"]
    unavailable = products_unavailable(used)
    if unavailable and requested == "float32":
        reason = f"train.precision=float32 on resume: {used} cannot run here ({unavailable})"
        log.warning("matrix products in float32 from now on, though this run started in "
                    "%s: %s", used, reason)
        return {"used": "float32", "requested": "float32", "reason": reason}
    if requested not in ("auto", used):
        log.warning("train.precision=%s is not used: this run started in %s and a resumed run "
                    "keeps it (a new hydra.run.dir starts a run in %s)", requested, used, requested)
    try:
        check_device(used, ctxs)
    except ConfigError:
        if used == "float16":
            raise ConfigError("this run trains in float16, which needs a GPU: resume it on one "
                              "(device=gpu), or start a new hydra.run.dir") from None
        raise ConfigError(f"this run trains in {used}, which cannot run on this CPU "
                          f"({unavailable}): resume it with train.precision=float32 (its weights "
                          f"are float32; the products then run at full precision), or where "
                          f"{used} runs") from None
    log.info("matrix products in %s, as when the run started (%s)", used, recorded["reason"])
    return dict(recorded)


def probe_choice():
    """``auto`` on a CPU: the faster bfloat16 products (MXNet's; oneMKL's where they can run),
    timed in a child, when they run BF16_MIN_SPEEDUP x float32's rate; else float32."""
    start = time.perf_counter()
    reason = cpu_lacks_bfloat16()
    if reason:
        return {"used": "float32", "reason": f"auto: {reason}, so float32 (not probed)"}
    speed = child_probe(measure=True)
    if "error" in speed:
        return {"used": "float32", "reason": f"auto: {failed_here(speed['error'])}, so float32"}
    rates = {p: speed[p] for p in ("float32", "bfloat16", MKL_BFLOAT16) if p in speed}
    fastest = max((p for p in rates if p != "float32"), key=rates.get)
    ratio = rates[fastest] / rates["float32"]
    used = fastest if ratio >= BF16_MIN_SPEEDUP else "float32"
    probe = {f"{p.replace('-', '_')}_gflop_s": round(r, 1) for p, r in rates.items()}
    probe.update(ratio=round(ratio, 3), fastest=fastest, min_ratio=BF16_MIN_SPEEDUP,
                 seconds=round(time.perf_counter() - start, 2))
    mkl_rate = (f"{MKL_BFLOAT16} {probe['bfloat16_mkl_gflop_s']}, " if MKL_BFLOAT16 in rates
                else "")
    untimed = (f" ({MKL_BFLOAT16} not timed: {speed['mkl_unavailable']})"
               if "mkl_unavailable" in speed else "")
    return {"used": used, "probe": probe,
            "reason": f"auto: bfloat16 products {probe['bfloat16_gflop_s']} GFLOP/s, {mkl_rate}"
                      f"float32 {probe['float32_gflop_s']}: {fastest} {ratio:.2f}x, bfloat16 "
                      f"from {BF16_MIN_SPEEDUP}x, so {used}{untimed}"}
