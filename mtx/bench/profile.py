"""Where a translation's time goes (`mtx-bench profile`): MXNet's profiler, its statistics
aggregated per operator, around one translation of a run's test split by mtx's decoder (float32,
after one untimed translation that traces the graphs and plans their memory). Bulk execution is
off in this process, so every operator of a graph is timed on its own, which slows the whole a
little: the shares, not the seconds, are the result."""
import os
import tempfile
import time

from .tables import table

SHOWN = 15  # operators in the table; the JSON has them all


def measure_profile(args):
    """--run translated with beam --beam (--max-sentences) under the profiler -> (report, text)."""
    os.environ["MXNET_EXEC_BULK_EXEC_INFERENCE"] = "0"  # read when a graph is first run
    import mxnet as mx
    from ..decoding.search import Translator, load_decoder
    from .inputs import decode_config, run_test_split
    src, _, _ = run_test_split(args.run, args.max_sentences)
    model, tokenizer, _ = load_decoder(args.run, mx.cpu())
    translator = Translator(model, tokenizer, decode_config(args.beam), mx.cpu())
    translator.translate(src)
    with tempfile.TemporaryDirectory(prefix="mtx-profile-") as tmp:
        mx.profiler.set_config(profile_symbolic=True, profile_imperative=True,
                               aggregate_stats=True, filename=os.path.join(tmp, "profile.json"))
        mx.profiler.set_state("run")
        start = time.perf_counter()
        translator.translate(src)
        mx.nd.waitall()
        seconds = time.perf_counter() - start
        mx.profiler.set_state("stop")
        operators = operator_times(mx.profiler.dumps(reset=True, format="json"))
    report = {"run": str(args.run), "beam": args.beam, "sentences": len(src),
              "seconds": round(seconds, 3), "operators": operators}
    return report, profile_table(report)


def operator_times(dumped):
    """MXNet's aggregate statistics (`mx.profiler.dumps(format="json")`) -> [{"operator",
    "calls", "ms"}] of every operator timed, the longest total first (an operator that runs
    both in a graph and on its own is one row)."""
    import json
    totals = {}
    for group, entries in json.loads(dumped).get("Time", {}).items():
        if "memory" in group.lower() or not isinstance(entries, dict):
            continue
        for name, stats in entries.items():
            calls, ms = totals.get(name, (0, 0.0))
            totals[name] = (calls + int(stats.get("Count", 0)), ms + float(stats.get("Total", 0)))
    return [{"operator": name, "calls": calls, "ms": round(ms, 2)}
            for name, (calls, ms) in sorted(totals.items(), key=lambda item: -item[1][1])]


def profile_table(report):
    """The first `SHOWN` operators with their share of all operators' time."""
    total = sum(row["ms"] for row in report["operators"]) or 1.0
    rows = [[row["operator"], row["calls"], f"{row['ms']:.1f}", f"{100 * row['ms'] / total:.1f}"]
            for row in report["operators"][:SHOWN]]
    head = (f"{report['sentences']} sentences, beam {report['beam']}: {report['seconds']} s "
            f"profiled; the operators' time {total / 1000:.2f} s")
    return head + "\n\n" + table(["operator", "calls", "ms", "% of operators"], rows)
