#!/usr/bin/env python
"""Training throughput with head gates as an input of the traced graph (as mtx ships it) against
the same model traced without gates: six interleaved rounds of 15 steps at the bench's
configuration (conf/model/small.yaml, ~4096-token Multi30k batches), median ratio printed.

    OMP_NUM_THREADS=2 .venv/bin/python scripts/bench_gates.py
"""
import itertools, time, statistics
import mxnet as mx
from mxnet import npx
npx.set_np()
from mtx.bench.inputs import load, train_batches
from mtx.config import TrainConfig
from mtx.devices import seed_everything
from mtx.parallel import DataParallel
from mtx.training.build import build_pieces
from mtx.training.steps import train_step

corpus, model_cfg, data_cfg = load("small", "multi30k_en_de")
batches = train_batches(corpus, data_cfg)
cfg, par = TrainConfig(), DataParallel([mx.cpu()])
pieces = {}
for kind in ("gates", "nogates"):
    seed_everything(1)
    pieces[kind] = build_pieces(model_cfg, cfg, [mx.cpu()], par.trainer_kvstore)
    if kind == "nogates":
        pieces[kind].model._gates = lambda g, like: g
steps = {k: itertools.count(1) for k in pieces}
def block(kind, start, n):
    tic = time.perf_counter(); tokens = 0
    for b in batches[start:start + n]:
        float(train_step(pieces[kind], par, b, next(steps[kind]), cfg)[0])
        tokens += b.num_tgt_tokens
    return tokens / (time.perf_counter() - tic)
for kind in pieces:
    block(kind, 0, 20)  # warm-up
ratios = []
for r in range(6):
    order = ("gates", "nogates") if r % 2 == 0 else ("nogates", "gates")
    rate = {k: block(k, 20 + 15 * r, 15) for k in order}
    ratios.append(rate["gates"] / rate["nogates"])
    print(r, {k: round(v) for k, v in rate.items()}, round(ratios[-1], 3), flush=True)
print("median gates/nogates", round(statistics.median(ratios), 3))
