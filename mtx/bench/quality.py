"""mtx-bench quality: mtx against the toolkits a user would pick instead, on the same parallel
files, for the same wall-clock minutes, on the same cores: each trains (mtx its own default,
the peers by their own command lines, `toolkits`), translates the test split with beam 5 as a
whole process, and one sacreBLEU call (`mtx.decoding.evaluation.score_translations`) scores
every toolkit's translations (docs/results.md, "Against other toolkits").

    mtx-bench quality [--impl mtx,opennmt,sockeye] [--data multi30k_en_de] [--model small]
                      [--minutes 60] [--seed 1] [--work outputs/bench-quality]
                      [--data-overrides "k=v ..."]

The toolkits run one after another (nothing else should run beside them). Each peer lives in
a virtual environment of its own under MTX_PEERS_DIR (else <data dir>/peers/), made on first
use (pip, from the package index); the peers get mtx's SentencePiece pieces of the same kept training pairs
(`shared_inputs`). Every toolkit's command lines, config and logs stay in <work>/<impl>-seed<N>/.
"""
import json
import os
import shlex
import statistics
import sys
from pathlib import Path

from ..errors import ConfigError
from ..files import atomic_write_json
from . import tables
from .inputs import CORPUS_SEED
from .processes import measured
from .shared_inputs import shared_inputs
from .toolkits import RUNNERS, THREADS

IMPLS = ("mtx", *RUNNERS)


def run_mtx(inputs, minutes, seed, out, overrides):
    """``mtx-train`` with its defaults (and the data's ``overrides``) for ``minutes``, then
    ``mtx-translate`` of the test sources with the run's final checkpoint and beam 5."""
    bin_dir, run_dir = Path(sys.executable).parent, out / "run"
    train = [bin_dir / "mtx-train", *overrides, f"seed={seed}", f"train.max_minutes={minutes}",
             f"hydra.run.dir={run_dir}"]
    trained = measured(train, out / "train.log", env=THREADS)
    report = json.loads((run_dir / "report.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    rates = [record["train/tok_s"] for record in steps]
    hypotheses = out / f"{inputs.test_name}.hyp"
    translate = [bin_dir / "mtx-translate", f"ckpt={run_dir}", f"input={inputs.path('test.txt')}",
                 f"output={hypotheses}"]
    decoded = measured(translate, out / "translate.log", env=THREADS)
    return {"updates": report["steps"], "train_tok_s": round(statistics.median(rates[1:] or rates)),
            "parameters": report["parameters"], "train": trained, "decode": decoded,
            "hypotheses_text": hypotheses.read_text(encoding="utf-8").split("\n")[:-1],
            "commands": [" ".join(map(str, train)), " ".join(map(str, translate))]}


def measure_quality(args):
    """Every --impl in turn on --data -> (report, markdown table)."""
    from ..datadir import data_dir
    from ..decoding.evaluation import score_translations
    from .inputs import group_config
    from .measure import describe
    names = [n for n in (args.impl or ",".join(IMPLS)).split(",") if n]
    unknown = [n for n in names if n not in IMPLS]
    if unknown or not names:
        raise ConfigError(f"--impl {args.impl}: choose from {', '.join(IMPLS)}")
    data_overrides = shlex.split(args.data_overrides or "")
    data_cfg = data_config(args.data, data_overrides)
    model_cfg = group_config("model", args.model)  # the size the peers match
    overrides = [f"data={args.data}", *data_overrides, f"model={args.model}"]
    work = Path(args.work).absolute()
    inputs = shared_inputs(data_cfg, work / f"inputs-{args.data}", CORPUS_SEED)
    rows = {}
    for name in names:
        out = work / f"{name}-seed{args.seed}"
        out.mkdir(parents=True, exist_ok=True)
        if name == "mtx":
            row = run_mtx(inputs, args.minutes, args.seed, out, overrides)
        else:
            envs_root = os.environ.get("MTX_PEERS_DIR") or data_dir() / "peers"
            row = RUNNERS[name](inputs, model_cfg, args.minutes, args.seed, out, envs_root)
            row["hypotheses_text"] = inputs.text(row.pop("hypotheses"))
        hypotheses = row.pop("hypotheses_text")
        row["scores"] = score_translations(hypotheses, inputs.references, inputs.tgt_lang)
        atomic_write_json(out / "result.json", row)
        rows[name] = row
        print(f"{name}: {row['scores']['sacrebleu']}", file=sys.stderr)
    report = {"machine": describe(), "data": args.data, "data_overrides": data_overrides,
              "model": args.model,
              "test": inputs.test_name, "minutes": args.minutes, "seed": args.seed,
              "results": rows}
    return report, quality_table(rows)


def data_config(name, overrides):
    """The typed DataConfig of conf/data/<name>.yaml with Hydra ``overrides`` (data.* keys)."""
    from ..commands.declared import compose
    from ..commands.entry import typed
    return typed(compose("train", [f"data={name}", *overrides]), "data")


def quality_table(rows):
    """One row a toolkit: scores, training updates and rate, decoding, memory, parameters."""
    def score(row, key):
        value = row["scores"][key]
        return value.get("score", "-") if isinstance(value, dict) else value

    return tables.table(
        ["toolkit", "sacreBLEU", "chrF", "tok-lc BLEU", "updates", "train tok/s",
         "decode s (beam 5, whole process)", "peak MB (train / decode)", "parameters"],
        [[name, score(row, "sacrebleu"), score(row, "chrf"), score(row, "bleu_tok_lc"),
          row["updates"], row["train_tok_s"], row["decode"]["seconds"],
          f"{row['train']['peak_rss_mb']} / {row['decode']['peak_rss_mb']}",
          f"{row['parameters']:,}" if row["parameters"] else "-"] for name, row in rows.items()])
