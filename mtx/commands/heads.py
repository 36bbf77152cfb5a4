"""scripts/heads.py: which heads of a trained run matter, and how much faster the model gets
without the rest. Writes into <run>/heads/ (or out_dir=): importance.json/.png, pruning.json/.png
(method=order) or gates.json/.png and gates_training.png (method=l0: learned gates,
`mtx.gates`), pruned/ (a smaller run directory, fine-tuned there when finetune.minutes > 0) and
speed.json."""
import dataclasses
import json
import logging
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as onp

from .. import heads
from ..config import is_whole
from ..corpus import load_corpus
from ..devices import resolve_device, use_numpy_interface
from ..errors import ConfigError
from ..files import atomic_write_json
from ..gates import train_gates
from ..evaluation import translation_rounds
from ..head_study import GatedScorer, choose_pruning, curves, importance_scores, save_pruned_run
from ..pictures import gate_training_plot, importance_heatmaps, pruning_plot
from ..rundir import RunDir, load_run
from ..training import continue_training
from .common import hydra_command, typed, writable_out_dir

log = logging.getLogger(__name__)


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


def heads_to_remove(cfg, model_cfg):
    """prune_fraction= (or, with method=l0, target_heads=) as a number of heads to remove (None:
    chosen by max_bleu_loss), checked before the study: any count that leaves a head in every
    layer and removes at least one; or, with the importance orders, prune_fraction=0 (none: the
    whole model fine-tuned, the control for a pruned one)."""
    total = model_cfg.total_heads
    if cfg.method not in ("order", "l0"):
        raise ConfigError(f"method={cfg.method} is not a pruning method; use method=order (the "
                          f"importance orders) or method=l0 (learned gates)")
    if cfg.method == "l0":
        if (cfg.target_heads is None) == (cfg.prune_fraction is None):
            raise ConfigError("method=l0 needs exactly one of target_heads= (heads to keep) and "
                              "prune_fraction= (fraction to remove), e.g. prune_fraction=0.75")
        if not ((cfg.l0.minutes or 0) > 0 or (cfg.l0.max_steps or 0) >= 1):
            raise ConfigError(f"l0.minutes={cfg.l0.minutes}, l0.max_steps={cfg.l0.max_steps}: "
                              f"the gates need minutes > 0 or max_steps >= 1 to learn, e.g. "
                              f"l0.minutes=10")
        if not 0 <= cfg.l0.anneal <= 1:
            raise ConfigError(f"l0.anneal={cfg.l0.anneal}: the part of the budget over which the "
                              f"aim falls to the target must be between 0 and 1, e.g. 0.6")
    elif cfg.target_heads is not None:
        raise ConfigError("target_heads= is for method=l0; with the importance orders give "
                          "prune_fraction= (the fraction of heads to remove), e.g. 0.5")
    elif cfg.prune_fraction is None:
        return None
    keep = (cfg.target_heads if cfg.target_heads is not None
            else total - int(round(cfg.prune_fraction * total)))
    layers = model_cfg.num_attention_layers
    control = cfg.method == "order" and cfg.prune_fraction == 0
    if not (control or layers <= keep < total):
        asked = (f"target_heads={cfg.target_heads}" if cfg.target_heads is not None
                 else f"prune_fraction={cfg.prune_fraction}")
        raise ConfigError(f"{asked} would keep {keep} of the {total} heads; keep at least one "
                          f"per attention layer ({layers}) and fewer than all, e.g. "
                          f"prune_fraction=0.5")
    return total - keep


def check_counts(cfg):
    """timing_rounds=, max_sentences= and random_orders= are whole numbers that can work."""
    if not (is_whole(cfg.timing_rounds) and cfg.timing_rounds >= 1):
        raise ConfigError(f"timing_rounds={cfg.timing_rounds}: give 1 or more rounds")
    sentences = cfg.max_sentences
    if sentences is not None and not (is_whole(sentences) and sentences >= 1):
        raise ConfigError(f"max_sentences={cfg.max_sentences}: give 1 or more sentences, or null "
                          f"for the whole split")
    if not (is_whole(cfg.random_orders) and cfg.random_orders >= 0):
        raise ConfigError(f"random_orders={cfg.random_orders}: give 0 or more orders")


def setup(cfg):
    """The run, its corpus and every setting of the study, checked before any work."""
    check_counts(cfg)
    ctx, run_dir = resolve_device(cfg.device), Path(cfg.ckpt)
    decode_cfg = typed(cfg, "decode")
    model, tokenizer, data_cfg = load_run(run_dir, ctx, cfg.checkpoint)
    if model.cfg.heads_per_layer is not None:
        raise ConfigError(f"ckpt={cfg.ckpt} keeps {model.cfg.heads_per_layer} heads per attention "
                          f"layer (a pruned model): mtx-heads studies a model with the same "
                          f"heads in every layer; give the run it was pruned from")
    out = writable_out_dir(cfg, "heads")
    if (out / "pruned").exists():
        raise ConfigError(f"{out / 'pruned'} holds the pruned model of an earlier study; give "
                          f"this one another out_dir= (or delete that folder)")
    run_cfg = RunDir(run_dir).train_config()
    if data_cfg.name == "multi30k":
        data_cfg = dataclasses.replace(data_cfg, raw_dir=cfg.raw_dir)
    if (cfg.finetune.minutes or 0) < 0:
        raise ConfigError(f"finetune.minutes={cfg.finetune.minutes}: give minutes > 0, or 0 for "
                          f"no fine-tuning")
    finetune_cfg = dataclasses.replace(
        typed(run_cfg, "train"), lr=cfg.finetune.lr, warmup_steps=cfg.finetune.warmup_steps,
        max_minutes=cfg.finetune.minutes, resume=False, devices=None, kvstore="device"
    ) if cfg.finetune.minutes else None
    to_remove = heads_to_remove(cfg, model.cfg)
    corpus = load_corpus(data_cfg, cfg.data_dir, run_cfg.seed, tokenizer)
    for key in ("importance_split", "test_split"):
        if cfg[key] not in corpus.text:
            raise ConfigError(f"{key}={cfg[key]}: the run's corpus has the splits "
                              f"{', '.join(corpus.text)}; choose one of them")
    model.hybridize(static_alloc=True)
    return SimpleNamespace(ctx=ctx, run_dir=run_dir, out=out, model=model, tokenizer=tokenizer,
                           data_cfg=data_cfg, corpus=corpus, seed=run_cfg.seed,
                           decode_cfg=decode_cfg, finetune_cfg=finetune_cfg, to_remove=to_remove)


def score_heads(cfg, s):
    """Importance scores and pruning curves, written to importance.* and pruning.*: (shape,
    orders, curve points)."""
    split, n = cfg.importance_split, cfg.max_sentences
    sources, references = (x[:n] for x in s.corpus.text[split])
    src_ids, tgt_ids = (ids[:n] for ids in s.corpus.ids[split])
    scorer = GatedScorer(s.model, s.tokenizer, sources, references, s.ctx, s.decode_cfg)
    scores = importance_scores(s.model, s.corpus, split, n, scorer, s.ctx, cfg.leave_one_out)
    names = heads.layer_names(s.model.cfg)
    atomic_write_json(s.out / "importance.json", {"layers": names, **scores})
    importance_heatmaps(scores, names, s.out / "importance.png")
    shape = scores["gradient"].shape
    orders, points = curves(scorer, shape, removal_orders(cfg, s.model, scores, src_ids, tgt_ids,
                                                          s.ctx), cfg.random_orders,
                            extra_steps=[s.to_remove] if s.to_remove else [])
    atomic_write_json(s.out / "pruning.json", {"orders": orders, "curves": points})
    pruning_plot(points, shape[0] * shape[1], s.out / "pruning.png")
    return shape, orders, points


def ordered_gates(cfg, s, shape, orders, points):
    """0/1 gates (A, H) of the importance order chosen on the curves, and what was chosen."""
    order_name, removed = choose_pruning(points, cfg.max_bleu_loss, s.to_remove)
    gates = onp.ones(shape)
    for a, h in orders[order_name][:removed]:
        gates[a, h] = 0
    return s.model, gates, {"method": "order", "removed_heads": removed, "order": order_name}


def learned_gates(cfg, s):
    """Gates learned with an L0 penalty (`mtx.gates`) on a copy of the run fine-tuned with them,
    written to gates.json and gates.png: (the gated copy, its exact gates (A, H), meta)."""
    gated, _, _ = load_run(s.run_dir, s.ctx, cfg.checkpoint)  # its weights change with the gates
    gated.hybridize(static_alloc=True)
    model_cfg = s.model.cfg
    target = model_cfg.total_heads - s.to_remove
    result = train_gates(gated, s.corpus.train_pairs(s.data_cfg.max_len), s.ctx, target,
                         cfg.l0.minutes, lr=cfg.l0.lr, gate_lr=cfg.l0.gate_lr,
                         penalty=cfg.l0.penalty, anneal=cfg.l0.anneal,
                         batch_tokens=cfg.l0.batch_tokens,
                         seed=s.seed, max_steps=cfg.l0.max_steps, log=log.info)
    names = heads.layer_names(model_cfg)
    atomic_write_json(s.out / "gates.json", {
        "layers": names, "target_heads": target, "steps": result["steps"],
        **{k: result[k].tolist() for k in ("log_alpha", "open_probability", "gates")},
        "history": result["history"]})
    importance_heatmaps({"P(gate open)": result["open_probability"], "gate": result["gates"]},
                        names, s.out / "gates.png")
    gate_training_plot(result["history"], names, model_cfg.heads_by_layer,
                       s.out / "gates_training.png")
    meta = {"method": "l0", "removed_heads": s.to_remove,
            "l0": {**{k: cfg.l0[k] for k in ("minutes", "lr", "gate_lr", "penalty", "anneal")},
                   "steps": result["steps"]}}
    return gated, result["gates"], meta


def prune_and_time(cfg, s, source, gates, meta):
    """The model ``source`` cut to ``gates`` (fine-tuned if asked) in pruned/, and its speed
    against the full model."""
    pruned = heads.prune(source, gates, s.ctx)
    shutil.rmtree(s.out / "pruned", ignore_errors=True)  # no checkpoints of an earlier study
    models = {"full": s.model}  # its one traced graph serves gated and plain calls
    if s.finetune_cfg is not None:
        models["pruned_before_finetune"] = pruned
        pruned, choice = continue_training(pruned, s.corpus, s.data_cfg, s.finetune_cfg,
                                           s.decode_cfg, s.out / "pruned", s.ctx, s.seed)
        meta["finetune"] = {"minutes": cfg.finetune.minutes, "lr": cfg.finetune.lr,
                            "warmup_steps": cfg.finetune.warmup_steps, "final": choice}
    save_pruned_run(pruned, s.run_dir, s.out / "pruned", meta)
    models["pruned"] = pruned
    for m in models.values():
        m.hybridize(static_alloc=True)
    test_src, test_ref = s.corpus.text[cfg.test_split]
    speed = {**meta, "kept_per_layer": pruned.cfg.heads_per_layer,
             "decode": dict(s.decode_cfg.__dict__), "split": cfg.test_split,
             **translation_rounds(models, dict.fromkeys(models, s.tokenizer), s.decode_cfg,
                                  s.ctx, test_src, test_ref, s.data_cfg.tgt_lang,
                                  cfg.timing_rounds)}
    speed["speedup"] = round(speed["full"]["best"] / speed["pruned"]["best"], 3)
    atomic_write_json(s.out / "speed.json", speed)
    return speed


def study_heads(cfg):
    """The whole study of the run ``cfg.ckpt``; returns speed.json's dict."""
    use_numpy_interface()
    s = setup(cfg)
    if cfg.method == "l0":
        speed = prune_and_time(cfg, s, *learned_gates(cfg, s))
    else:
        speed = prune_and_time(cfg, s, *ordered_gates(cfg, s, *score_heads(cfg, s)))
    print(json.dumps({k: speed[k] for k in ("removed_heads", "speedup")}))
    return speed


# mtx-heads and scripts/heads.py
main = hydra_command("heads", study_heads)
