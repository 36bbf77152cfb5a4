"""Throughput of mtx against its peers (gluonnlp 0.10, the d2l book), side by side (`make bench`).

    mtx-bench [all] [--impl mtx,mtx-bf16,gluonnlp,d2l] [--seconds 60] [--run RUN_DIR]
    mtx-bench train --impl IMPL[,IMPL...] [--rounds 3] [--seconds 60] [--warmup-steps 20]
                    [--batches bucket[,packed]] [--isa native[,AVX2]]
    mtx-bench decode --impl IMPL[,IMPL...] [--steps 64] [--max-sentences N]
    mtx-bench decode --run RUN_DIR [--impl mtx,mtx-bf16,ct2-float32,ct2-int8]
    mtx-bench profile --impl IMPL[,IMPL...] [--steps 20] [--batches bucket|packed]
    mtx-bench serve --run RUN_DIR [--clients 1,4,16] [--seconds 20] [--beam 5] [--abuse]

Every implementation gets conf/model/small.yaml (--model, untied, the corpus's vocabulary),
conf/data/multi30k_en_de.yaml (--data), the same ~4096-token batches and OMP_NUM_THREADS threads.
One implementation is measured here, several each in a child; training then runs in interleaved
rounds with paired ratios (`rounds`). IMPL@REV is IMPL at git revision REV. Tables go to stdout.
"""
import argparse
import logging
import sys
from pathlib import Path

from ..commands.exits import OneLineParser, one_line_errors
from ..commands.paths import writable_file
from ..errors import ConfigError
from . import revisions, tables
from .inputs import BATCHINGS, DEFAULT_DATA, DEFAULT_MODEL
from .measure import DECODE_IMPLS, RUN_IMPLS, TRAIN_IMPLS, describe, measure
from .rounds import NATIVE, in_children, training_rounds

ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16",
               "AVX512_CORE_AMX")  # --isa caps: DNNL_MAX_CPU_ISA values
log = logging.getLogger("mtx.bench")


def listed(text, option, known):
    """'a,b' -> ['a', 'b'], or ConfigError naming the unknown one and the choices."""
    names = [n for n in text.split(",") if n]
    for name in names or [""]:
        if name not in known:
            raise ConfigError(f"{option} {name}: unknown; choose from {', '.join(known)}")
    return names


def impl_names(args, known, default=None):
    """--impl (else ``default``) as a list; ConfigError for an unknown implementation or git
    revision, and for mtx-bf16 asked for where bfloat16 cannot run (left out of a default)."""
    from ..precision import bfloat16_unavailable
    if not (args.impl or default):
        raise ConfigError(f"{args.command}: give --impl IMPL[,IMPL...] ({', '.join(known)})")
    names = [n for n in (args.impl or default).split(",") if n]
    for name in names or [""]:
        impl, at, revision = name.partition("@")
        if impl not in known or (at and not revision):
            raise ConfigError(f"--impl {name}: unknown implementation; choose from "
                              f"{', '.join(known)} (each also as IMPL@GIT_REVISION)")
        if revision:
            revisions.checkout(revision)  # a wrong revision fails now, not after the others
    reason = any(n.startswith("mtx-bf16") for n in names) and bfloat16_unavailable()
    if reason and args.impl:
        raise ConfigError(f"--impl mtx-bf16: bfloat16 products cannot run on this CPU ({reason})"
                          f"; leave it out of --impl")
    if reason:
        log.warning("mtx-bf16 left out: bfloat16 products cannot run on this CPU (%s)", reason)
    return [n for n in names if not (reason and n.startswith("mtx-bf16"))]


def measured(kind, args, names):
    """The measurements of ``names``: here for one implementation, else each in a child."""
    if len(names) == 1 and "@" not in names[0]:
        return measure(kind, names[0], args)
    return {"machine": describe(), kind: in_children(kind, args, names)}


def tabled(report, kind, table=tables.results_table):
    """The machine, the precision and kernels of the mtx rows, then ``report[kind]`` tabled."""
    return "\n".join(filter(None, [tables.machine_line(report["machine"]), tables.kernels_line(
        report[kind]), "", table(report[kind])]))


def run_train(args, default=None):
    names = impl_names(args, TRAIN_IMPLS, default)
    batchings = listed(args.batches, "--batches", BATCHINGS)
    caps = listed(args.isa, "--isa", (NATIVE, *ONEDNN_ISAS))
    if len(names) == len(batchings) == 1 and caps == [NATIVE] and "@" not in names[0]:
        report = measure("train", names[0], args)
        return report, tabled(report, "train")
    report = {"machine": describe(), **training_rounds(args, names, batchings, caps)}
    return report, tabled(report, "train", lambda _: tables.rounds_table(report))


def run_decode(args):
    names = impl_names(args, DECODE_IMPLS, ",".join(RUN_IMPLS) if args.run else None)
    for name in names if not args.run else ():
        if name.partition("@")[0] not in TRAIN_IMPLS:
            raise ConfigError(f"--impl {name} translates a trained run: give --run RUN_DIR")
    report = measured("decode", args, names)
    return report, tabled(report, "decode")


def run_profile(args):
    if len(listed(args.batches, "--batches", BATCHINGS)) > 1:
        raise ConfigError(f"--batches {args.batches}: profile measures one batching")
    report = measured("profile", args, impl_names(args, TRAIN_IMPLS))
    return report, tabled(report, "profile", tables.profile_table)


def run_all(args):
    report, text = run_train(args, ",".join(TRAIN_IMPLS))
    names = list(dict.fromkeys(label.split(" (")[0] for label in report["train"]))
    report["decode"] = in_children("decode", argparse.Namespace(**{**vars(args), "run": None}),
                                   names)
    text += "\n\n" + tables.results_table(report["decode"])
    if args.run:
        report["decode_run"] = in_children("decode", args, ["mtx"])
        text += "\n\n" + tables.results_table(report["decode_run"])
    return report, text


def run_serve(args):
    from .serve import measure_serve
    return measure_serve(args)


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
    "impl": dict(help=f"comma-separated: {', '.join(TRAIN_IMPLS)}, with decode --run also "
                      f"{', '.join(DECODE_IMPLS[len(TRAIN_IMPLS):])} (each also as IMPL@REV)"),
    "model": dict(default=DEFAULT_MODEL, help="conf/model/<name>.yaml"),
    "data": dict(default=DEFAULT_DATA, help="conf/data/<name>.yaml"),
    "seconds": dict(type=number(float, 0), help="measured seconds (train: 60 per "
                                                "implementation and round; serve: 20 per row)"),
    "warmup-steps": dict(type=number(int, 0), default=20, help="untimed training steps first"),
    "rounds": dict(type=number(int, 1), default=3, help="interleaved training rounds"),
    "batches": dict(default=BATCHINGS[0], help="training batches, comma-separated: bucket "
                    "(gluonnlp's sampler, as mtx trains), packed (length-sorted, as fairseq)"),
    "isa": dict(default=NATIVE, help=f"oneDNN caps, comma-separated: {NATIVE} (none) or "
                                     f"{', '.join(ONEDNN_ISAS)}"),
    "steps": dict(type=number(int, 1), help="decode: forced greedy steps (64); profile: "
                                            "profiled steps (20)"),
    "max-sentences": dict(type=number(int, 1), help="only the first N test sentences"),
    "run": dict(help="a trained run directory"),
    "clients": dict(default="1,4,16", help="concurrent clients, one row each"),
    "beam": dict(type=number(int, 1), default=5),
    "abuse": dict(action="store_true", help="then ordinary requests alone and just after the "
                  "heaviest requests the limits allow and clients that hang up")}
TRAINING = "impl model data seconds warmup-steps rounds batches isa"
COMMANDS = {"all": (run_all, "training and decoding side by side (the default)",
                    f"{TRAINING} steps max-sentences run"),
            "train": (run_train, "training throughput", TRAINING),
            "decode": (run_decode, "greedy decoding speed; --run: a trained run translated by "
                       "mtx and CTranslate2", "impl model data steps max-sentences run"),
            "profile": (run_profile, "MXNet's profiler: ms per operator of a training step",
                        "impl model data steps warmup-steps batches"),
            "serve": (run_serve, "mtx-serve under concurrent clients (docs/serving.md)",
                      "run clients seconds beam max-sentences abuse")}


def main(argv=None):
    """Parse ``argv`` (no command, or options first: `all`), run, print the tables."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["all", *argv]
    parser = OneLineParser(prog="mtx-bench", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, (_, text, options) in COMMANDS.items():
        sub = commands.add_parser(command, help=text)
        sub.add_argument("--out", type=Path, help="write the JSON report here")
        for option in options.split():
            sub.add_argument(f"--{option}", **OPTIONS[option])
    args = parser.parse_args(argv)
    for key, default in (("steps", 20 if args.command == "profile" else 64),
                         ("seconds", 20.0 if args.command == "serve" else 60.0)):
        if getattr(args, key, default) is None:
            setattr(args, key, default)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    with one_line_errors():
        if args.command == "serve" and not args.run:
            raise ConfigError("serve: give --run RUN_DIR")
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
