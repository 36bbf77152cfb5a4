#!/usr/bin/env python
"""Training throughput of one process against two devices and a two-worker KVStore cluster, in
one run, one after the other on this machine (never side by side: they would share the cores).

    python scripts/bench_scale.py [--minutes 2] [--out outputs/bench_scale]

Every setting trains the default model on Multi30k en-de for ``--minutes`` of wall clock from the
same seed and reads the job's target tokens/s from the run's metrics.jsonl (tokens of the whole
job, all workers together, over the epoch's wall time, warm-up included).
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from mtx.errors import DataError
from mtx.files import atomic_write_json, read_json_lines

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def settings(cores):
    """(name, threads per process, command prefix, extra overrides)."""
    half = str(max(1, cores // 2))
    launch = [PY, str(ROOT / "scripts" / "launch.py"), "--launcher", "local", "-n", "2", "-s", "1"]
    return [
        ("1 process, 1 device", str(cores), [], []),
        ("1 process, 2 CPU contexts", half, [], ["train.devices=[cpu:0,cpu:1]"]),
        ("2 workers + 1 server (dist_sync, loopback)", half, launch, ["train.kvstore=dist_sync"]),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--out", default="outputs/bench_scale")
    args = parser.parse_args()
    cores = os.cpu_count()
    out = Path(args.out).resolve()
    rows = []
    for index, (name, threads, prefix, overrides) in enumerate(settings(cores)):
        run_dir = out / f"setting{index}"
        command = prefix + [PY, str(ROOT / "scripts" / "train.py"), f"hydra.run.dir={run_dir}",
                            f"train.max_minutes={args.minutes}", "train.log_every=10",
                            "train.eval_bleu=false", "train.average_last=0", "decode=greedy",
                            *overrides]
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        tic = time.time()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: {name} failed:\n{done.stderr[-2000:]}")
        record = read_json_lines(run_dir / "metrics.jsonl", DataError)[0]
        rows.append({"setting": name, "omp_threads_per_process": int(threads),
                     "steps": record["step"], "train_tok_s": record["train/tok_s"],
                     "command_seconds": round(time.time() - tic, 1)})
        print(f"{name}: {record['train/tok_s']:.0f} target tok/s ({record['step']} steps)",
              flush=True)
    base = rows[0]["train_tok_s"]
    print(f"\n| setting | OMP threads each | steps in {args.minutes:g} min | target tok/s | ratio |")
    print("|---|---|---|---|---|")
    for row in rows:
        row["ratio"] = round(row["train_tok_s"] / base, 2)
        print(f"| {row['setting']} | {row['omp_threads_per_process']} | {row['steps']} | "
              f"{row['train_tok_s']:,.0f} | {row['ratio']:.2f} |")
    atomic_write_json(out / "bench_scale.json", {"cores": cores, "rows": rows})


if __name__ == "__main__":
    main()
