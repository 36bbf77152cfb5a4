"""Measurements in processes of their own, and training in interleaved rounds.

A child is ``python -m mtx.bench <command> --impl X ... --out FILE``; it inherits the
environment (a oneDNN cap such as DNNL_MAX_CPU_ISA=AVX2 too). For ``IMPL@REV`` it runs in a
temporary detached git worktree of this checkout at REV (removed at exit), so it runs that
revision's code (``python -m`` puts the working directory first on ``sys.path``). Training with
several implementations runs every one in turn, --rounds times: a drifting machine moves both
sides of a pair alike, so each gets its median round and each pair the median of its per-round
ratios. Decoding with several implementations runs the same way, one round a child, each with
its fastest round and the pairs' per-round ratios of seconds.
"""
import argparse
import atexit
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as onp

from ..errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]  # the checkout mtx runs from

CHILD_OPTIONS = {"train": ("model", "data", "seconds", "warmup_steps"),
                 "decode": ("run", "max_sentences", "rounds")}
PEAKS = {"float32": "gemm_peak_gflop_s", "bfloat16": "gemm_peak_bf16_gflop_s",  # result keys
         "model float32": "model_gemm_gflop_s", "model bfloat16": "model_gemm_bf16_gflop_s"}
log = logging.getLogger("mtx.bench")
_checkouts = {}  # revision -> worktree path


def _git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def checkout(revision):
    """The worktree of ``revision`` (made on first use); ConfigError when there is none."""
    if revision not in _checkouts:
        commit = _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
        if commit.returncode != 0:
            raise ConfigError(f"--impl mtx@{revision}: no such git revision in {ROOT} (measure "
                              f"other revisions from a clone; see `git log --oneline`)")
        tree = Path(tempfile.mkdtemp(prefix="mtx-bench-rev-")) / "tree"
        added = _git("worktree", "add", "--detach", str(tree), commit.stdout.strip())
        if added.returncode != 0:
            raise ConfigError(f"--impl mtx@{revision}: git worktree add failed "
                              f"({(added.stderr.strip().splitlines() or [''])[-1]})")
        _checkouts[revision] = tree
        atexit.register(lambda: (_git("worktree", "remove", "--force", str(tree)),
                                 shutil.rmtree(tree.parent, ignore_errors=True)))
    return _checkouts[revision]


def run_child(command, *args, cwd=None):
    """``python -m mtx.bench <command> <args>`` in a new process -> its JSON report, or
    {"error": the last line of its stderr}."""
    with tempfile.TemporaryDirectory(prefix="mtx-bench-") as tmp:
        out = Path(tmp) / "report.json"
        done = subprocess.run([sys.executable, "-m", "mtx.bench", command, *map(str, args),
                               "--out", str(out)], capture_output=True, text=True, cwd=cwd)
        if done.returncode != 0 or not out.is_file():
            lines = done.stderr.strip().splitlines()
            return {"error": lines[-1] if lines else f"exit code {done.returncode}"}
        return json.loads(out.read_text())


def in_children(kind, args, names):
    """Each of ``names`` measured (``kind``) in a process of its own -> {name: its result}."""
    results = {}
    for name in names:
        impl, _, revision = name.partition("@")
        options = [x for key in CHILD_OPTIONS[kind] if getattr(args, key) is not None
                   for x in (f"--{key.replace('_', '-')}", getattr(args, key))]
        child = run_child(kind, "--impl", impl, *options,
                          cwd=checkout(revision) if revision else None)
        results[name] = child.get(kind, {}).get(impl, child)
        log.info("%s %s %s", name, kind, {k: v for k, v in results[name].items()
                                          if not isinstance(v, (dict, list))})
    return results


def training_rounds(args, names):
    """``names`` trained in turn, ``args.rounds`` times -> {"train": {name: its median round, with
    "rounds" and the best GEMM peaks of all children}, "train_ratios": the first implementation
    against each other, "gemm_peaks": {"float32": [...], "bfloat16": [...], "model float32":
    [...], "model bfloat16": [...]} as each child measured them (`PEAKS`)}."""
    per_round, peaks = {name: [] for name in names}, {dtype: [] for dtype in PEAKS}
    for r in range(args.rounds):
        log.info("round %d of %d", r + 1, args.rounds)
        for name, result in in_children("train", args, names).items():
            per_round[name].append(result)
            for dtype, key in PEAKS.items():
                peaks[dtype].append(result.get(key))
    best = {key: max(filter(None, peaks[dtype]), default=None) for dtype, key in PEAKS.items()}
    ratios = {}
    for other in names[1:]:
        ratios.update(paired_ratios(per_round, names[0], other))
    return {"train": {name: {**median_round(rounds), **best} for name, rounds in per_round.items()},
            "train_ratios": ratios, "gemm_peaks": peaks}


def median_round(rounds):
    """One implementation's per-round results -> the round with the median tok/s, with "rounds":
    every round's tok_s and gflop_s (or the first failed round)."""
    failed = [r for r in rounds if "tok_s" not in r]
    if failed:
        return failed[0]
    middle = sorted(rounds, key=lambda r: r["tok_s"])[(len(rounds) - 1) // 2]
    return {**middle, "rounds": [{"tok_s": r["tok_s"], "gflop_s": r["gflop_s"]} for r in rounds]}


def paired_ratios(per_round, a, b, key="tok_s", label=""):
    """{"<a> / <b><label>": {median, min, max, rounds}} of ``key``, round by round ({} if one
    failed)."""
    pairs = [x[key] / y[key] for x, y in zip(per_round[a], per_round[b])
             if x.get(key) and y.get(key)]
    if not pairs:
        return {}
    return {f"{a} / {b}{label}": {"median": round(float(onp.median(pairs)), 3),
                                  "min": round(min(pairs), 3), "max": round(max(pairs), 3),
                                  "rounds": [round(p, 3) for p in pairs]}}


def decoding_rounds(args, names, columns):
    """``names`` each translating in a child of its own, one round a child, the children in
    turn, ``args.rounds`` times (interleaved process by process) -> {"decode": {name: for each
    column prefix in ``columns`` (beam5, greedy) the fields of its fastest round, with
    "<prefix>_rounds": every round's seconds}, "decode_ratios": the first implementation's
    seconds over each other's, round by round}."""
    one_round = argparse.Namespace(**{**vars(args), "rounds": 1})
    per_round = {name: [] for name in names}
    for r in range(args.rounds):
        log.info("round %d of %d", r + 1, args.rounds)
        for name, result in in_children("decode", one_round, names).items():
            per_round[name].append(result)
    best = {}
    for name, results in per_round.items():
        timed = [x for x in results if "error" not in x] or results[:1]
        row = dict(timed[-1])
        for prefix in columns:
            seconds = f"{prefix}_seconds"
            if all(seconds in x for x in timed):
                row.update({k: v for k, v in min(timed, key=lambda x: x[seconds]).items()
                            if k.startswith(prefix)})
                row[f"{prefix}_rounds"] = ", ".join(str(x[seconds]) for x in timed)
        best[name] = row
    ratios = {}
    for other in names[1:]:
        for prefix in columns:
            ratios.update(paired_ratios(per_round, names[0], other, f"{prefix}_seconds",
                                        f" ({prefix} seconds)"))
    return {"decode": best, "decode_ratios": ratios}
