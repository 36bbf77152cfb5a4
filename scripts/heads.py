#!/usr/bin/env python
"""Which heads matter in a trained run, and how much faster the model gets without the rest.

    python scripts/heads.py ckpt=outputs/train/runs/<run> [leave_one_out=false max_sentences=500]

Writes into <run>/heads/: importance.json and importance.png (gradient sensitivity, attention
confidence, leave-one-out BLEU per layer and head), pruning.json and pruning.png (BLEU vs heads
removed, importance order against random orders), pruned/ (a smaller run directory that
scripts/translate.py loads) and speed.json (full vs pruned decoding, side by side).
"""
import json
import logging
from pathlib import Path

import hydra
import numpy as onp
from mxnet import npx
from omegaconf import OmegaConf

from mtx import heads
from mtx.cli import one_line_errors, typed
from mtx.corpus import load_corpus
from mtx.head_study import (GatedScorer, curves, importance_scores, most_removable,
                            save_pruned_run, timed_translation, write_json)
from mtx.pictures import importance_heatmaps, pruning_plot
from mtx.run import load_run
from mtx.trainer import resolve_device

log = logging.getLogger("mtx")


@hydra.main(config_path="../conf", config_name="heads", version_base="1.3")
def main(cfg):
    npx.set_np()
    with one_line_errors():
        ctx, run_dir = resolve_device(cfg.device), Path(cfg.ckpt)
        model, tokenizer, data_cfg = load_run(run_dir, ctx, cfg.checkpoint)
        seed = OmegaConf.load(run_dir / ".hydra" / "config.yaml").seed
        if data_cfg.name == "multi30k":
            data_cfg = type(data_cfg)(**{**data_cfg.__dict__, "raw_dir": cfg.raw_dir})
        corpus = load_corpus(data_cfg, cfg.cache_dir, seed, tokenizer)
        decode_cfg = typed(cfg, "decode")
    model.hybridize(static_alloc=True)
    out = run_dir / "heads"
    out.mkdir(exist_ok=True)
    sources, references = (x[:cfg.max_sentences] for x in corpus.text[cfg.importance_split])
    scorer = GatedScorer(model, tokenizer, sources, references, ctx)
    scores = importance_scores(model, corpus, cfg.importance_split, cfg.max_sentences, scorer,
                               ctx, cfg.leave_one_out)
    names = heads.layer_names(model.cfg)
    write_json(out / "importance.json", {"layers": names, **scores})
    importance_heatmaps(scores, names, out / "importance.png")
    src_ids, tgt_ids = (ids[:cfg.max_sentences] for ids in corpus.ids[cfg.importance_split])
    rescore = (lambda gates: heads.gradient_importance(model, src_ids, tgt_ids, ctx, gates=gates)
               ) if cfg.iterative else None
    orders, points = curves(scorer, scores["gradient"], cfg.random_orders, rescore)
    write_json(out / "pruning.json", {"orders": orders, "curves": points})
    pruning_plot(points, model.cfg.num_attention_layers * model.cfg.num_heads, out / "pruning.png")

    order_name, removed = most_removable(points, cfg.max_bleu_loss)
    gates = onp.ones(scores["gradient"].shape)
    for a, h in orders[order_name][:removed]:
        gates[a, h] = 0
    pruned = heads.prune(model, gates, ctx)
    save_pruned_run(pruned, run_dir, out / "pruned", {"removed_heads": removed,
                                                      "order": order_name})
    pruned.hybridize(static_alloc=True)
    full, _, _ = load_run(run_dir, ctx, cfg.checkpoint)  # `model` is traced with gates: keep apart
    full.hybridize(static_alloc=True)
    test_src, test_ref = corpus.text[cfg.test_split]
    speed = {"removed_heads": removed, "order": order_name,
             "kept_per_layer": pruned.cfg.heads_per_layer,
             "decode": dict(decode_cfg.__dict__), "split": cfg.test_split}
    for label, m in (("full", full), ("pruned", pruned), ("full_again", full)):
        speed[label] = timed_translation(m, tokenizer, decode_cfg, ctx, test_src, test_ref,
                                         data_cfg.tgt_lang)
        log.info("%s: %s", label, speed[label])
    full_seconds = min(speed["full"]["seconds"], speed["full_again"]["seconds"])
    speed["speedup"] = round(full_seconds / speed["pruned"]["seconds"], 3)
    write_json(out / "speed.json", speed)
    print(json.dumps({k: speed[k] for k in ("removed_heads", "speedup")}))


if __name__ == "__main__":
    main()
