"""The measurements. Each runs in a process of its own (`python -m mtx.bench <command> --impl X
--out FILE`; `run_child` starts one), so peak memory and warm caches belong to one implementation.

Training: target tokens/s over consecutive steps on the common batches after WARMUP_STEPS steps,
the median over windows of at least WINDOW_SECONDS, and model FLOP/s (`mtx.bench.flops`); then
the step's matrix products timed alone at the batches' average padded shapes (what the step
would reach if nothing else ran: `machine.products_speed`).
Decoding: greedy, DECODE_BATCH sentences a batch, the same forced number of steps for everyone;
with a trained run (``decode --run``), each implementation translates the run's test split with
the run's weights, with beam 5 and greedily, as a user would (`measure_run_decode`).
"""
import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as onp

from ..errors import ConfigError
from ..vocab import output_subwords
from . import inputs
from .flops import decode_step_parts, step_products, train_flops
from .impls import greedy_decoder, precision_of, run_translators, training_step
from .machine import decode_parts_speed, kernel_status, products_speed

WARMUP_STEPS = 20                # training steps before any timing (graphs, allocator, caches)
WINDOW_SECONDS = 10.0            # training throughput: the median over windows this long
DECODE_WARMUP_STEPS = 4          # forced steps of one untimed decode of the first batch
PROFILE_MIN_MS = 1.0             # operators under this many ms per step are left out


def impl_facts(name):
    """What an implementation ran with: its precision and, for mtx, its native kernels."""
    facts = {"precision": precision_of(name)}
    if name.startswith("mtx"):
        facts["kernels"] = kernel_status()
    return facts


def timed_steps(step, batches, seconds, flops_of, warmup_steps):
    """[(seconds, target tokens, FLOPs, first step of its padded shape)] of consecutive steps
    over ``batches`` (cycled): ``warmup_steps`` steps, then steps until ``seconds`` of them (and
    at least one) are measured. (Hybridized graphs with static_alloc plan memory again for every
    new shape, so the first step of a shape can be slower.)"""
    timed, measured, seen = [], 0.0, set()
    for b in itertools.cycle(batches):
        if len(timed) > warmup_steps and measured >= seconds:
            return timed
        shape = b.padded_shape
        tic = time.perf_counter()
        float(step(b).asnumpy())  # synchronise: the step is done
        dt = time.perf_counter() - tic
        timed.append((dt, b.num_tgt_tokens, flops_of(b), shape not in seen))
        seen.add(shape)
        measured += dt if len(timed) > warmup_steps else 0


def throughput(measured):
    """Median target tokens/s over windows of >= WINDOW_SECONDS, each window's rate, and model
    GFLOP/s over all ``measured`` (seconds, tokens, FLOPs) steps."""
    def rate(steps, k):
        return sum(s[k] for s in steps) / sum(s[0] for s in steps)
    windows, current = [], []
    for s in measured:
        current.append(s)
        if sum(x[0] for x in current) >= WINDOW_SECONDS:
            windows.append(current)
            current = []
    windows = windows or [measured]  # a run shorter than one window is one window
    return {"tok_s": round(float(onp.median([rate(w, 1) for w in windows])), 1),
            "tok_s_windows": [round(rate(w, 1)) for w in windows],
            "gflop_s": round(rate(measured, 2) / 1e9, 1)}


def seen_shapes_rate(measured):
    """Target tokens/s over the measured steps whose padded shape had been stepped before (what
    a long training sees once every shape is planned), or None when there are none."""
    steady = [s for s in measured if not s[3]]
    return round(sum(s[1] for s in steady) / sum(s[0] for s in steady), 1) if steady else None


def median_round(rounds):
    """One implementation's per-round results -> the round with the median tok_s, with "rounds":
    every round's tok_s and gflop_s (or the first error if a round failed)."""
    failed = [r for r in rounds if "tok_s" not in r]
    if failed:
        return failed[0]
    middle = sorted(rounds, key=lambda r: r["tok_s"])[(len(rounds) - 1) // 2]
    return {**middle, "rounds": [{"tok_s": r["tok_s"], "gflop_s": r["gflop_s"]} for r in rounds]}


def paired_ratios(per_round, reference, key):
    """{name: [result per round]} -> {"<reference> / <name>": {"median", "min", "max",
    "rounds"}} of ``key`` for every other implementation, round by round."""
    ratios = {}
    for name, rounds in per_round.items():
        pairs = [a[key] / b[key] for a, b in zip(per_round[reference], rounds)
                 if key in a and key in b]
        if name == reference or not pairs:
            continue
        ratios[f"{reference} / {name}"] = {
            "median": round(float(onp.median(pairs)), 3), "min": round(min(pairs), 3),
            "max": round(max(pairs), 3), "rounds": [round(p, 3) for p in pairs]}
    return ratios


def batch_facts(batches):
    """What a list of training batches is: how many, their distinct padded shapes, and the real
    and padded target tokens of the average batch."""
    shapes = {b.padded_shape for b in batches}
    return {"batches": len(batches), "batch_shapes": len(shapes),
            "real_tgt_tokens": round(float(onp.mean([b.num_tgt_tokens for b in batches]))),
            "padded_tgt_tokens": round(float(onp.mean([b.tgt_in.size for b in batches]))),
            "padded_src_tokens": round(float(onp.mean([b.src_tokens.size for b in batches])))}


def measure_train(name, model_name, data_name, seconds, warmup_steps=WARMUP_STEPS,
                  batching=inputs.BATCHINGS[0]):
    """Training throughput of implementation ``name`` on ``batching``'s batches ->
    (result, ModelConfig)."""
    corpus, model_cfg, data_cfg = inputs.load(model_name, data_name)
    batches = inputs.train_batches(corpus, data_cfg, batching)
    step = training_step(name, corpus, model_cfg, data_cfg)
    timed = timed_steps(step, batches, seconds, lambda b: train_flops(model_cfg, b), warmup_steps)
    facts = batch_facts(batches)
    alone = products_speed(step_products(model_cfg, facts["padded_src_tokens"],
                                         facts["padded_tgt_tokens"]))
    result = {**throughput(timed[warmup_steps:]), "steps": len(timed),
              "warmup_steps": warmup_steps, "batching": batching, **facts,
              "first_shape_steps": sum(s[3] for s in timed[warmup_steps:]),
              "tok_s_seen_shapes": seen_shapes_rate(timed[warmup_steps:]),
              "products_alone_gflop_s": alone["gflop_s"], "products_alone": alone}
    return {**result, **impl_facts(name)}, model_cfg


def profiled(fn, per=1):
    """``fn()`` under MXNet's profiler (aggregate stats) -> (its result, wall seconds,
    {operator: total ms / ``per``}, largest first, those of at least PROFILE_MIN_MS)."""
    import mxnet as mx
    with tempfile.TemporaryDirectory(prefix="mtx-bench-profile-") as tmp:
        mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                               filename=str(Path(tmp) / "profile.json"))
        mx.profiler.set_state("run")
        tic = time.perf_counter()
        result = fn()
        mx.nd.waitall()
        seconds = time.perf_counter() - tic
        mx.profiler.set_state("stop")
        operators = json.loads(mx.profiler.dumps(format="json"))["Time"]["operator"]
        mx.profiler.dumps(reset=True)
    ms = sorted(((op, s["Total"] / per) for op, s in operators.items()), key=lambda kv: -kv[1])
    return result, seconds, {op: round(v, 1) for op, v in ms if v >= PROFILE_MIN_MS}


def measure_profile(name, model_name, data_name, steps, warmup_steps=WARMUP_STEPS,
                    batching=inputs.BATCHINGS[0]):
    """MXNet's profiler (aggregate stats) over ``steps`` training steps after ``warmup_steps``:
    wall ms per step and {operator: ms per step}, largest first -> (result, ModelConfig)."""
    corpus, model_cfg, data_cfg = inputs.load(model_name, data_name)
    batches = itertools.cycle(inputs.train_batches(corpus, data_cfg, batching))
    step = training_step(name, corpus, model_cfg, data_cfg)
    for b in itertools.islice(batches, warmup_steps):
        float(step(b).asnumpy())

    def run_steps():
        for b in itertools.islice(batches, steps):
            float(step(b).asnumpy())
    _, seconds, operators = profiled(run_steps, per=steps)
    result = {"ms_per_step": round(1000 * seconds / steps, 1), "operators_ms": operators}
    return {**result, **impl_facts(name)}, model_cfg


def measure_decode(name, model_name, data_name, steps, max_sentences=None):
    """Forced-length greedy decoding of the test split -> (sentences/s and seconds, ModelConfig)."""
    from ..vocab import BOS
    corpus, model_cfg, _ = inputs.load(model_name, data_name)
    greedy = greedy_decoder(name, model_cfg)
    batches = inputs.decode_batches(corpus, max_sentences)
    greedy(*batches[0], DECODE_WARMUP_STEPS, BOS)
    tic = time.perf_counter()
    for src, src_len in batches:
        greedy(src, src_len, steps, BOS)
    seconds = time.perf_counter() - tic
    sentences = sum(len(src) for src, _ in batches)
    result = {"sent_s": round(sentences / seconds, 1), "seconds": round(seconds, 2)}
    return {**result, **impl_facts(name)}, model_cfg


def measure_translate(run_dir, beam, max_sentences=None, profile=False):
    """A trained run's real translation of the test split (conf/decode/greedy.yaml for beam 1,
    else conf/decode/beam.yaml with ``beam``) -> (speed and sacreBLEU, the run's ModelConfig).
    With ``profile`` the timed pass runs under MXNet's profiler and the result also has
    {operator: ms over the pass} (the wall time then includes the profiler's cost)."""
    import mxnet as mx
    from ..evaluation import WARMUP_SENTENCES, translate_and_score
    from ..rundir import load_run
    model, tokenizer, data_cfg = load_run(run_dir, mx.cpu())
    model.hybridize(static_alloc=True)
    src, ref = inputs.test_text(data_cfg, max_sentences, inputs.run_seed(run_dir))
    cfg = inputs.decode_config(beam)
    warm = slice(WARMUP_SENTENCES)
    translate_and_score(model, tokenizer, cfg, mx.cpu(), src[warm], ref[warm], data_cfg.tgt_lang)

    def translate():
        return translate_and_score(model, tokenizer, cfg, mx.cpu(), src, ref, data_cfg.tgt_lang)
    operators = None
    if profile:
        (hyps, scores), _, operators = profiled(translate)
    else:
        hyps, scores = translate()
    tokens = output_subwords(tokenizer, hyps)
    result = {"sent_s": scores["sentences_per_second"], "seconds": scores["decode_seconds"],
              "tok_s": round(tokens / scores["decode_seconds"], 1),
              "sacrebleu": scores["sacrebleu"], "precision": "float32", "kernels": kernel_status()}
    if operators is not None:
        result["operators_ms"] = operators
    return result, model.cfg


def timed_translation(translator, tokenizer, src, ref):
    """Translate ``src`` once untimed (its first `WARMUP_SENTENCES` lines), then timed:
    seconds, sentences/s, output subwords/s (EOS included) and sacreBLEU."""
    from ..bleu import sacre_bleu
    from ..evaluation import WARMUP_SENTENCES
    translator.translate(src[:WARMUP_SENTENCES])
    tic = time.perf_counter()
    hyps = translator.translate(src)
    seconds = time.perf_counter() - tic
    subwords = output_subwords(tokenizer, hyps)
    return {"seconds": round(seconds, 2), "sent_s": round(len(src) / seconds, 1),
            "subwords_s": round(subwords / seconds, 1),
            "sacrebleu": round(sacre_bleu(hyps, ref)["score"], 2)}


def measure_run_decode(name, run_dir, max_sentences=None):
    """Implementation ``name`` translating trained run ``run_dir``'s test split with the run's
    weights: beam 5 (conf/decode/beam.yaml) and greedy (conf/decode/greedy.yaml), the same
    sentences and threads for every implementation -> (result, the run's ModelConfig)."""
    from ..config import DataConfig, ModelConfig
    from ..rundir import read_config
    run_dir = Path(run_dir)  # mtx.rundir imports no MXNet: nor does a CTranslate2 process
    model_cfg = read_config(ModelConfig, run_dir / "model.json", "model config")
    data_cfg = read_config(DataConfig, run_dir / "data.json", "data config")
    src, ref = inputs.test_text(data_cfg, max_sentences, inputs.run_seed(run_dir))
    result = {}
    with tempfile.TemporaryDirectory(prefix="mtx-bench-run-") as tmp:
        make, tokenizer = run_translators(name, run_dir, tmp)
        for beam, label in ((5, "beam5"), (1, "greedy")):
            timed = timed_translation(make(inputs.decode_config(beam)), tokenizer, src, ref)
            result.update({f"{label}_{key}": value for key, value in timed.items()})
    return {**result, "sentences": len(src), **impl_facts(name)}, model_cfg


def run_child(command, *args, cwd=None, isa_cap=None):
    """``python -m mtx.bench <command> <args>`` in a new process (in ``cwd``: the mtx package
    found there, e.g. another revision's checkout; with oneDNN capped at ``isa_cap``, e.g.
    'AVX2') -> its JSON report, or {"error": the last line of its stderr}."""
    env = {**os.environ, "DNNL_MAX_CPU_ISA": isa_cap} if isa_cap else None
    with tempfile.TemporaryDirectory(prefix="mtx-bench-") as tmp:
        out = Path(tmp) / "report.json"
        done = subprocess.run([sys.executable, "-m", "mtx.bench", command, *map(str, args),
                               "--out", str(out)], capture_output=True, text=True, cwd=cwd,
                              env=env)
        if done.returncode != 0 or not out.is_file():
            lines = done.stderr.strip().splitlines()
            return {"error": lines[-1] if lines else f"exit code {done.returncode}"}
        return json.loads(out.read_text())


def compare_runs(run_dirs, data_name, steps, rounds, beam=None):
    """Trained runs (e.g. a model and its pruned copy) decoding the test split of their own
    corpus (`runs_corpus`; ``data_name``'s for runs without data.json), each run's source
    subwords from its own tokenizer, greedily for exactly ``steps`` positions, in turn,
    ``rounds`` times, in this one process: the speed of the architectures, independent of how
    long each model's translations are. Each run also gets its decoding step in ms (the
    fastest round over its steps, the encoder's share included) and the step's products by
    part, each timed alone (`decode_step_parts` at the first batch's rows, the batches' mean
    source length and the mean cache length). With ``beam``, then each run's real translation
    of the test split at that beam, in turn, in ``rounds`` rounds too (`beam_rounds`): under
    "beam" in each run's result."""
    import mxnet as mx
    from ..rundir import load_run
    from ..vocab import BOS
    from .impls import cached_greedy
    own = runs_corpus(run_dirs)  # the runs' corpus, checked before any model loads
    if beam and own is None:
        raise ConfigError(f"{run_dirs[0]} has no data.json: --beam translates a run's own test "
                          f"split")
    data_cfg = own or inputs.data_config(data_name)
    source, references = inputs.test_text(data_cfg, seed=inputs.run_seed(run_dirs[0]))
    models, tokenizers, batches = {}, {}, {}
    for run_dir in run_dirs:
        models[run_dir], tokenizers[run_dir], _ = load_run(run_dir, mx.cpu())
        batches[run_dir] = inputs.source_batches(tokenizers[run_dir].encode(source))
        models[run_dir].hybridize(static_alloc=True)
        cached_greedy(models[run_dir], *batches[run_dir][0], DECODE_WARMUP_STEPS, BOS)
    seconds = {run_dir: [] for run_dir in run_dirs}
    for _ in range(rounds):
        for run_dir, model in models.items():
            tic = time.perf_counter()
            for src, src_len in batches[run_dir]:
                cached_greedy(model, src, src_len, steps, BOS)
            seconds[run_dir].append(round(time.perf_counter() - tic, 2))
            logging.getLogger(__name__).info("%s %s s", run_dir, seconds[run_dir][-1])
    base = min(seconds[run_dirs[0]])
    results = {}
    for run_dir, s in seconds.items():
        cfg, run_batches = models[run_dir].cfg, batches[run_dir]
        rows = run_batches[0][0].shape[0]
        src_len = onp.mean([src.shape[1] for src, _ in run_batches])
        parts = decode_parts_speed(decode_step_parts(cfg, rows, int(round(src_len)),
                                                     (steps - 1) // 2))
        results[run_dir] = {
            "seconds": s, "best": min(s), "speedup_vs_first": round(base / min(s), 3),
            "heads": cfg.total_heads,
            "step_ms": round(1000 * min(s) / (steps * len(run_batches)), 3),
            "parts_ms": parts, "products_ms": round(sum(parts.values()), 3)}
    if beam:
        texts = (source, references, data_cfg.tgt_lang)
        for run_dir, result in beam_rounds(models, tokenizers, beam, rounds, texts).items():
            results[run_dir]["beam"] = result
    return results


def runs_corpus(run_dirs):
    """The DataConfig the runs were trained on (the first's; None for runs without data.json);
    ConfigError when they differ in corpus or language pair (their translations would be scored
    against different references)."""
    from ..rundir import RunDir
    configs = [RunDir(run_dir).data_config() for run_dir in run_dirs]
    pairs = {(c.name, c.src_lang, c.tgt_lang) for c in configs if c is not None}
    if len(pairs) > 1:
        raise ConfigError(f"the runs were trained on {' and '.join(map(str, sorted(pairs)))}: "
                          f"compare runs of one corpus and language pair")
    return configs[0]


def beam_rounds(models, tokenizers, beam, rounds, texts):
    """{run: its translation of ``texts`` = (source lines, references, target language), the
    test split of the runs' own corpus, at beam ``beam`` (conf/decode/beam.yaml), the models in
    turn, ``rounds`` times (`translation_rounds`): "seconds" per round, the fastest, its
    speed-up against the first run, sacreBLEU and the output subwords}."""
    import mxnet as mx
    from ..evaluation import translation_rounds
    src, ref, tgt_lang = texts
    timings = translation_rounds(models, tokenizers, inputs.decode_config(beam), mx.cpu(), src,
                                 ref, tgt_lang, rounds)
    base = next(iter(timings.values()))["best"]
    return {run: {"beam_size": beam, "seconds": t["seconds"], "best": t["best"],
                  "speedup_vs_first": round(base / t["best"], 3),
                  "sacrebleu": t["sacrebleu"]["score"], "subwords": t["subwords"]}
            for run, t in timings.items()}
