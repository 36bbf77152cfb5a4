#!/usr/bin/env python
"""Throughput of mtx against its peers, side by side in one run (`make bench`).

    python scripts/bench.py [--seconds 60] [--impls mtx,mtx-bf16,gluonnlp,d2l] [--run RUN_DIR]

Common configuration: width 256, 4 heads, FFN 1024, 3+3 layers, dropout 0.1, untied embeddings,
Multi30k en->de with one joint 8000-subword vocabulary, the same ~4096-token batches for every
implementation, fp32 (mtx-bf16: mtx with train.precision=bfloat16), OMP_NUM_THREADS threads.
Each measurement runs in its own process (clean peak memory). Training: target tokens/s after 20
warm-up steps, median of >= 10 s windows, and model FLOPs utilisation against the matrix-multiply
peak measured here. Decoding: greedy, batch 64, the same forced number of steps for all, over
test_2016_flickr. With --run, the trained run's real beam-1 and beam-5 translation of
test_2016_flickr is timed too.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as onp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CFG = dict(vocab=8000, d_model=256, heads=4, ffn=1024, layers=3, dropout=0.1)


def corpus():
    from mtx.config import DataConfig
    from mtx.corpus import load_corpus
    return load_corpus(DataConfig(raw_dir=os.environ.get("MTX_MULTI30K_DIR")),
                       os.environ.get("MTX_CACHE", ROOT / ".cache"), seed=1)


def train_flops(b, d=256, ffn=1024, layers=3, vocab=8000):
    """Model FLOPs of one training step on real tokens (fwd + bwd = 3 x fwd): dense layers
    6 x params x tokens, attention products 3 x 4 x d x Tq x Tk per layer (as in shared/peers)."""
    enc, dec, out = layers * (4 * d * d + 2 * d * ffn), layers * (8 * d * d + 2 * d * ffn), d * vocab
    s, t = b.src_valid_len.astype(onp.int64), b.tgt_valid_len.astype(onp.int64)
    dense = 6 * (enc * s.sum() + (dec + out) * t.sum())
    attn = 12 * d * layers * ((s * s).sum() + (t * t).sum() + (t * s).sum())
    return float(dense + attn)


class MtxImpl:
    def __init__(self, cfg, corpus_, precision="float32"):
        import mxnet as mx
        from mtx.config import DataConfig, DecodeConfig, ModelConfig, TrainConfig
        from mtx.parallel import DataParallel
        from mtx.trainer import Fit
        model_cfg = ModelConfig(num_hiddens=cfg["d_model"], num_heads=cfg["heads"],
                                ffn_num_hiddens=cfg["ffn"], num_encoder_layers=cfg["layers"],
                                num_decoder_layers=cfg["layers"], dropout=cfg["dropout"],
                                attention_dropout=cfg["dropout"], tie_embeddings=False,
                                vocab_size=cfg["vocab"])
        self.fit = Fit(corpus_, model_cfg, DataConfig(), TrainConfig(precision=precision),
                       DecodeConfig(), "/tmp/mtx-bench-run", DataParallel([mx.cpu()]), seed=1)
        self.model = self.fit.model

    def train_step(self, b):
        return self.fit.train_step(b)[0]  # (nll, finite flag)

    def greedy(self, src, src_len, steps, bos, recompute=False):
        from mxnet import nd, np
        from mtx.masks import causal_valid_len
        if not recompute:
            return cached_greedy(self.model, src, src_len, steps, bos)
        src, src_len = np.array(src), np.array(src_len)
        y = np.full((src.shape[0],), bos, dtype="int32")
        memory, prefix = self.model.encode(src, src_len), [y]
        for _ in range(steps):  # the whole prefix through the decoder at every step
            Y = self.model.tgt_embed(np.stack(prefix, axis=1))
            hidden = self.model.decoder(Y, memory, src_len, causal_valid_len(nd, Y, src_len))
            y = self.model.output(hidden[:, -1:])[:, 0].argmax(axis=-1).astype("int32")
            prefix.append(y)
        return np.stack(prefix[1:], axis=1).asnumpy()


def cached_greedy(model, src, src_len, steps, bos):
    """Greedy decoding with mtx's key/value cache for exactly ``steps`` positions (no early
    stop, so every model does the same work): (B, steps) token ids."""
    from mxnet import np
    src, src_len = np.array(src), np.array(src_len)
    y, outs = np.full((src.shape[0],), bos, dtype="int32"), []
    state = model.init_state(src, src_len)
    for _ in range(steps):
        y = model.step(y, state)[0].argmax(axis=-1).astype("int32")
        outs.append(y)
    return np.stack(outs, axis=1).asnumpy()


def test_batches(ids, batch_size=64):
    """test_2016_flickr source ids -> [(src (B, S) int32 with EOS, lengths (B,))]."""
    from mtx.vocab import EOS
    batches = []
    for start in range(0, len(ids), batch_size):
        rows = [s + [EOS] for s in ids[start:start + batch_size]]
        src = onp.zeros((len(rows), max(map(len, rows))), "int32")
        for r, s in enumerate(rows):
            src[r, :len(s)] = s
        batches.append((src, onp.array([len(s) for s in rows], "int32")))
    return batches


def compare_runs(run_dirs, steps, rounds):
    """Trained runs (e.g. a model and its pruned copy) decoding test_2016_flickr greedily for
    exactly ``steps`` positions, in turn, ``rounds`` times, in this one process: the speed of
    the architectures, independent of how long each model's translations are."""
    import mxnet as mx
    from mtx.run import load_run
    from mtx.vocab import BOS
    batches = test_batches(corpus().ids["test_2016_flickr"][0])
    models = {}
    for run_dir in run_dirs:
        models[run_dir] = load_run(run_dir, mx.cpu())[0]
        models[run_dir].hybridize(static_alloc=True)
        cached_greedy(models[run_dir], *batches[0], 4, BOS)  # warm-up
    seconds = {run_dir: [] for run_dir in run_dirs}
    for _ in range(rounds):
        for run_dir, model in models.items():
            tic = time.perf_counter()
            for src, src_len in batches:
                cached_greedy(model, src, src_len, steps, BOS)
            seconds[run_dir].append(round(time.perf_counter() - tic, 2))
            print(run_dir, seconds[run_dir][-1], file=sys.stderr, flush=True)
    base = min(seconds[run_dirs[0]])
    return {run_dir: {"seconds": s, "best": min(s), "speedup_vs_first": round(base / min(s), 3),
                      "heads": sum(map(models[run_dir].cfg.heads_of,
                                       range(models[run_dir].cfg.num_attention_layers)))}
            for run_dir, s in seconds.items()}


def make_impl(name, corpus_):
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_peers
    if name.startswith("mtx"):
        return MtxImpl(CFG, corpus_, "bfloat16" if name == "mtx-bf16" else "float32")
    return {"gluonnlp": bench_peers.GluonNLPPeer, "d2l": bench_peers.D2LPeer}[name](CFG, True)


def training_setup(name):
    """The common training batches (~4096 padded tokens) and the impl ``name`` built on them."""
    from mtx.batching import bucket_batches
    c = corpus()
    return bucket_batches(*c.train_pairs(128), 4096, shuffle=True, seed=1), make_impl(name, c)


def worker_train(name, seconds):
    batches, impl = training_setup(name)
    steps, i, measured = [], 0, 0.0
    while len(steps) < 20 or measured < seconds:
        b = batches[i % len(batches)]
        tic = time.perf_counter()
        float(impl.train_step(b).asnumpy())  # synchronise: the step is done
        dt = time.perf_counter() - tic
        steps.append((dt, b.num_tgt_tokens, train_flops(b)))
        measured += dt if len(steps) > 20 else 0
        i += 1
    windows, cur = [], []
    for s in steps[20:]:
        cur.append(s)
        if sum(x[0] for x in cur) >= 10:
            windows.append(cur)
            cur = []
    rate = lambda w, k: sum(x[k] for x in w) / sum(x[0] for x in w)
    windows = windows or [steps[20:]]  # a run shorter than one window is one window
    return {"tok_s": round(float(onp.median([rate(w, 1) for w in windows])), 1),
            "tok_s_windows": [round(rate(w, 1)) for w in windows],
            "gflop_s": round(rate(steps[20:], 2) / 1e9, 1), "steps": len(steps)}


def worker_profile(name, steps):
    """MXNet's profiler (aggregate stats) over ``steps`` training steps of one impl after 20
    warm-up steps: wall ms per step and {operator: ms per step}, largest first."""
    import mxnet as mx
    batches, impl = training_setup(name)
    for b in batches[:20]:
        float(impl.train_step(b).asnumpy())
    mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                           filename=f"/tmp/mtx-profile-{os.getpid()}.json")
    mx.profiler.set_state("run")
    tic = time.perf_counter()
    for b in batches[20:20 + steps]:
        float(impl.train_step(b).asnumpy())
    seconds = time.perf_counter() - tic
    mx.profiler.set_state("stop")
    operators = json.loads(mx.profiler.dumps(format="json"))["Time"]["operator"]
    ms = sorted(((op, s["Total"] / steps) for op, s in operators.items()), key=lambda kv: -kv[1])
    return {"ms_per_step": round(1000 * seconds / steps, 1),
            "operators_ms": {op: round(v, 1) for op, v in ms if v >= 1.0}}


def profile_table(profiles):
    """Side-by-side markdown table of `worker_profile` results: operator rows, impl columns."""
    names = list(profiles)
    ops = list(dict.fromkeys(op for p in profiles.values() for op in p.get("operators_ms", {})))
    lines = ["| ms per step | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
             "| **whole step (wall, under the profiler)** | "
             + " | ".join(str(p.get("ms_per_step", p.get("error"))) for p in profiles.values())
             + " |"]
    for op in ops:
        lines.append(f"| {op} | " + " | ".join(str(p.get("operators_ms", {}).get(op, "-"))
                                             for p in profiles.values()) + " |")
    return "\n".join(lines)


def worker_decode(name, steps, batch_size=64):
    from mtx.vocab import BOS
    c = corpus()
    ids = c.ids["test_2016_flickr"][0]
    impl = make_impl(name.replace("-recompute", ""), c)
    kwargs = {"recompute": True} if name.endswith("-recompute") else {}
    batches = test_batches(ids, batch_size)
    impl.greedy(*batches[0], 4, BOS, **kwargs)  # warm-up
    tic = time.perf_counter()
    for src, src_len in batches:
        impl.greedy(src, src_len, steps, BOS, **kwargs)
    seconds = time.perf_counter() - tic
    return {"sent_s": round(len(ids) / seconds, 1), "seconds": round(seconds, 2)}


def worker_translate(run_dir, beam):
    import mxnet as mx
    from mtx.config import DecodeConfig
    from mtx.evaluation import translate_and_score
    from mtx.run import load_run
    model, tokenizer, data_cfg = load_run(run_dir, mx.cpu())
    model.hybridize(static_alloc=True)
    from mtx.multi30k import load_multi30k
    src, ref = load_multi30k(data_cfg.src_lang, data_cfg.tgt_lang,
                             os.environ.get("MTX_MULTI30K_DIR"), ROOT / ".cache")["test_2016_flickr"]
    cfg = DecodeConfig(beam_size=beam, length_penalty=1.0 if beam > 1 else 0.0)
    translate_and_score(model, tokenizer, cfg, mx.cpu(), src[:32], ref[:32], data_cfg.tgt_lang)
    hyps, scores = translate_and_score(model, tokenizer, cfg, mx.cpu(), src, ref, data_cfg.tgt_lang)
    tokens = sum(len(t) for t in tokenizer.encode(hyps)) + len(hyps)
    return {"sent_s": scores["sentences_per_second"], "seconds": scores["decode_seconds"],
            "tok_s": round(tokens / scores["decode_seconds"], 1),
            "sacrebleu": scores["sacrebleu"]}


def gemm_peak(dtype="float32"):
    """Best of 10 2048^3 FullyConnected, GFLOP/s. ``bfloat16`` runs through oneDNN with MXNet's
    own bfloat16 dtype (`mxnet.contrib.amp.amp.bfloat16`, a structured numpy dtype): the string
    'bfloat16' is not understood by `amp_cast` in the 1.9.1 wheel, this dtype is."""
    import mxnet as mx
    a, w = mx.nd.random.normal(shape=(2048, 2048)), mx.nd.random.normal(shape=(2048, 2048))
    if dtype == "bfloat16":
        from mxnet.contrib.amp.amp import bfloat16
        a, w = mx.nd.amp_cast(a, dtype=bfloat16), mx.nd.amp_cast(w, dtype=bfloat16)
    best = 1e9
    for _ in range(10):
        tic = time.perf_counter()
        mx.nd.FullyConnected(a, w, num_hidden=2048, no_bias=True).wait_to_read()
        best = min(best, time.perf_counter() - tic)
    return 2 * 2048 ** 3 / best / 1e9


def run_worker(*args):
    done = subprocess.run([sys.executable, __file__, "--worker", *map(str, args)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def available(name):
    module = {"gluonnlp": "gluonnlp", "d2l": "d2l"}.get(name)
    if module is None:
        return True
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60, help="measured training seconds per peer")
    ap.add_argument("--steps", type=int, default=64, help="forced greedy decoding steps")
    ap.add_argument("--impls", default="mtx,mtx-bf16,gluonnlp,d2l")
    ap.add_argument("--run", help="a trained run: also time its beam 1 / beam 5 translation")
    ap.add_argument("--out", default=str(ROOT / "outputs" / "bench.json"))
    ap.add_argument("--compare-runs", help="comma-separated run directories (e.g. a run and its "
                    "heads/pruned): only time their forced-step greedy decoding side by side")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --compare-runs")
    ap.add_argument("--profile", metavar="IMPLS", help="comma-separated impls: only profile "
                    "their training steps (MXNet profiler) and print operators side by side")
    ap.add_argument("--profile-steps", type=int, default=20, help="profiled steps per impl")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compare_runs:
        from mxnet import npx
        npx.set_np()
        result = compare_runs(args.compare_runs.split(","), args.steps, args.rounds)
        print(json.dumps(result, indent=1))
        return
    if args.profile:
        profiles = {name: run_worker("profile", name, args.profile_steps)
                    for name in args.profile.split(",") if available(name)}
        print(profile_table(profiles))
        return
    if args.worker:
        kind, *rest = args.worker
        if rest[0] != "gluonnlp":  # gluonnlp 0.10 runs on the legacy ndarray API
            from mxnet import npx
            npx.set_np()
        result = {"train": lambda: worker_train(rest[0], float(rest[1])),
                  "decode": lambda: worker_decode(rest[0], int(rest[1])),
                  "profile": lambda: worker_profile(rest[0], int(rest[1])),
                  "translate": lambda: worker_translate(rest[0], int(rest[1]))}[kind]()
        result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        print(json.dumps(result))
        return
    impls = args.impls.split(",")
    report = {"config": CFG, "threads": os.environ.get("OMP_NUM_THREADS"),
              "gemm_peak_gflop_s": round(gemm_peak(), 1),
              "gemm_peak_bf16_gflop_s": round(gemm_peak("bfloat16"), 1), "train": {}, "decode": {}}
    for name in impls:
        if not available(name):
            report["train"][name] = report["decode"][name] = {"skipped": f"{name} not installed"}
            continue
        report["train"][name] = run_worker("train", name, args.seconds)
        print(name, "train", report["train"][name], file=sys.stderr)
    for name in impls + (["mtx-recompute"] if "mtx" in impls else []):
        if name in report["decode"]:
            continue
        report["decode"][name] = run_worker("decode", name, args.steps)
        print(name, "decode", report["decode"][name], file=sys.stderr)
    if args.run:
        report["translate"] = {f"beam{k}": run_worker("translate", args.run, k) for k in (1, 5)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(table(report))


def table(report):
    peak = report["gemm_peak_gflop_s"]
    mtx_train, mtx_dec = report["train"].get("mtx", {}), report["decode"].get("mtx", {})
    bf16_train = report["train"].get("mtx-bf16", {})
    lines = [f"matrix-multiply peak: {peak} GFLOP/s fp32, {report['gemm_peak_bf16_gflop_s']} "
             f"GFLOP/s bfloat16; threads: {report['threads']}", "",
             "| implementation | train tok/s | MFU | peak RSS MB | mtx / it (train) "
             "| mtx-bf16 / it (train) | greedy sent/s | mtx / it (decode) |",
             "|---|---|---|---|---|---|---|---|"]
    for name in report["decode"]:
        t, d = report["train"].get(name, {}), report["decode"][name]
        ratio = lambda a, b, k: f"{a[k] / b[k]:.2f}" if k in a and k in b else "-"
        mfu = f"{100 * t['gflop_s'] / peak:.0f}%" if "gflop_s" in t else "-"
        lines.append(f"| {name} | {t.get('tok_s', t.get('skipped', t.get('error', '-')))} | {mfu} "
                     f"| {t.get('peak_rss_mb', d.get('peak_rss_mb', '-'))} "
                     f"| {ratio(mtx_train, t, 'tok_s')} | {ratio(bf16_train, t, 'tok_s')} "
                     f"| {d.get('sent_s', d.get('skipped', d.get('error')))} "
                     f"| {ratio(mtx_dec, d, 'sent_s')} |")
    for beam, r in report.get("translate", {}).items():
        lines.append(f"\n{beam}: {r.get('sent_s')} sentences/s, {r.get('tok_s')} tokens/s, "
                     f"{r.get('seconds')} s for test_2016_flickr, sacreBLEU {r.get('sacrebleu')}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
