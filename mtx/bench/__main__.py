"""Throughput of mtx against its peers (gluonnlp 0.10, the d2l book), side by side (`make bench`).

    python -m mtx.bench [all] [--impl mtx,mtx-bf16,gluonnlp,d2l] [--seconds 60] [--steps 64]
                        [--run RUN_DIR] [--out FILE]
    python -m mtx.bench train --impl IMPL[,IMPL...] [--seconds 60] [--rounds 3] [--warmup-steps 20]
                              [--batches bucket[,packed]] [--out FILE]
    python -m mtx.bench decode --impl IMPL[,IMPL...] [--steps 64] [--max-sentences N] [--out FILE]
    python -m mtx.bench decode --run RUN_DIR [--impl mtx,mtx-bf16,ct2-float32,ct2-int8] [--out FILE]
    python -m mtx.bench profile --impl IMPL[,IMPL...] [--steps 20] [--batches bucket|packed]
                                [--out FILE]
    python -m mtx.bench translate --run RUN_DIR [--beam 5] [--max-sentences N] [--profile]
                                  [--out FILE]
    python -m mtx.bench compare-runs RUN_DIR RUN_DIR... [--steps 64] [--rounds 3] [--beam K]
        [--out FILE]
    python -m mtx.bench serve --run RUN_DIR [--clients 1,4,16] [--seconds 20] [--beam 5]
                              [--max-sentences N] [--url URL] [--out FILE]

Common configuration: conf/model/small.yaml (--model) with untied embeddings and the data's
vocabulary, conf/data/multi30k_en_de.yaml (--data), the same ~4096-token batches for every
implementation, fp32 (mtx-bf16: mtx with bfloat16 matrix multiplies), OMP_NUM_THREADS threads.
With one --impl the measurement runs in this process; with several (and in `all`) each runs in a
process of its own (`python -m mtx.bench <command> --impl X --out FILE`). Training with several
implementations (or batchings: --batches bucket,packed) runs in interleaved rounds (mtx, peer,
mtx, peer, ...: --rounds, --seconds each; `mtx@REV` is mtx at git revision REV, from a temporary
worktree, to measure what commits bought) and reports each one's median over the rounds and the
paired ratios of the first implementation to each other one, round by round (a drifting machine
moves both sides of a pair alike), with the measured float32 and bfloat16 GEMM peaks and the MFU
against both. `all` measures training
and decoding (plus mtx-recompute, mtx's decoder without its cache) and, with --run, the trained
run's beam-1 and beam-5 translation. `decode --run` puts mtx and the run exported to CTranslate2
(ct2-float32, ct2-int8: `mtx.deploy`) side by side on the run's own weights: each translates the
run's test split with beam 5 and greedily, in a process of its own (`workers.measure_run_decode`).
Tables go to stdout, progress to stderr; files are written only to --out.
"""
import argparse
import dataclasses
import logging
import resource
import sys
from pathlib import Path

from ..commands.common import OneLineParser, one_line_errors, writable_file
from ..errors import ConfigError
from . import inputs, revisions, workers
from .impls import CT2_QUANTIZATIONS, DECODE_IMPLS, RUN_IMPLS, TRAIN_IMPLS, precision_of

DEFAULT_SECONDS = 60.0        # measured training seconds per implementation (per round)
DEFAULT_TRAIN_ROUNDS = 3      # interleaved rounds of training with several implementations
DEFAULT_DECODE_STEPS = 64     # forced greedy decoding steps
DEFAULT_PROFILE_STEPS = 20    # profiled training steps per implementation
DEFAULT_ROUNDS = 3            # rounds of compare-runs
TRANSLATE_BEAMS = (1, 5)      # `all --run`: greedy and the default beam
CHILD_FLAGS = {"decode_run": "--run"}  # options whose flag is not --<dest>
CHILD_OPTIONS = {"train": ("model", "data", "seconds", "warmup_steps", "batches"),
                 "decode": ("model", "data", "steps", "max_sentences", "decode_run"),
                 "profile": ("model", "data", "steps", "warmup_steps", "batches")}
# options that older revisions' benches may not know, with their defaults: left out of an
# mtx@REV child's command line when at the default
NEW_OPTIONS = {"batches": inputs.BATCHINGS[0]}
NATIVE = "native"  # --isa: oneDNN uncapped; the others are its DNNL_MAX_CPU_ISA values
ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16",
               "AVX512_CORE_AMX")
log = logging.getLogger("mtx.bench")


def impl_names(text, known):
    """'mtx,d2l' -> ['mtx', 'd2l'], or ConfigError naming the unknown one and the choices.
    ``mtx@REV`` (any mtx implementation at a git revision) is known where ``mtx`` is."""
    names = [n for n in text.split(",") if n]
    for name in names:
        if name.partition("@")[0] not in known or name.endswith("@") or (
                "@" in name and not name.startswith("mtx")):
            raise ConfigError(f"--impl {name}: unknown implementation; choose from "
                              f"{', '.join(known)} (mtx ones also as IMPL@GIT_REVISION)")
    if not names:
        raise ConfigError(f"--impl is empty; choose from {', '.join(known)}")
    for name in names:  # a wrong revision fails now, not after the others were measured
        revision = name.partition("@")[2]
        if revision:
            revisions.checkout(revision)
    return names


def runnable(names, default):
    """``names`` less the bfloat16 implementations where bfloat16 products cannot run on this
    CPU: left out with a warning from a ``default`` list, a ConfigError when asked for."""
    from ..precision import bfloat16_unavailable
    bf16 = [n for n in names if precision_of(n.partition("@")[0]) == "bfloat16"]
    reason = bf16 and bfloat16_unavailable()
    if not reason:
        return names
    if not default:
        raise ConfigError(f"--impl {bf16[0]}: bfloat16 products cannot run on this CPU "
                          f"({reason}); leave it out of --impl")
    log.warning("%s left out: bfloat16 products cannot run on this CPU (%s)", ", ".join(bf16),
                reason)
    return [n for n in names if n not in bf16]


def batchings(args):
    """--batches 'bucket,packed' -> ['bucket', 'packed'], or ConfigError naming the unknown one."""
    names = [n for n in getattr(args, "batches", inputs.BATCHINGS[0]).split(",") if n]
    for name in names or [""]:
        if name not in inputs.BATCHINGS:
            raise ConfigError(f"--batches {name}: unknown batching; choose from "
                              f"{', '.join(inputs.BATCHINGS)}")
    return names


def one_batching(args):
    """The one batching of a measurement in this process."""
    names = batchings(args)
    if len(names) > 1:
        raise ConfigError(f"--batches {args.batches}: {args.command} measures one batching; "
                          f"`train` measures several in interleaved rounds")
    return names[0]


def measure(kind, args, name):
    """One measurement of ``kind`` of implementation ``name`` in this process -> its report."""
    from ..devices import use_numpy_interface
    from .machine import describe
    from .peers import PEER_PACKAGES, installed
    if not installed(name):
        raise ConfigError(f"--impl {name}: not installed; pip install {PEER_PACKAGES[name]}")
    if name != "gluonnlp" and name not in CT2_QUANTIZATIONS:  # gluonnlp: the legacy API;
        use_numpy_interface()                                     # CTranslate2: no MXNet
    if kind == "translate":
        result, model_cfg = workers.measure_translate(args.run, args.beam, args.max_sentences,
                                                      args.profile)
    elif kind == "train":
        result, model_cfg = workers.measure_train(name, args.model, args.data, args.seconds,
                                                  args.warmup_steps, one_batching(args))
    elif kind == "decode" and args.decode_run:
        result, model_cfg = workers.measure_run_decode(name, args.decode_run, args.max_sentences)
    elif kind == "decode":
        if name in CT2_QUANTIZATIONS:
            raise ConfigError(f"--impl {name} translates a trained run: give --run RUN_DIR")
        result, model_cfg = workers.measure_decode(name, args.model, args.data, args.steps,
                                                   args.max_sentences)
    else:
        result, model_cfg = workers.measure_profile(name, args.model, args.data, args.steps,
                                                    args.warmup_steps, one_batching(args))
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"machine": describe(), "model_config": dataclasses.asdict(model_cfg),
            kind: {name: result}}


def child_result(child, kind, name):
    """The measurement ``kind`` of ``name`` in a child's report, or the child's error."""
    return child.get(kind, {}).get(name, child)


def measure_in_children(kind, args, names, report):
    """Each implementation's measurement in a process of its own, into ``report[kind]``."""
    from .peers import PEER_PACKAGES, installed
    report.setdefault(kind, {})
    for name in names:
        if not installed(name):
            report[kind][name] = {"skipped": f"{name} not installed ({PEER_PACKAGES[name]})"}
            continue
        impl, _, revision = name.partition("@")
        options = [(CHILD_FLAGS.get(key, f"--{key.replace('_', '-')}"), getattr(args, key))
                   for key in CHILD_OPTIONS[kind] if getattr(args, key, None) is not None
                   and not (revision and key in NEW_OPTIONS and
                            getattr(args, key) == NEW_OPTIONS[key])]
        cap = getattr(args, "cap", NATIVE)
        child = workers.run_child(kind, "--impl", impl, *[x for pair in options for x in pair],
                                  cwd=revisions.checkout(revision) if revision else None,
                                  **({} if cap == NATIVE else {"isa_cap": cap}))
        report[kind][name] = child_result(child, kind, impl)
        if child.get("model_config"):
            report.setdefault("model_config", child["model_config"])
        log.info("%s %s %s", name, kind, {k: v for k, v in report[kind][name].items()
                                          if not isinstance(v, (dict, list))})
    return report


def measure_rounds(args, names, report):
    """Training of ``names`` in ``args.rounds`` interleaved rounds, each in a process of its own,
    on each batching (--batches) and under each oneDNN cap (--isa), into report["train"] (each
    one's median round, with "rounds": its per-round results; its float32 and bfloat16 GEMM
    peaks), report["train_ratios"] (paired ratios of the first implementation to each other on the
    same batches and cap, and of each on every other batching or cap to the first) and the GEMM
    peaks, measured before every round under each cap (the best of them: a peak taken once
    catches the host at any speed)."""
    from .machine import gemm_peaks
    kinds, caps = batchings(args), isa_caps(args)

    def label(name, batching, cap):
        axes = [x for x, many in ((batching, len(kinds) > 1), (cap, len(caps) > 1)) if many]
        return f"{name} ({', '.join(axes)})" if axes else name
    per_round = {label(n, b, c): [] for c in caps for b in kinds for n in names}
    peaks = {cap: {"float32": [], "bfloat16": []} for cap in caps}
    for r in range(args.rounds):
        log.info("round %d of %d", r + 1, args.rounds)
        for cap in caps:
            for dtype, value in gemm_peaks(None if cap == NATIVE else cap).items():
                peaks[cap][dtype].append(value)  # bfloat16: None where it cannot run
            for batching in kinds:
                measured = measure_in_children("train", argparse.Namespace(
                    **{**vars(args), "batches": batching, "cap": cap}), names, report)
                for name in names:
                    per_round[label(name, batching, cap)].append(measured["train"][name])
    best = {cap: {dtype: max(values, key=lambda x: x or 0) for dtype, values in p.items()}
            for cap, p in peaks.items()}
    report["gemm_peak_gflop_s"] = best[caps[0]]["float32"]
    report["gemm_peak_bf16_gflop_s"] = best[caps[0]]["bfloat16"]
    report["gemm_peak_rounds"] = peaks[caps[0]] if len(caps) == 1 else peaks
    report["train"] = {}
    for cap in caps:
        for batching in kinds:
            for name in names:
                key = label(name, batching, cap)
                report["train"][key] = {**workers.median_round(per_round[key]),
                                        "gemm_peak_gflop_s": best[cap]["float32"],
                                        "gemm_peak_bf16_gflop_s": best[cap]["bfloat16"]}
    report["train_ratios"] = {}
    pairs = [[label(n, b, c) for n in names] for c in caps for b in kinds]  # same batches, cap
    pairs += [[label(n, b, c) for b, c in [(x, caps[0]) for x in kinds[1:]] +
               [(kinds[0], c) for c in caps[1:]]] + [label(n, kinds[0], caps[0])]
              for n in names]  # each implementation on every other batching or cap: the first
    for group in pairs:
        reference = group[0] if len(group) == len(names) else None
        if reference is not None:
            report["train_ratios"].update(workers.paired_ratios(
                {key: per_round[key] for key in group}, reference, "tok_s"))
            continue
        for key in group[:-1]:
            report["train_ratios"].update(workers.paired_ratios(
                {key: per_round[key], group[-1]: per_round[group[-1]]}, key, "tok_s"))
    return report


def isa_caps(args):
    """--isa 'native,AVX2' -> ['native', 'AVX2'], or ConfigError naming the unknown one."""
    names = [n for n in getattr(args, "isa", NATIVE).split(",") if n]
    for name in names or [""]:
        if name != NATIVE and name not in ONEDNN_ISAS:
            raise ConfigError(f"--isa {name}: unknown; choose from {NATIVE}, "
                              f"{', '.join(ONEDNN_ISAS)}")
    return names


def run_measurements(args):
    """train, decode, profile: one implementation here, several in child processes (training in
    interleaved rounds)."""
    from . import tables
    from .machine import describe
    default = args.command == "decode" and args.impl is None
    if default:
        if not args.decode_run:
            raise ConfigError("decode: give --impl IMPL[,IMPL...], or --run RUN_DIR")
        args.impl = ",".join(RUN_IMPLS)
    names = runnable(impl_names(args.impl, DECODE_IMPLS if args.command == "decode"
                                else TRAIN_IMPLS), default)
    elsewhere = any("@" in name for name in names)  # another revision runs in its checkout
    if args.command == "train" and (len(names) > 1 or len(batchings(args)) > 1
                                    or len(isa_caps(args)) > 1 or elsewhere):
        report = measure_rounds(args, names, {"machine": describe()})
    elif len(names) == 1 and not elsewhere:
        report = measure(args.command, args, names[0])
    else:
        report = measure_in_children(args.command, args, names, {"machine": describe()})
    results = report[args.command]
    table = (tables.profile_table(results) if args.command == "profile"
             else tables.results_table(results))
    header = [tables.machine_line(report["machine"]), tables.kernels_line(results)]
    if "train_ratios" in report:
        table += "\n\n" + tables.rounds_table(report)
    return report, "\n".join([*filter(None, header), "", table])


def run_translate(args):
    from . import tables
    report = measure("translate", args, f"beam{args.beam}")
    results = report["translate"]
    table = tables.results_table({name: {k: v for k, v in r.items() if k != "operators_ms"}
                                  for name, r in results.items()})
    if args.profile:
        table += "\n\n" + tables.operators_table(results)
    return report, table


def run_compare_runs(args):
    from ..devices import use_numpy_interface
    from . import tables
    from .machine import describe
    use_numpy_interface()
    results = workers.compare_runs(args.run_dirs, args.data, args.steps, args.rounds, args.beam)
    return {"machine": describe(), "compare_runs": results}, tables.compare_runs_table(results)


def run_serve(args):
    """mtx-serve under N concurrent clients against one-at-a-time translation (mtx.bench.serve)."""
    from .serve import measure_serve
    return measure_serve(args)


def run_all(args):
    """Training (interleaved rounds) and decoding of every implementation side by side; with
    --run, translation."""
    from . import tables
    from .machine import describe
    names = runnable(impl_names(args.impl, TRAIN_IMPLS), args.impl == ",".join(TRAIN_IMPLS))
    report = measure_rounds(args, names, {"machine": describe()})
    measure_in_children("decode", args, names + (["mtx-recompute"] if "mtx" in names else []),
                        report)
    if args.run:
        report["translate"] = {}
        for beam in TRANSLATE_BEAMS:
            child = workers.run_child("translate", "--run", args.run, "--beam", beam)
            report["translate"][f"beam{beam}"] = child_result(child, "translate", f"beam{beam}")
    return report, tables.summary_table(report) + "\n\n" + tables.rounds_table(report)


def option_groups():
    """Parent parsers of the options several commands share."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, help="write the JSON report here (nothing else is "
                        "written)")
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--model", default=inputs.DEFAULT_MODEL, help="conf/model/<name>.yaml")
    config.add_argument("--data", default=inputs.DEFAULT_DATA, help="conf/data/<name>.yaml")
    training = argparse.ArgumentParser(add_help=False)
    training.add_argument("--seconds", type=positive, default=DEFAULT_SECONDS,
                          help="measured training seconds per implementation")
    training.add_argument("--warmup-steps", type=at_least(0), default=workers.WARMUP_STEPS,
                          help="untimed training steps first")
    training.add_argument("--rounds", type=at_least(1), default=DEFAULT_TRAIN_ROUNDS,
                          help="interleaved rounds when several implementations train")
    training.add_argument("--batches", default=inputs.BATCHINGS[0],
                          help=f"training batches, comma-separated: {', '.join(inputs.BATCHINGS)} "
                          f"(bucket: gluonnlp's bucket sampler, as mtx and gluonnlp train; "
                          f"packed: length-sorted packing, as fairseq); several: each "
                          f"implementation on each, interleaved")
    training.add_argument("--isa", default=NATIVE,
                          help=f"oneDNN caps, comma-separated: {NATIVE} (none) or a "
                          f"DNNL_MAX_CPU_ISA value ({', '.join(ONEDNN_ISAS)}); several: each "
                          f"implementation under each, interleaved (e.g. native,AVX2: this CPU "
                          f"against an AVX2-only one)")
    decoding = argparse.ArgumentParser(add_help=False)
    decoding.add_argument("--steps", type=at_least(1), default=DEFAULT_DECODE_STEPS,
                          help="forced greedy decoding steps")
    decoding.add_argument("--max-sentences", type=at_least(1),
                          help="only the first N test sentences")
    return common, config, training, decoding


def add_impl(parser, default=None):
    """--impl of the training-side commands (all, train, profile): TRAIN_IMPLS (decode has its
    own, DECODE_IMPLS)."""
    parser.add_argument("--impl", default=default, required=default is None,
                        help=f"implementation(s), comma-separated: {', '.join(TRAIN_IMPLS)} "
                        f"(mtx ones also as IMPL@GIT_REVISION)")


def at_least(low):
    """An argparse type: a whole number >= ``low`` (else one usage line naming it)."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} must be at least {low}")
        return value
    return parse


def positive(text):
    """An argparse type: a number > 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} must be > 0")
    return value


def build_parser():
    common, config, training, decoding = option_groups()
    ap = OneLineParser(prog="mtx-bench", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("all", parents=[common, config, training, decoding],
                       help="train + decode tables side by side (the default)")
    add_impl(p, default=",".join(TRAIN_IMPLS))
    p.add_argument("--run", help="a trained run: also time its beam-1 / beam-5 translation")
    add_impl(sub.add_parser("train", parents=[common, config, training],
                            help="training throughput"))
    p = sub.add_parser("decode", parents=[common, config, decoding],
                       help="greedy decoding speed; --run: mtx and CTranslate2 on a trained run")
    p.add_argument("--impl", help=f"implementation(s), comma-separated: {', '.join(DECODE_IMPLS)} "
                   f"(ct2-*: with --run only; default with --run: {','.join(RUN_IMPLS)})")
    p.add_argument("--run", dest="decode_run", help="a trained run: each implementation "
                   "translates its test split with its weights, beam 5 and greedy, with sacreBLEU")
    p = sub.add_parser("profile", parents=[common, config], help="MXNet profiler, ms per operator")
    add_impl(p)
    p.add_argument("--steps", type=at_least(1), default=DEFAULT_PROFILE_STEPS,
                   help="profiled steps")
    p.add_argument("--warmup-steps", type=at_least(0), default=workers.WARMUP_STEPS)
    p.add_argument("--batches", default=inputs.BATCHINGS[0],
                   help=f"training batches: {', '.join(inputs.BATCHINGS)}")
    p = sub.add_parser("translate", parents=[common], help="a trained run's real translation")
    p.add_argument("--run", required=True, help="a training run directory")
    p.add_argument("--beam", type=at_least(1), default=TRANSLATE_BEAMS[-1])
    p.add_argument("--max-sentences", type=at_least(1), help="only the first N test sentences")
    p.add_argument("--profile", action="store_true", help="the timed pass under MXNet's "
                   "profiler: ms per operator over the pass")
    p = sub.add_parser("compare-runs", parents=[common],
                       help="forced-step greedy decoding of trained runs, in turn, in one process")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--data", default=inputs.DEFAULT_DATA, help="conf/data/<name>.yaml: the "
                   "test split for runs without data.json (the runs' own corpus otherwise)")
    p.add_argument("--steps", type=at_least(1), default=DEFAULT_DECODE_STEPS)
    p.add_argument("--rounds", type=at_least(1), default=DEFAULT_ROUNDS)
    p.add_argument("--beam", type=at_least(1), help="then each run's real translation of the "
                   "test split at this beam, in turn, --rounds times (its speed-up and BLEU)")
    p = sub.add_parser("serve", parents=[common], help="mtx-serve under concurrent load "
                       "on loopback against one-at-a-time translation (docs/serving.md)")
    p.add_argument("--run", required=True, help="a training run directory")
    p.add_argument("--clients", default="1,4,16", help="concurrent clients, one row each")
    p.add_argument("--seconds", type=positive, default=20.0, help="measured seconds per row")
    p.add_argument("--beam", type=at_least(1), default=TRANSLATE_BEAMS[-1])
    p.add_argument("--max-sentences", type=at_least(1), help="only the first N test sentences")
    p.add_argument("--url", help="a server already running (default: one started here on a "
                   "free loopback port)")
    p.add_argument("--abuse", action="store_true", help="then ordinary requests alone and just "
                   "after the heaviest requests the limits allow and clients that hang up")
    return ap


COMMANDS = {"all": run_all, "train": run_measurements, "decode": run_measurements,
            "profile": run_measurements, "translate": run_translate,
            "compare-runs": run_compare_runs, "serve": run_serve}


def main(argv=None):
    """Parse ``argv`` (no command, or options first: `all`), run, print the table."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = ["all", *argv]
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    with one_line_errors():
        if args.out:  # an unwritable --out fails before the measurement, not after it
            args.out.parent.mkdir(parents=True, exist_ok=True)
            writable_file(args.out, "--out")
        report, table = COMMANDS[args.command](args)
        if args.out:
            from ..files import atomic_write_json
            atomic_write_json(args.out, report)
        print(table)


if __name__ == "__main__":
    main()
