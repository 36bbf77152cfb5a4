"""One implementation's measurement in this process, and the report it writes.

    mtx, mtx-bf16     the product's training step (`mtx.training.steps`), search and translation,
                      in float32 / with bfloat16 products
    gluonnlp, d2l     the peers (`peers`)
    ct2-float32, ct2-int8, ct2-int8-as-float32   (a trained run only) the run exported to
                      CTranslate2 (`mtx.deploy`); the last computes the int8 export in float32

Training: target tokens/s of consecutive steps on the common batches after the warm-up steps,
the median over windows of at least WINDOW_SECONDS; model FLOP/s (`flops`) against the GEMM
peaks measured in the same process (the MFU denominators). Profile: MXNet's profiler over
training steps, ms per operator a step.
"""
import dataclasses
import itertools
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as onp

from . import inputs
from .flops import train_flops
from .peers import PEERS

MTX_PRECISIONS = {"mtx": "float32", "mtx-bf16": "bfloat16"}
# the export's quantization and CTranslate2's compute type ("float32": int8 weights dequantized
# at load, as mtx-translate computes an int8 export on a CPU without VNNI)
CT2 = {"ct2-float32": ("float32", "default"), "ct2-int8": ("int8", "default"),
       "ct2-int8-as-float32": ("int8", "float32")}
TRAIN_IMPLS = (*MTX_PRECISIONS, *PEERS)
DECODE_IMPLS = (*TRAIN_IMPLS, *CT2)
RUN_IMPLS = ("mtx", "mtx-bf16", "ct2-float32", "ct2-int8")  # `decode --run`'s default
WINDOW_SECONDS = 10.0   # training throughput: the median over windows this long
GEMM_SIZE = 2048        # the peaks: a GEMM_SIZE^3 FullyConnected
PROFILE_MIN_MS = 1.0    # operators under this many ms a step are left out


def describe():
    """CPU model and AVX2/AVX512/AMX flags, oneDNN cap, cores, MXNet and CTranslate2 versions
    (package metadata: importing MXNet would add to a CTranslate2 row's memory), threads."""
    from importlib.metadata import PackageNotFoundError, version
    from ..cpu import cpu_flags, cpu_model, isa_cap
    try:
        ctranslate2 = version("ctranslate2")
    except PackageNotFoundError:
        ctranslate2 = None
    return {"cpu": cpu_model(), "cpu_flags": sorted(
        f for f in cpu_flags() if f.startswith(("avx2", "avx512", "amx"))), "isa_cap": isa_cap(),
        "cores": os.cpu_count(), "mxnet": version("mxnet"), "ctranslate2": ctranslate2,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def measure(kind, name, args):
    """Implementation ``name``'s measurement ``kind`` (train, decode, profile) -> its report:
    the machine, the model config and {kind: {name: result}}."""
    from .decoding import measure_decode, measure_run_decode
    if name != "gluonnlp" and name not in CT2:  # gluonnlp: the legacy API; CTranslate2: no MXNet
        from ..devices import use_numpy_interface
        use_numpy_interface()
    run = measure_run_decode if kind == "decode" and args.run else None
    result, model_cfg = (run or {"train": measure_train, "decode": measure_decode,
                                 "profile": measure_profile}[kind])(name, args)
    result.update(precision=CT2[name][0] if name in CT2 else MTX_PRECISIONS.get(name, "float32"),
                  peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    if name in MTX_PRECISIONS:
        from .. import kernels
        result["kernels"] = dict(kernels.status())
    return {"machine": describe(), "model_config": dataclasses.asdict(model_cfg),
            kind: {name: result}}


def training_step(name, model_cfg):
    """``step(batch) -> loss`` (done when read): mtx's as `mtx.training` runs it (optimizer,
    schedule, clipping, loss; one CPU), or a peer's."""
    if name in PEERS:
        return PEERS[name](model_cfg).train_step
    import mxnet as mx
    from ..config import TrainConfig
    from ..parallel import DataParallel
    from ..training.build import build_pieces
    from ..training.steps import train_step
    train_cfg, parallel = TrainConfig(precision=MTX_PRECISIONS[name]), DataParallel([mx.cpu()])
    pieces = build_pieces(model_cfg, train_cfg, parallel.ctxs, parallel.trainer_kvstore)
    updates = itertools.count(1)
    return lambda batch: train_step(pieces, parallel, batch, next(updates), train_cfg)[0]


def measure_train(name, args):
    corpus, model_cfg, data_cfg = inputs.load(args.model, args.data)
    batches = inputs.train_batches(corpus, data_cfg, args.batches)
    step, measured, shapes = training_step(name, model_cfg), [], set()
    for i, batch in enumerate(itertools.cycle(batches)):  # warm-up steps, then --seconds
        if measured and sum(s for s, _, _ in measured) >= args.seconds:
            break
        tic = time.perf_counter()
        float(step(batch).asnumpy())  # synchronise: the step is done
        if i >= args.warmup_steps:  # a graph with static_alloc plans memory for each new shape
            measured.append((time.perf_counter() - tic, batch, batch.padded_shape not in shapes))
        shapes.add(batch.padded_shape)
    windows, current = [], []
    for step_time in measured:
        current.append(step_time)
        if sum(s for s, _, _ in current) >= WINDOW_SECONDS:
            windows, current = windows + [current], []
    tok_s = [tokens_per_second(w) for w in windows or [measured]]
    seen = [m for m in measured if not m[2]]
    return {"tok_s": round(float(onp.median(tok_s)), 1), "tok_s_windows": [round(x) for x in tok_s],
            "gflop_s": round(sum(train_flops(model_cfg, b) for _, b, _ in measured) / sum(
                s for s, _, _ in measured) / 1e9, 1), "steps": args.warmup_steps + len(measured),
            "warmup_steps": args.warmup_steps, "batching": args.batches, "batches": len(batches),
            "batch_shapes": len({b.padded_shape for b in batches}),
            "real_tgt_tokens": round(float(onp.mean([b.num_tgt_tokens for b in batches]))),
            "padded_tgt_tokens": round(float(onp.mean([b.tgt_in.size for b in batches]))),
            "first_shape_steps": len(measured) - len(seen),
            "tok_s_seen_shapes": round(tokens_per_second(seen), 1) if seen else None,
            **gemm_peaks()}, model_cfg


def tokens_per_second(measured):
    return sum(b.num_tgt_tokens for _, b, _ in measured) / sum(s for s, _, _ in measured)


def gemm_peaks():
    """GFLOP/s of a GEMM_SIZE^3 product in float32 and bfloat16 (None where it cannot run)."""
    import mxnet as mx
    from ..precision import bfloat16_unavailable, probe_matmul_speed
    dtypes = ("float32",) if bfloat16_unavailable() else ("float32", "bfloat16")
    speed = probe_matmul_speed(mx.cpu(), [(GEMM_SIZE,) * 3], dtypes=dtypes)
    return {"gemm_peak_gflop_s": round(speed["float32"], 1),
            "gemm_peak_bf16_gflop_s": round(speed["bfloat16"], 1) if "bfloat16" in speed else None}


def measure_profile(name, args):
    """MXNet's profiler (aggregate stats) over --steps training steps after --warmup-steps ->
    {"wall_ms", "operators_ms": {operator: ms}} a step, largest first."""
    import mxnet as mx
    corpus, model_cfg, data_cfg = inputs.load(args.model, args.data)
    batches = itertools.cycle(inputs.train_batches(corpus, data_cfg, args.batches))
    step = training_step(name, model_cfg)
    for batch in itertools.islice(batches, args.warmup_steps):
        float(step(batch).asnumpy())
    with tempfile.TemporaryDirectory(prefix="mtx-bench-profile-") as tmp:
        mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                               filename=str(Path(tmp) / "profile.json"))
        mx.profiler.set_state("run")
        tic = time.perf_counter()
        for batch in itertools.islice(batches, args.steps):
            float(step(batch).asnumpy())
        seconds = time.perf_counter() - tic
        mx.profiler.set_state("stop")
        operators = json.loads(mx.profiler.dumps(format="json"))["Time"]["operator"]
        mx.profiler.dumps(reset=True)
    ms = sorted(((op, s["Total"] / args.steps) for op, s in operators.items()), key=lambda x: -x[1])
    return {"wall_ms": round(1000 * seconds / args.steps, 1), "operators_ms": {
        op: round(v, 1) for op, v in ms if v >= PROFILE_MIN_MS}}, model_cfg
