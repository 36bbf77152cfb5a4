"""Measurements in processes of their own, and training in interleaved rounds.

A child is ``python -m mtx.bench <command> --impl X ... --out FILE`` (in a checkout of REV for
``mtx@REV``, under DNNL_MAX_CPU_ISA for an --isa cap). Training with several implementations,
batchings (--batches) or caps (--isa) runs every one in turn, --rounds times: a drifting machine
moves both sides of a pair alike, so each gets its median round and each pair the median of its
per-round ratios.
"""
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as onp

from . import revisions

NATIVE = "native"  # --isa: oneDNN uncapped; the others are DNNL_MAX_CPU_ISA values
CHILD_OPTIONS = {"train": ("model", "data", "seconds", "warmup_steps", "batches"),
                 "decode": ("model", "data", "steps", "max_sentences", "run"),
                 "profile": ("model", "data", "steps", "warmup_steps", "batches")}
log = logging.getLogger("mtx.bench")


def run_child(command, *args, cwd=None, isa_cap=None):
    """``python -m mtx.bench <command> <args>`` in a new process -> its JSON report, or
    {"error": the last line of its stderr}."""
    env = {**os.environ, "DNNL_MAX_CPU_ISA": isa_cap} if isa_cap else None
    with tempfile.TemporaryDirectory(prefix="mtx-bench-") as tmp:
        out = Path(tmp) / "report.json"
        done = subprocess.run([sys.executable, "-m", "mtx.bench", command, *map(str, args),
                               "--out", str(out)], capture_output=True, text=True, cwd=cwd,
                              env=env)
        if done.returncode != 0 or not out.is_file():
            lines = done.stderr.strip().splitlines()
            return {"error": lines[-1] if lines else f"exit code {done.returncode}"}
        return json.loads(out.read_text())


def in_children(kind, args, names, cap=NATIVE):
    """Each of ``names`` measured (``kind``) in a process of its own -> {name: its result}."""
    results = {}
    for name in names:
        impl, _, revision = name.partition("@")
        options = [x for key in CHILD_OPTIONS[kind] if getattr(args, key, None) is not None
                   for x in (f"--{key.replace('_', '-')}", getattr(args, key))]
        child = run_child(kind, "--impl", impl, *options,
                          cwd=revisions.checkout(revision) if revision else None,
                          isa_cap=None if cap == NATIVE else cap)
        results[name] = child.get(kind, {}).get(impl, child)
        log.info("%s %s %s", name, kind, {k: v for k, v in results[name].items()
                                          if not isinstance(v, (dict, list))})
    return results


def training_rounds(args, names, batchings, caps):
    """``names`` trained on each of ``batchings`` under each of ``caps``, in turn, ``args.rounds``
    times -> {"train": {label: its median round, with "rounds" and its cap's best GEMM peaks},
    "train_ratios": the first implementation against each other on the same batches and cap,
    and each on every other batching or cap against itself on the first, "gemm_peaks": {cap:
    {"float32": [...], "bfloat16": [...]}} as each child measured them}."""
    def label(name, batching, cap):
        axes = [x for x, many in ((batching, len(batchings) > 1), (cap, len(caps) > 1)) if many]
        return f"{name} ({', '.join(axes)})" if axes else name
    per_round, peaks = {}, {cap: {"float32": [], "bfloat16": []} for cap in caps}
    for r in range(args.rounds):
        log.info("round %d of %d", r + 1, args.rounds)
        for cap in caps:
            for batching in batchings:
                args.batches = batching
                for name, result in in_children("train", args, names, cap).items():
                    per_round.setdefault(label(name, batching, cap), []).append(result)
                    peaks[cap]["float32"].append(result.get("gemm_peak_gflop_s"))
                    peaks[cap]["bfloat16"].append(result.get("gemm_peak_bf16_gflop_s"))
    train, ratios = {}, {}
    for cap in caps:
        best = {dtype: max(filter(None, values), default=None)
                for dtype, values in peaks[cap].items()}
        for batching in batchings:
            group = [label(name, batching, cap) for name in names]
            for key in group:
                train[key] = {**median_round(per_round[key]), "gemm_peak_gflop_s":
                              best["float32"], "gemm_peak_bf16_gflop_s": best["bfloat16"]}
            for other in group[1:]:
                ratios.update(paired_ratios(per_round, group[0], other))
    for name in names:
        first = label(name, batchings[0], caps[0])
        for other in [label(name, b, caps[0]) for b in batchings[1:]] + [
                label(name, batchings[0], c) for c in caps[1:]]:
            ratios.update(paired_ratios(per_round, other, first))
    return {"train": train, "train_ratios": ratios, "gemm_peaks": peaks}


def median_round(rounds):
    """One label's per-round results -> the round with the median tok/s, with "rounds": every
    round's tok_s and gflop_s (or the first failed round)."""
    failed = [r for r in rounds if "tok_s" not in r]
    if failed:
        return failed[0]
    middle = sorted(rounds, key=lambda r: r["tok_s"])[(len(rounds) - 1) // 2]
    return {**middle, "rounds": [{"tok_s": r["tok_s"], "gflop_s": r["gflop_s"]} for r in rounds]}


def paired_ratios(per_round, a, b):
    """{"<a> / <b>": {median, min, max, rounds}} of tok/s, round by round ({} if one failed)."""
    pairs = [x["tok_s"] / y["tok_s"] for x, y in zip(per_round[a], per_round[b])
             if "tok_s" in x and "tok_s" in y]
    if not pairs:
        return {}
    return {f"{a} / {b}": {"median": round(float(onp.median(pairs)), 3),
                           "min": round(min(pairs), 3), "max": round(max(pairs), 3),
                           "rounds": [round(p, 3) for p in pairs]}}
