"""One implementation's measurement in this process, and the report it writes.

    mtx, mtx-bf16, mtx-mkl   the product's training step (`mtx.training.steps`) and
                      translation, in float32 / with MXNet's / with oneMKL's bfloat16 products
    gluonnlp, d2l     the peers' training steps (`peers`)
    pytorch, pytorch-bf16, pytorch-compile[-max][-bf16]   a plain PyTorch model's, eager and
                      compiled (`torch_peer`)
    ct2-float32, ct2-int8, ct2-int8-as-float32   a trained run exported to CTranslate2
                      (`mtx.deploy`); the last computes the int8 export in float32
    ct2-float32-defaults   the float32 export called as CTranslate2's users call it
                      (`ct2_defaults`)

Training: target tokens/s of consecutive steps on the common batches after the warm-up steps,
the median over windows of at least WINDOW_SECONDS; model FLOP/s (`flops`) against the GEMM
peaks measured in the same process (the MFU denominators). Decoding: a trained run's test split
translated with its weights, beam 5 and greedily (conf/decode/), timed by the product's
`evaluation.translator_rounds`.
"""
import dataclasses
import itertools
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as onp

from ..errors import ConfigError
from . import inputs
from .flops import step_products, train_flops
from .peers import PEERS
from .torch_peer import TORCH_PEERS

MTX_PRECISIONS = {"mtx": "float32", "mtx-bf16": "bfloat16", "mtx-mkl": "bfloat16-mkl"}
# the export's quantization and CTranslate2's compute type ("float32": int8 weights dequantized
# at load, as mtx-translate computes an int8 export on a CPU without VNNI)
CT2 = {"ct2-float32": ("float32", "default"), "ct2-int8": ("int8", "default"),
       "ct2-int8-as-float32": ("int8", "float32"), "ct2-float32-defaults": ("float32", "default")}
TRAIN_IMPLS = (*MTX_PRECISIONS, *PEERS, *TORCH_PEERS)
# `make bench` / mtx-bench train without --impl (PyTorch's when it is installed)
TRAIN_DEFAULT = ("mtx", "mtx-bf16", "mtx-mkl", "gluonnlp", "d2l", "pytorch", "pytorch-bf16")
DECODE_IMPLS = (*MTX_PRECISIONS, *CT2)
DECODE_DEFAULT = ("mtx", "mtx-bf16", "mtx-mkl", "ct2-float32", "ct2-int8")
RUN_BEAMS = {"beam5": 5, "greedy": 1}   # decode: column prefix -> beam size
WINDOW_SECONDS = 10.0   # training throughput: the median over windows this long
GEMM_SIZE = 2048        # the peaks: a GEMM_SIZE^3 FullyConnected


def describe():
    """CPU model and AVX2/AVX512/AMX flags, oneDNN cap, cores, MXNet and CTranslate2 versions
    (package metadata: importing MXNet would add to a CTranslate2 row's memory), threads."""
    from importlib.metadata import PackageNotFoundError, version
    from ..hardware.cpu import cpu_flags, cpu_model, isa_cap
    try:
        ctranslate2 = version("ctranslate2")
    except PackageNotFoundError:
        ctranslate2 = None
    return {"cpu": cpu_model(), "cpu_flags": sorted(
        f for f in cpu_flags() if f.startswith(("avx2", "avx512", "amx"))), "isa_cap": isa_cap(),
        "cores": os.cpu_count(), "mxnet": version("mxnet"), "ctranslate2": ctranslate2,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def measure(kind, name, args):
    """Implementation ``name``'s measurement ``kind`` ("train", or "decode" of --run's runs)
    -> its report: the machine, the (first run's) model config and {kind: {label: result}}."""
    if name != "gluonnlp" and name not in CT2:  # gluonnlp: the legacy API; CTranslate2: no MXNet
        from ..hardware.devices import use_numpy_interface
        use_numpy_interface()
    results, model_cfg = (measure_train if kind == "train" else measure_decode)(name, args)
    impl = name.split(":")[0]  # without its training settings
    precision = {**MTX_PRECISIONS, **{n: p for n, (p, _) in TORCH_PEERS.items()}}
    common = {"precision": CT2[impl][0] if impl in CT2 else precision.get(impl, "float32"),
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    if impl in MTX_PRECISIONS:
        from .. import kernels
        common["kernels"] = dict(kernels.status())
    for result in results.values():
        result.update(common)
    return {"machine": describe(), "model_config": dataclasses.asdict(model_cfg), kind: results}


def train_settings(name):
    """An implementation's name -> (implementation, TrainConfig settings): ``mtx-bf16`` alone,
    or with training settings after colons, ``mtx-bf16:rdrop_alpha=5:word_dropout=0.1`` (mtx's
    only: what a regulariser costs, against the same implementation without it). ConfigError
    for a setting TrainConfig refuses."""
    import yaml
    from ..config import TrainConfig
    impl, *pairs = name.split(":")
    if pairs and impl not in MTX_PRECISIONS:
        raise ConfigError(f"--impl {name}: training settings apply to mtx and mtx-bf16 only")
    settings = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not (equals and key and value):
            raise ConfigError(f"--impl {name}: give settings as IMPL:KEY=VALUE, e.g. "
                              f"mtx-bf16:rdrop_alpha=5")
        settings[key] = yaml.safe_load(value)
    unknown = set(settings) - {f.name for f in dataclasses.fields(TrainConfig)}
    if unknown:
        raise ConfigError(f"--impl {name}: {', '.join(sorted(unknown))} is not a training setting "
                          f"(the keys of conf/train, e.g. rdrop_alpha, word_dropout)")
    try:
        TrainConfig(**settings)
    except ConfigError as err:
        raise ConfigError(f"--impl {name}: {err}") from None
    return impl, settings


def training_step(name, model_cfg):
    """``step(batch) -> loss`` (done when read): mtx's as `mtx.training` runs it (optimizer,
    schedule, clipping, loss; one CPU; the settings of ``name``, `train_settings`), or a
    peer's."""
    from ..config import TrainConfig
    name, settings = train_settings(name)
    if name in PEERS:
        return PEERS[name](model_cfg).train_step
    if name in TORCH_PEERS:
        from .torch_peer import TorchPeer
        return TorchPeer(model_cfg, name, TrainConfig()).train_step
    import mxnet as mx
    from ..training.parallel import DataParallel
    from ..training.build import build_pieces
    from ..training.steps import train_step
    train_cfg = TrainConfig(**{"precision": MTX_PRECISIONS[name], **settings})
    parallel = DataParallel([mx.cpu()])
    pieces = build_pieces(model_cfg, train_cfg, parallel.ctxs, parallel.trainer_kvstore)
    updates = itertools.count(1)
    return lambda batch: train_step(pieces, parallel, batch, next(updates), train_cfg)[0]


def measure_train(name, args):
    corpus, model_cfg, data_cfg = inputs.load(args.model, args.data)
    batches = inputs.train_batches(corpus, data_cfg)
    step, measured = training_step(name, model_cfg), []  # [(seconds, batch)]
    for i, batch in enumerate(itertools.cycle(batches)):  # warm-up steps, then --seconds
        if measured and sum(s for s, _ in measured) >= args.seconds:
            break
        tic = time.perf_counter()
        float(step(batch).asnumpy())  # synchronise: the step is done
        if i >= args.warmup_steps:
            measured.append((time.perf_counter() - tic, batch))
    windows, current = [], []
    for step_time in measured:
        current.append(step_time)
        if sum(s for s, _ in current) >= WINDOW_SECONDS:
            windows, current = windows + [current], []
    tok_s = [sum(b.num_tgt_tokens for _, b in w) / sum(s for s, _ in w)
             for w in windows or [measured]]
    flops = sum(train_flops(model_cfg, b) for _, b in measured) / sum(s for s, _ in measured)
    padded = round(float(onp.mean([b.tgt_in.size for b in batches])))
    return {name: {
            "tok_s": round(float(onp.median(tok_s)), 1), "tok_s_windows": [round(x) for x in tok_s],
            "gflop_s": round(flops / 1e9, 1), "steps": args.warmup_steps + len(measured),
            "warmup_steps": args.warmup_steps, "batches": len(batches),
            "batch_shapes": len({b.padded_shape for b in batches}),
            "real_tgt_tokens": round(float(onp.mean([b.num_tgt_tokens for b in batches]))),
            "padded_tgt_tokens": padded,
            **gemm_peaks(model_cfg, padded)}}, model_cfg


def gemm_peaks(model_cfg=None, tokens=None):
    """GFLOP/s of a GEMM_SIZE^3 product in float32 and bfloat16 (None where it cannot run) and,
    given a model and a batch's padded tokens, of the model's own products at those shapes,
    forward and backward (`mtx.bench.flops.step_products`): what a training step's products
    can do on this CPU, where the 2048^3 peak is what large ones can."""
    import mxnet as mx
    from ..training.precision import bfloat16_unavailable, probe_matmul_speed
    dtypes = ("float32",) if bfloat16_unavailable() else ("float32", "bfloat16")
    probes = {"gemm_peak": probe_matmul_speed(mx.cpu(), [(GEMM_SIZE,) * 3], dtypes=dtypes)}
    if model_cfg is not None:
        probes["model_gemm"] = probe_matmul_speed(mx.cpu(), step_products(model_cfg, tokens),
                                                  dtypes=dtypes, backward=True)
    return {f"{name}{suffix}_gflop_s": round(speed[dtype], 1) if dtype in speed else None
            for name, speed in probes.items()
            for dtype, suffix in (("float32", ""), ("bfloat16", "_bf16"))}


def run_translators(name, run_dir, tmp_dir):
    """Implementation ``name`` on trained run ``run_dir`` -> ``make(decode_cfg)``, a
    `LineTranslator`. CTranslate2 rows export the run in another process first (into
    ``tmp_dir``), so this one never loads MXNet and its peak memory is CTranslate2's own."""
    if name in CT2:
        from ..config import DecodeConfig
        from ..deploy import require
        from ..deploy.backend import CTranslate2Translator
        from .ct2_defaults import DefaultsTranslator
        require()  # the install hint, before a process is started
        model_dir = Path(tmp_dir) / name
        done = subprocess.run([sys.executable, "-m", "mtx.commands.export", f"ckpt={run_dir}",
                               f"quantization={CT2[name][0]}", f"output={model_dir}"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(f"exporting {run_dir} failed: "
                              f"{(done.stderr.strip().splitlines() or [done.returncode])[-1]}")
        kind = DefaultsTranslator if name.endswith("-defaults") else CTranslate2Translator
        return kind(model_dir, DecodeConfig(), compute=CT2[name][1]).with_settings
    import mxnet as mx
    from ..decoding.search import Translator, load_decoder
    model, tokenizer, _ = load_decoder(run_dir, mx.cpu(), precision=MTX_PRECISIONS[name])
    return lambda decode_cfg: Translator(model, tokenizer, decode_cfg, mx.cpu())


def decode_runs(run_option):
    """--run's run directories (comma-separated)."""
    return [Path(run) for run in str(run_option).split(",") if run]


def measure_decode(name, args):
    """Implementation ``name`` translating the test split (--max-sentences) of run --run, or of
    several runs timed against each other in this process, in interleaved rounds (--rounds; the
    best round counts) -> ({label: result}, the first run's ModelConfig). The label is ``name``,
    with several runs ``name <run folder>``; each has its time over the first run's
    (``beam5_time_vs_first``: below 1, that run translates faster)."""
    from ..config import ModelConfig
    from ..decoding.evaluation import translator_rounds
    from ..runs.rundir import read_config
    runs = decode_runs(args.run)
    src, ref, data_cfg = inputs.run_test_split(runs[0], args.max_sentences)
    for run in runs[1:]:
        if inputs.run_test_split(run, args.max_sentences)[:2] != (src, ref):
            raise ConfigError(f"--run: {run} has another test split than {runs[0]}; compare "
                              f"runs of one corpus and language pair")
    labels = [name if len(runs) == 1 else f"{name} {run.name}" for run in runs]
    if len(set(labels)) < len(labels):  # runs in folders of one name: their paths
        labels = [f"{name} {run}" for run in runs]
    results = {label: {"sentences": len(src)} for label in labels}
    with tempfile.TemporaryDirectory(prefix="mtx-bench-run-") as tmp:
        makers = {label: run_translators(name, run, tmp) for label, run in zip(labels, runs)}
        for column, beam in RUN_BEAMS.items():
            timings = translator_rounds({label: make(inputs.decode_config(beam))
                                         for label, make in makers.items()}, src, ref,
                                        data_cfg.tgt_lang, rounds=args.rounds)
            first = max(timings[labels[0]]["best"], 1e-3)
            for label, timing in timings.items():
                seconds, row = max(timing["best"], 1e-3), results[label]
                row.update({f"{column}_seconds": timing["best"],
                            f"{column}_sent_s": round(len(src) / seconds, 1),
                            f"{column}_subwords_s": round(timing["subwords"] / seconds, 1),
                            f"{column}_sacrebleu": round(timing["sacrebleu"]["score"], 2)})
                if len(runs) > 1:
                    row[f"{column}_time_vs_first"] = round(seconds / first, 3)
    return results, read_config(ModelConfig, runs[0] / "model.json", "model config")
