"""mtx-bench corpus: what a corpus's size costs a training run (docs/performance.md, "Corpus
size"). A large en-de corpus is made from Multi30k's training pairs (each line two random pairs
joined), beside its own first lines as a small corpus with the same lengths; ``mtx-train
data=files`` then starts on each twice (the first start prepares, the second reuses), each
start a whole process: its peak RSS, the seconds from its start to its first training step,
its training tokens/s and the preparation's pairs/s.

    mtx-bench corpus [--pairs 2000000] [--small 29000] [--minutes 3] [--work DIR]
"""
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..data.multi30k import load_split
from ..datadir import data_dir

READY_LINE = "training pairs; devices"  # the log line `mtx.training.run` writes before step 1


def make_corpora(work, pairs, small, seed=0):
    """<work>/big.{en,de} (``pairs`` lines, two random Multi30k training pairs joined in each)
    and <work>/small.{en,de} (its first ``small`` lines), plus Multi30k's val and
    test_2016_flickr as dev and test; kept when already made."""
    work.mkdir(parents=True, exist_ok=True)
    raw_dir = os.environ.get("MTX_MULTI30K_DIR")
    if not (work / "big.de").is_file():
        src, tgt = load_split("train", "en", "de", raw_dir, data_dir())
        rng = random.Random(seed)
        with open(work / "big.en.tmp", "w") as out_src, open(work / "big.de.tmp", "w") as out_tgt:
            for _ in range(pairs):
                i, j = rng.randrange(len(src)), rng.randrange(len(src))
                out_src.write(f"{src[i]} {src[j]}\n")
                out_tgt.write(f"{tgt[i]} {tgt[j]}\n")
        for lang in ("en", "de"):
            os.replace(work / f"big.{lang}.tmp", work / f"big.{lang}")
    for lang in ("en", "de"):
        with open(work / f"big.{lang}") as big, open(work / f"small.{lang}", "w") as out:
            out.writelines(line for _, line in zip(range(small), big))
    for split, name in (("val", "dev"), ("test_2016_flickr", "test")):
        for lang, lines in zip(("en", "de"), load_split(split, "en", "de", raw_dir, data_dir())):
            (work / f"{name}.{lang}").write_text("".join(f"{line}\n" for line in lines))


def start(work, corpus, run_name, minutes):
    """One ``mtx-train data=files`` process on ``<work>/<corpus>`` for ``minutes``: {peak RSS in
    MB, seconds to the first step, median training tokens/s after the first window}."""
    run_dir = work / "runs" / run_name
    command = [str(Path(sys.executable).parent / "mtx-train"), "data=files", "data.src_lang=en",
               "data.tgt_lang=de", f"data.train={work / corpus}", f"data.valid={work / 'dev'}",
               f"data.test=[{work / 'test'}]", f"train.max_minutes={minutes}",
               "train.max_epochs=1", "train.eval_bleu=false", "train.precision=float32",
               "decode=greedy", "decode.max_len_a=0", "decode.max_len_b=2",
               f"hydra.run.dir={run_dir}"]
    env = dict(os.environ, MTX_DATA_DIR=str(work / "data"))
    tic, ready = time.time(), None
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=env, text=True)  # the log goes to either, by Hydra's config
    for line in process.stdout:
        if ready is None and READY_LINE in line:
            ready = time.time() - tic
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0 or ready is None:
        raise RuntimeError(f"{' '.join(command)} failed (status {status})")
    records = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    rates = [r["train/tok_s"] for r in records[1:]] or [r["train/tok_s"] for r in records]
    return {"peak_rss_mb": round(usage.ru_maxrss / 1024), "seconds_to_first_step": round(ready, 1),
            "tok_s": round(statistics.median(rates), 1)}


def prepared_speed(work):
    """{corpus key: pairs/s} of the preparations in <work>/data/prepared."""
    speeds = {}
    for meta in (work / "data" / "prepared").glob("*/meta.json"):
        values = json.loads(meta.read_text())
        speeds[values["read"]] = round(values["read"] / max(values["seconds"], 1e-9))
    return speeds


def measure_corpus(args):
    """Both corpora, each started twice, one after the other (nothing else should run)."""
    work = Path(args.work).absolute()
    make_corpora(work, args.pairs, args.small)
    for made in ("data", "runs"):  # a first start finds nothing prepared
        shutil.rmtree(work / made, ignore_errors=True)
    rows = {}
    for corpus in ("small", "big"):
        for attempt in ("first", "second"):
            rows[f"{corpus} {attempt}"] = start(work, corpus, f"{corpus}-{attempt}", args.minutes)
            print(f"{corpus} {attempt}: {rows[f'{corpus} {attempt}']}", file=sys.stderr)
    report = {"pairs": args.pairs, "small": args.small, "starts": rows,
              "preparation_pairs_per_s": prepared_speed(work)}
    lines = ["| corpus, start | peak RSS (MB) | s to first step | tokens/s |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['peak_rss_mb']} | {r['seconds_to_first_step']} | {r['tok_s']} |"
              for name, r in rows.items()]
    return report, "\n".join(lines)
