"""Where the time goes, per MXNet operator: MXNet's profiler with its statistics aggregated per
operator, around one translation of a run's test split by mtx's decoder (`mtx-bench profile`:
float32, after one untimed translation that traces the graphs and plans their memory), or
around training steps on the bench's batches (`mtx-bench profile-train`: mtx's step as
`mtx-bench train` times it, after the warm-up steps). Bulk execution is off in this process, so
every operator of a graph is timed on its own, which slows the whole a little: the shares, not
the seconds, are the result."""
import contextlib
import itertools
import os
import tempfile
import time

from ..errors import ConfigError
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
    with profiled(mx) as result:
        translator.translate(src)
    report = {"run": str(args.run), "beam": args.beam, "sentences": len(src), **result}
    head = f"{report['sentences']} sentences, beam {report['beam']}"
    return report, profile_table(report, head)


def measure_train_profile(args):
    """--steps training steps of --impl (mtx or mtx-bf16, with :KEY=VALUE settings) on the
    bench's batches of --model and --data, after --warmup-steps, under the profiler ->
    (report, text)."""
    from .measure import MTX_PRECISIONS, train_settings
    name = args.impl or "mtx"
    if train_settings(name)[0] not in MTX_PRECISIONS:
        raise ConfigError(f"--impl {name}: profile-train profiles mtx's own step; give "
                          f"{' or '.join(MTX_PRECISIONS)} (the peers have their own profilers)")
    os.environ["MXNET_EXEC_BULK_EXEC_TRAIN"] = "0"  # read when a graph is first run
    from ..hardware.devices import use_numpy_interface
    use_numpy_interface()
    import mxnet as mx
    from . import inputs
    from .measure import training_step
    corpus, model_cfg, data_cfg = inputs.load(args.model, args.data)
    batches = itertools.cycle(inputs.train_batches(corpus, data_cfg))
    step = training_step(name, model_cfg)
    for _ in range(args.warmup_steps):
        step(next(batches)).asnumpy()
    measured = [next(batches) for _ in range(args.steps)]
    with profiled(mx) as result:
        for batch in measured:
            step(batch)
    tokens = sum(b.num_tgt_tokens for b in measured)
    report = {"impl": name, "model": args.model, "steps": args.steps,
              "target_tokens": tokens, **result}
    head = f"{name}: {args.steps} training steps, {tokens} target tokens"
    return report, profile_table(report, head)


@contextlib.contextmanager
def profiled(mx):
    """Profile the body (MXNet's aggregate statistics; waits for its work) -> a dict that gets
    "seconds" and "operators" (`operator_times`) when the body is done."""
    result = {}
    with tempfile.TemporaryDirectory(prefix="mtx-profile-") as tmp:
        mx.profiler.set_config(profile_symbolic=True, profile_imperative=True,
                               aggregate_stats=True, filename=os.path.join(tmp, "profile.json"))
        mx.profiler.set_state("run")
        start = time.perf_counter()
        yield result
        mx.nd.waitall()
        result["seconds"] = round(time.perf_counter() - start, 3)
        mx.profiler.set_state("stop")
        result["operators"] = operator_times(mx.profiler.dumps(reset=True, format="json"))


def operator_times(dumped):
    """MXNet's aggregate statistics (`mx.profiler.dumps(format="json")`) -> [{"operator",
    "calls", "ms"}] of every operator timed, the longest total first (an operator that runs
    both in a graph and on its own is one row). Calls of MXNet's C API (MXNDArrayWaitAll,
    whose time is the other operators' running) are not operators."""
    import json
    totals = {}
    for group, entries in json.loads(dumped).get("Time", {}).items():
        if any(w in group.lower() for w in ("memory", "api")) or not isinstance(entries, dict):
            continue
        for name, stats in entries.items():
            calls, ms = totals.get(name, (0, 0.0))
            totals[name] = (calls + int(stats.get("Count", 0)), ms + float(stats.get("Total", 0)))
    return [{"operator": name, "calls": calls, "ms": round(ms, 2)}
            for name, (calls, ms) in sorted(totals.items(), key=lambda item: -item[1][1])]


def profile_table(report, what):
    """The first `SHOWN` operators with their share of all operators' time, under a line
    naming ``what`` was profiled."""
    total = sum(row["ms"] for row in report["operators"]) or 1.0
    rows = [[row["operator"], row["calls"], f"{row['ms']:.1f}", f"{100 * row['ms'] / total:.1f}"]
            for row in report["operators"][:SHOWN]]
    head = (f"{what}: {report['seconds']} s profiled; the operators' time "
            f"{total / 1000:.2f} s")
    return head + "\n\n" + table(["operator", "calls", "ms", "% of operators"], rows)
