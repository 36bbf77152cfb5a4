#!/usr/bin/env python
"""Which heads matter in a trained run, and how much faster the model gets without the rest.

    python scripts/heads.py ckpt=outputs/train/runs/<run> [leave_one_out=false max_sentences=500]
    python scripts/heads.py ckpt=... prune_fraction=0.5 finetune.minutes=10   # prune, then recover

Writes into <run>/heads/: importance.json and importance.png (gradient sensitivity, attention
confidence, leave-one-out BLEU per layer and head), pruning.json and pruning.png (BLEU vs heads
removed, importance orders against random orders), pruned/ (a smaller run directory that
scripts/translate.py loads; fine-tuned there when finetune.minutes > 0) and speed.json (full vs
pruned decoding, interleaved in one process).
"""
import dataclasses
import json
import logging
import shutil
from pathlib import Path

import hydra
import numpy as onp
from mxnet import npx
from omegaconf import OmegaConf

from mtx import heads
from mtx.cli import one_line_errors, typed
from mtx.config import ConfigError
from mtx.corpus import load_corpus
from mtx.head_study import (GatedScorer, choose_pruning, compare_speed, curves, finetune,
                            importance_scores, save_pruned_run, write_json)
from mtx.pictures import importance_heatmaps, pruning_plot
from mtx.run import load_run
from mtx.devices import resolve_device

log = logging.getLogger("mtx")


def removal_orders(cfg, model, scores, src_ids, tgt_ids, ctx):
    """The non-random orders to try: {name: [(a, h), ...]}."""
    orders = {"importance": heads.removal_order(scores["gradient"])}
    shape = scores["gradient"].shape
    if cfg.iterative:
        orders["iterative"] = heads.iterative_order(
            lambda gates: heads.gradient_importance(model, src_ids, tgt_ids, ctx, gates=gates),
            shape)
    if cfg.iterative_loss:
        loss = heads.gated_loss(model, src_ids, tgt_ids, ctx)
        orders["iterative_loss"] = heads.iterative_order(
            lambda gates: heads.loss_importance(loss, gates), shape)
    return orders


@hydra.main(config_path="../conf", config_name="heads", version_base="1.3")
def main(cfg):
    npx.set_np()
    with one_line_errors():
        ctx, run_dir = resolve_device(cfg.device), Path(cfg.ckpt)
        model, tokenizer, data_cfg = load_run(run_dir, ctx, cfg.checkpoint)
        run_cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
        if data_cfg.name == "multi30k":
            data_cfg = dataclasses.replace(data_cfg, raw_dir=cfg.raw_dir)
        corpus = load_corpus(data_cfg, cfg.cache_dir, run_cfg.seed, tokenizer)
        decode_cfg = typed(cfg, "decode")
        finetune_cfg = dataclasses.replace(
            typed(run_cfg, "train"), lr=cfg.finetune.lr, warmup_steps=cfg.finetune.warmup_steps,
            max_minutes=cfg.finetune.minutes, resume=False, devices=None, kvstore="device"
        ) if cfg.finetune.minutes else None
        all_heads = model.cfg.num_attention_layers * model.cfg.num_heads
        to_remove = (None if cfg.prune_fraction is None
                     else int(round(cfg.prune_fraction * all_heads)))
        if to_remove is not None and to_remove not in heads.curve_steps(all_heads):
            raise ConfigError(f"prune_fraction={cfg.prune_fraction} removes {to_remove} heads, "
                              f"not a step of the pruning curves; pick one that removes one of "
                              f"{heads.curve_steps(all_heads)} of the {all_heads} heads")
    model.hybridize(static_alloc=True)
    out = run_dir / "heads"
    out.mkdir(exist_ok=True)
    sources, references = (x[:cfg.max_sentences] for x in corpus.text[cfg.importance_split])
    src_ids, tgt_ids = (ids[:cfg.max_sentences] for ids in corpus.ids[cfg.importance_split])
    scorer = GatedScorer(model, tokenizer, sources, references, ctx)
    scores = importance_scores(model, corpus, cfg.importance_split, cfg.max_sentences, scorer,
                               ctx, cfg.leave_one_out)
    names = heads.layer_names(model.cfg)
    write_json(out / "importance.json", {"layers": names, **scores})
    importance_heatmaps(scores, names, out / "importance.png")
    shape = scores["gradient"].shape
    orders, points = curves(scorer, shape, removal_orders(cfg, model, scores, src_ids, tgt_ids, ctx),
                            cfg.random_orders)
    write_json(out / "pruning.json", {"orders": orders, "curves": points})
    pruning_plot(points, shape[0] * shape[1], out / "pruning.png")

    with one_line_errors():
        order_name, removed = choose_pruning(points, cfg.max_bleu_loss, to_remove)
    gates = onp.ones(shape)
    for a, h in orders[order_name][:removed]:
        gates[a, h] = 0
    pruned = heads.prune(model, gates, ctx)
    meta = {"removed_heads": removed, "order": order_name}
    shutil.rmtree(out / "pruned", ignore_errors=True)  # no checkpoints of an earlier study
    models = {"full": load_run(run_dir, ctx, cfg.checkpoint)[0]}  # `model` is traced with gates
    if finetune_cfg is not None:
        models["pruned_before_finetune"] = pruned
        pruned, choice = finetune(pruned, corpus, data_cfg, finetune_cfg, decode_cfg,
                                  out / "pruned", ctx, run_cfg.seed)
        meta["finetune"] = {"minutes": cfg.finetune.minutes, "lr": cfg.finetune.lr,
                            "warmup_steps": cfg.finetune.warmup_steps, "final": choice}
    save_pruned_run(pruned, run_dir, out / "pruned", meta)
    models["pruned"] = pruned
    for m in models.values():
        m.hybridize(static_alloc=True)
    test_src, test_ref = corpus.text[cfg.test_split]
    speed = {**meta, "kept_per_layer": pruned.cfg.heads_per_layer,
             "decode": dict(decode_cfg.__dict__), "split": cfg.test_split,
             **compare_speed(models, cfg.timing_rounds, tokenizer, decode_cfg, ctx, test_src,
                             test_ref, data_cfg.tgt_lang)}
    speed["speedup"] = round(speed["full"]["best"] / speed["pruned"]["best"], 3)
    write_json(out / "speed.json", speed)
    print(json.dumps({k: speed[k] for k in ("removed_heads", "speedup")}))


if __name__ == "__main__":
    main()
