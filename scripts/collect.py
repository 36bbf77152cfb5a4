#!/usr/bin/env python
"""One table from the runs of a sweep: `python scripts/collect.py outputs/train/multiruns/<time>`.

For every run directory below the given folder (those with a report.json): its overrides, the
parameter count, training minutes and median tokens/s, val BLEU, test sacreBLEU and decoding
speed. Prints markdown and writes summary.json next to the runs.
"""
import json
import statistics
import sys
from pathlib import Path

from mtx.files import atomic_write_json


def summarize(run_dir):
    report = json.loads((run_dir / "report.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    test = report["scores"]["test_2016_flickr"]
    return {"run": run_dir.name,  # in a sweep, the overrides (hydra.sweep.subdir)
            "parameters": report["parameters"], "train_minutes": report["train_minutes"],
            "epochs": report["epochs"], "steps": report["steps"],
            "train_tok_s": round(statistics.median(m["train/tok_s"] for m in metrics)),
            "valid_bleu": report["final"]["valid_bleu"] and report["final"]["valid_bleu"]["score"],
            "test_sacrebleu": test["sacrebleu"]["score"],
            "test_bleu_tok_lc": test["bleu_tok_lc"]["score"],
            "decode_sent_s": test["sentences_per_second"], "beam": test["beam_size"]}


def main(folder):
    rows = [summarize(p.parent) for p in sorted(Path(folder).rglob("report.json"))]
    if not rows:
        sys.exit(f"error: no report.json below {folder}; is it a sweep's output folder?")
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")
    atomic_write_json(Path(folder) / "summary.json", rows)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs/train/multiruns")
