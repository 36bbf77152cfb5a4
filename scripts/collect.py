#!/usr/bin/env python
"""One table from the runs of a sweep:

    python scripts/collect.py FOLDER [--reach BLEU] [--at-update N] [--at-minutes M] [--curves PNG]

For every run directory below FOLDER (those with a report.json): its overrides, the parameter
count, training minutes, updates and median tokens/s, val BLEU, test sacreBLEU and decoding speed;
with --reach, the training minutes at which its val BLEU (greedy, per epoch) first reached BLEU
(linear between epochs; "-" if never); with --at-update, its val BLEU after N updates (linear
between epochs; "-" if it stopped before N: runs compared at equal work); with --at-minutes, its
val BLEU and val loss after M minutes of training (equal time); with --curves, every
run's val BLEU against minutes in one picture. Prints markdown and writes summary.json next to
the runs. Runs that differ only in their seed (e.g. `make ablate`: seed=1,2) also get a second
table, one row per setting: the mean over the seeds and each seed's value.
"""
import argparse
import re
import statistics
from pathlib import Path

from mtx.commands.exits import OneLineParser, one_line_errors
from mtx.errors import DataError
from mtx.files import atomic_write_json, read_json, read_json_lines
from mtx.data.multi30k import TEST_SPLIT


def read_metrics(run_dir):
    """The records of a run's metrics.jsonl (one per epoch; none if it is missing)."""
    return read_json_lines(run_dir / "metrics.jsonl", DataError)


def run_name(run_dir, folder):
    """A run's name in the table: its path below ``folder`` (in a sweep, its overrides; below a
    folder of several sweeps, <sweep>/<overrides>, so two sweeps of one command stay apart)."""
    name = Path(run_dir).relative_to(folder).as_posix()
    return Path(run_dir).resolve().name if name == "." else name


def summarize(run_dir, metrics, name):
    """One row of the table (``name``: `run_name`); "-" (None) for what the run did not record
    (e.g. no test split)."""
    report = read_json(run_dir / "report.json", DataError, "report of the run")
    try:
        test = report.get("scores", {}).get(TEST_SPLIT) or {}
        tok_s = [m["train/tok_s"] for m in metrics if "train/tok_s" in m]
        valid = report["final"]["valid_bleu"]
        return {"run": name,
                "parameters": report["parameters"], "train_minutes": report["train_minutes"],
                "epochs": report["epochs"], "steps": report["steps"],
                "train_tok_s": round(statistics.median(tok_s)) if tok_s else None,
                "valid_bleu": valid and valid["score"],
                "valid_loss": report["final"].get("valid_loss"),
                "test_sacrebleu": test.get("sacrebleu", {}).get("score"),
                "test_bleu_tok_lc": test.get("bleu_tok_lc", {}).get("score"),
                "decode_sent_s": test.get("sentences_per_second"),
                "beam": test.get("beam_size")}
    except (AttributeError, KeyError, TypeError) as err:
        raise DataError(f"{run_dir / 'report.json'} is not a training report ({err!r} "
                        f"missing); retrain the run or move it out of the folder") from None


def val_curve(metrics, x="wall_minutes", y="valid/bleu"):
    """[(x, y)] of a run's epochs (its `read_metrics`): x its wall minutes or its "step", y its
    val BLEU or "valid/loss"."""
    return [(r[x], r[y]) for r in metrics if r.get(y) is not None]


def value_at(curve, x, origin=(0.0, 0.0), digits=2):
    """The value of ``curve`` [(x, y)] at ``x``, linear between epochs and from ``origin``
    before the first (None: nothing before the first epoch); None past its end."""
    previous = origin
    for xi, value in curve:
        if xi >= x:
            if previous is None:
                return value if xi == x else None
            (x0, y0), (x1, y1) = previous, (xi, value)
            return round(y0 + (y1 - y0) * (x - x0) / (x1 - x0), digits)
        previous = (xi, value)
    return None


def minutes_to_reach(curve, bleu):
    """The first minute the val BLEU curve reaches ``bleu`` (linear between epochs), or None."""
    previous = (0.0, 0.0)
    for minutes, value in curve:
        if value >= bleu:
            (m0, b0), (m1, b1) = previous, (minutes, value)
            return round(m0 + (m1 - m0) * (bleu - b0) / (b1 - b0), 2) if b1 > b0 else minutes
        previous = (minutes, value)
    return None


SAME_FOR_ALL_SEEDS = ("run", "parameters", "beam")  # every other column is averaged over seeds


def without_seed(name):
    """A sweep run's name (`run_name`: its overrides, e.g. "model.num_heads=4,seed=2", after the
    sweep's folder if any) without its seed."""
    sweep, _, overrides = name.rpartition("/")
    overrides = re.sub(r"(^|,)seed=[^,]*", "", overrides).strip(",") or "(default)"
    return f"{sweep}/{overrides}" if sweep else overrides


def mean_over_seeds(rows):
    """One row per setting of ``rows`` whose runs differ only in the seed: "mean (a, b)" for
    each measured column (all but SAME_FOR_ALL_SEEDS: the scores, speeds, updates, minutes and
    what --reach/--at-update add); None when no setting has more than one run."""
    groups = {}
    for row in rows:
        groups.setdefault(without_seed(row["run"]), []).append(row)
    if all(len(group) == 1 for group in groups.values()):
        return None
    table = []
    for setting, group in groups.items():
        row = {"setting": setting, "seeds": len(group)}
        for key in (k for k in group[0] if k not in SAME_FOR_ALL_SEEDS):
            values = [r[key] for r in group if r[key] is not None]
            each = ", ".join(f"{v:g}" for v in values)
            row[key] = f"{round(statistics.mean(values), 2):g} ({each})" if values else None
        table.append(row)
    return table


def markdown(rows):
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join("-" if row[k] is None else str(row[k]) for k in keys) + " |"
              for row in rows]
    return "\n".join(lines)


def main(argv=None):
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", default="outputs/train/multiruns")
    ap.add_argument("--reach", type=float, help="also the minutes to reach this val BLEU")
    ap.add_argument("--at-update", type=int, help="also the val BLEU after this many updates")
    ap.add_argument("--at-minutes", type=float, help="also val BLEU and loss after this many "
                                                     "minutes of training")
    ap.add_argument("--curves", type=Path, help="write every run's val BLEU curve here (PNG)")
    args = ap.parse_args(argv)
    folder = args.folder
    runs = [p.parent for p in sorted(Path(folder).rglob("report.json"))]
    if not runs:
        raise DataError(f"no report.json below {folder}; pass a sweep's output folder (e.g. "
                        f"outputs/ablate) whose runs have finished")
    metrics = [read_metrics(run) for run in runs]
    rows = [summarize(run, m, run_name(run, folder)) for run, m in zip(runs, metrics)]
    if args.reach is not None:
        for row, m in zip(rows, metrics):
            row[f"minutes_to_{args.reach:g}"] = minutes_to_reach(val_curve(m), args.reach)
    if args.at_update is not None:
        for row, m in zip(rows, metrics):
            row[f"val_bleu_at_update_{args.at_update}"] = value_at(val_curve(m, "step"),
                                                                   args.at_update)
    if args.at_minutes is not None:
        for row, m in zip(rows, metrics):
            row[f"val_bleu_at_{args.at_minutes:g}_min"] = value_at(val_curve(m), args.at_minutes)
            row[f"val_loss_at_{args.at_minutes:g}_min"] = value_at(
                val_curve(m, y="valid/loss"), args.at_minutes, origin=None, digits=3)
    if args.curves:
        from mtx.runs.pictures import learning_curves
        learning_curves({row["run"]: val_curve(m) for row, m in zip(rows, metrics)},
                        args.curves)
    print(markdown(rows))
    means = mean_over_seeds(rows)
    if means:
        print("\nMean over seeds (each seed's value in brackets):\n\n" + markdown(means))
    atomic_write_json(Path(folder) / "summary.json", rows)


if __name__ == "__main__":
    with one_line_errors():
        main()
