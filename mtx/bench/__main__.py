"""Throughput of mtx against gluonnlp 0.10, the d2l book, PyTorch and CTranslate2 (`make bench`).

    mtx-bench train [--impl IMPL[,IMPL...]] [--rounds 3] [--seconds 60] [--warmup-steps 20]
    mtx-bench decode --run RUN_DIR [--impl mtx,mtx-bf16,ct2-float32,ct2-int8] [--rounds 3]
    mtx-bench decode --run RUN_DIR,RUN_DIR[,...] [--impl mtx]   (runs against each other)
    mtx-bench serve --run RUN_DIR [--clients 1,4,16] [--seconds 20] [--beam 5]
    mtx-bench corpus [--pairs 2000000] [--small 29000] [--minutes 3] [--work DIR]
    mtx-bench profile --run RUN_DIR [--beam 5] [--max-sentences N]
    mtx-bench profile-train [--impl mtx|mtx-bf16|mtx-mkl] [--steps 20] [--warmup-steps 20]
    mtx-bench quality [--impl mtx,opennmt,sockeye] [--data NAME] [--model NAME] [--minutes 60]

Training: every implementation gets conf/model/small.yaml (--model, untied, the corpus's
vocabulary, one dropout rate for attention too, as the peers take it), conf/data/multi30k_en_de.yaml
(--data), the same ~4096-token batches and OMP_NUM_THREADS threads; without --impl, mtx and every
peer installed (the PyTorch ones with the bench-torch extra). One implementation is measured
here, several each in a child, training in interleaved rounds with paired ratios (`rounds`).
IMPL@REV is IMPL at git revision REV; mtx:KEY=VALUE[:KEY=VALUE...] (or mtx-bf16:...) trains with
those training settings (`mtx.config.TrainConfig`), e.g. --impl mtx-bf16,mtx-bf16:rdrop_alpha=5
for what R-Drop costs. DNNL_MAX_CPU_ISA=AVX2 in front measures as a CPU without AVX-512 would.
Decoding: the run's test split with beam 5 and greedily, best of --rounds; several
implementations each in a child process, one round a child, the children in turn (--rounds
times), with the pairs' per-round ratios of seconds; several runs are translated by one mtx
implementation in one process, in interleaved rounds (a smaller model against a larger one).
Profile: where one translation's (or --steps training steps') time goes, per MXNet operator
(`mtx.bench.profile`).
Quality: mtx against OpenNMT-py and Sockeye, each trained for the same minutes on the same files
and scored alike (`mtx.bench.quality`). Tables go to stdout.
"""
import argparse
import logging
import sys
from pathlib import Path

from ..commands.exits import OneLineParser, one_line_errors
from ..commands.paths import writable_file
from ..errors import ConfigError
from . import rounds, tables
from .inputs import DEFAULT_DATA, DEFAULT_MODEL
from .measure import (DECODE_DEFAULT, DECODE_IMPLS, MTX_PRECISIONS, RUN_BEAMS, TRAIN_DEFAULT, TRAIN_IMPLS,
                      decode_runs, describe, measure, train_settings)
from .corpus import measure_corpus
from .profile import measure_profile, measure_train_profile
from .quality import IMPLS as QUALITY_IMPLS, measure_quality
from .serve import measure_serve

log = logging.getLogger("mtx.bench")


def impl_names(args, known, default=None):
    """--impl (else ``default``) as a list; ConfigError for an unknown implementation or git
    revision, and for mtx-bf16 or mtx-mkl asked for where its products cannot run (left out of
    a default)."""
    if not (args.impl or default):
        raise ConfigError(f"{args.command}: give --impl IMPL[,IMPL...] ({', '.join(known)})")
    names = [n for n in (args.impl or default).split(",") if n]
    for name in names or [""]:
        impl, at, revision = name.partition("@")
        if impl.split(":")[0] not in known or (at and not revision):
            raise ConfigError(f"--impl {name}: unknown implementation; choose from "
                              f"{', '.join(known)} (each also as IMPL@GIT_REVISION)")
        if ":" in impl:  # training settings: checked now, not in a child after the others
            if args.command != "train":
                raise ConfigError(f"--impl {name}: training settings (IMPL:KEY=VALUE) are for "
                                  f"mtx-bench train")
            train_settings(impl)
        if revision:
            rounds.checkout(revision)  # a wrong revision fails now, not after the others
    reasons = {n: unavailable_products(n) for n in names}
    for name, reason in reasons.items():
        if reason and args.impl:
            raise ConfigError(f"--impl {name}: its products cannot run on this CPU ({reason}); "
                              f"leave it out of --impl")
        if reason:
            log.warning("%s left out: its products cannot run on this CPU (%s)", name, reason)
    return [n for n in names if not reasons[n]]


def unavailable_products(name):
    """Why implementation ``name``'s products cannot run here (mtx-bf16, mtx-mkl), or None."""
    from ..training.precision import products_unavailable
    return products_unavailable(MTX_PRECISIONS.get(name.partition("@")[0].split(":")[0]))


def train_default():
    """TRAIN_DEFAULT, less PyTorch's peers when it is not installed (said once)."""
    import importlib.util
    if importlib.util.find_spec("torch") is not None:
        return ",".join(TRAIN_DEFAULT)
    log.warning("the PyTorch peers left out: PyTorch is not installed (pip install -e "
                "'.[bench-torch]')")
    return ",".join(n for n in TRAIN_DEFAULT if not n.startswith("pytorch"))


def run_measurement(args):
    """`train` or `decode`: one implementation here, several in children -> (report, tables)."""
    kind = args.command
    several_runs = kind == "decode" and len(decode_runs(args.run)) > 1
    names = (impl_names(args, TRAIN_IMPLS, args.impl or train_default()) if kind == "train" else
             impl_names(args, DECODE_IMPLS, "mtx" if several_runs else ",".join(DECODE_DEFAULT)))
    if several_runs and (len(names) != 1 or names[0] not in MTX_PRECISIONS):
        raise ConfigError(f"--run {args.run}: several runs are timed with one implementation, "
                          f"--impl {', '.join(MTX_PRECISIONS)}")
    if len(names) == 1 and "@" not in names[0]:
        report = measure(kind, names[0], args)
    elif kind == "train":
        report = {"machine": describe(), **rounds.training_rounds(args, names)}
    else:
        report = {"machine": describe(), **rounds.decoding_rounds(args, names, RUN_BEAMS)}
    table = (tables.rounds_table(report) if "train_ratios" in report else
             tables.results_table(report[kind]))
    if report.get("decode_ratios"):
        table += "\n\n" + tables.ratios_table(report["decode_ratios"], "paired ratio (time)")
    header = [tables.machine_line(report["machine"]), tables.kernels_line(report[kind])]
    return report, "\n".join(filter(None, header)) + "\n\n" + table


def number(kind, low):
    """An argparse type: a ``kind`` (int: at least ``low``; float: above it)."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or value < low or (kind is float and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' * (kind is int)}number"
                                             f" {'>=' if kind is int else '>'} {low}")
        return value
    return parse


OPTIONS = {
    "impl": dict(help=f"comma-separated: train {', '.join(TRAIN_IMPLS)}; decode "
                      f"{', '.join(DECODE_IMPLS)} (each also as IMPL@REV)"),
    "model": dict(default=DEFAULT_MODEL, help="conf/model/<name>.yaml"),
    "data": dict(default=DEFAULT_DATA, help="conf/data/<name>.yaml"),
    "seconds": dict(type=number(float, 0), help="measured seconds (train: 60 per "
                                                "implementation and round; serve: 20 per row)"),
    "warmup-steps": dict(type=number(int, 0), default=20, help="untimed training steps first"),
    "rounds": dict(type=number(int, 1), default=3, help="interleaved rounds"),
    "run": dict(help="a trained run directory (decode: several, comma-separated)"),
    "max-sentences": dict(type=number(int, 1), help="only the first N test sentences"),
    "clients": dict(default="1,4,16", help="concurrent clients, one row each"),
    "beam": dict(type=number(int, 1), default=5),
    "steps": dict(type=number(int, 1), default=20, help="training steps profiled"),
    "pairs": dict(type=number(int, 1), default=2_000_000, help="pairs of the large corpus"),
    "small": dict(type=number(int, 1), default=29_000, help="its first lines: the small corpus"),
    "minutes": dict(type=number(float, 0), help="training minutes (corpus: of each start, 3; "
                                                 "quality: of each toolkit, 60)"),
    "work": dict(help="where the corpora, runs and logs go (outputs/bench-<command>)"),
    "seed": dict(type=number(int, 1), default=1, help="every toolkit's training seed"),
    "data-overrides": dict(help="Hydra overrides of data.* keys, e.g. \"data.train=... "
                                "data.valid=...\" with --data files")}
COMMANDS = {"train": (run_measurement, "training throughput, MFU and paired ratios",
                      "impl model data seconds warmup-steps rounds"),
            "decode": (run_measurement, "a trained run translated by mtx and CTranslate2",
                       "run impl max-sentences rounds"),
            "serve": (measure_serve, "mtx-serve under concurrent clients (docs/serving.md)",
                      "run clients seconds beam max-sentences"),
            "corpus": (measure_corpus, "a large files corpus against a small one: memory, "
                       "start-up, tokens/s (docs/performance.md)", "pairs small minutes work"),
            "profile": (measure_profile, "where a translation's time goes: MXNet's profiler, "
                        "per operator", "run beam max-sentences"),
            "profile-train": (measure_train_profile, "where a training step's time goes, per "
                              "operator", "impl model data steps warmup-steps"),
            "quality": (measure_quality, f"BLEU and speed of mtx and the toolkits users pick "
                        f"instead ({', '.join(QUALITY_IMPLS)}), the same minutes each",
                        "impl data model minutes seed work data-overrides")}


def main(argv=None):
    """Parse ``argv``, run, print the tables."""
    parser = OneLineParser(prog="mtx-bench", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, (_, text, options) in COMMANDS.items():
        sub = commands.add_parser(command, help=text)
        sub.add_argument("--out", type=Path, help="write the JSON report here")
        for option in options.split():
            sub.add_argument(f"--{option}", **OPTIONS[option])
        sub.set_defaults(seconds=20.0 if command == "serve" else 60.0,
                         minutes=60.0 if command == "quality" else 3.0,
                         work=f"outputs/bench-{command}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    with one_line_errors():
        if args.command in ("decode", "serve", "profile") and not args.run:
            impl = f" --impl {args.impl}" if getattr(args, "impl", None) else ""
            raise ConfigError(f"{args.command}{impl} translates a trained run: give --run RUN_DIR")
        if args.out:  # an unwritable --out fails before the measurement, not after it
            args.out.parent.mkdir(parents=True, exist_ok=True)
            writable_file(args.out, "--out")
        report, text = COMMANDS[args.command][0](args)
        if args.out:
            from ..files import atomic_write_json
            atomic_write_json(args.out, report)
        print(text)


if __name__ == "__main__":
    main()
