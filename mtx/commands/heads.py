"""scripts/heads.py: which heads of a trained run matter, and how much faster the model gets
without the rest. Writes into <run>/heads/ (or out_dir=): importance.json/.png, pruning.json/.png
(method=order) or gates.json/.png and gates_training.png (method=l0: learned gates,
`mtx.gates`), pruned/ (a smaller run directory, fine-tuned there when finetune.minutes > 0) and
speed.json."""
import dataclasses
import json
import logging
import math
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as onp
from omegaconf import OmegaConf

from .. import heads
from ..typecheck import is_number, is_whole
from ..corpus import load_corpus
from ..devices import use_numpy_interface
from ..errors import CheckpointError, ConfigError
from ..files import atomic_write_json
from ..gates import train_gates
from ..evaluation import translation_rounds
from ..head_study import GatedScorer, choose_pruning, curves, importance_scores, save_pruned_run
from ..pictures import gate_training_plot, importance_heatmaps, pruning_plot
from ..rundir import RunDir, load_run
from ..training import continue_training
from .common import decoding_options, hydra_command, typed, writable_out_dir

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


def shown(value):
    """A setting as it is typed on the command line (null, not None)."""
    return "null" if value is None else value


def check_value(key, value, hint, *, whole=False, low=None, above=None, high=None,
                optional=False):
    """``key=value`` is a number (whole when ``whole``) within the bounds, or null when
    ``optional``; else a ConfigError that says to give ``hint``."""
    if value is None and optional:
        return
    fits = is_whole(value) if whole else is_number(value) and math.isfinite(value)
    if not (fits and (low is None or value >= low) and (above is None or value > above)
            and (high is None or value <= high)):
        raise ConfigError(f"{key}={shown(value)}: give {hint}")


def check_settings(cfg):
    """Every number and switch of the study has a type and a range that can work, before any
    work (a bad one found after the study would lose it)."""
    for key in ("leave_one_out", "iterative", "iterative_loss"):
        if not isinstance(cfg[key], bool):
            raise ConfigError(f"{key}={cfg[key]}: give true or false")
    checks = [
        ("timing_rounds", "1 or more rounds", dict(whole=True, low=1)),
        ("max_sentences", "1 or more sentences, or null for the whole split",
         dict(whole=True, low=1, optional=True)),
        ("random_orders", "0 or more orders", dict(whole=True, low=0)),
        ("max_bleu_loss", "the val BLEU the pruned model may lose, a number >= 0, e.g. 0.5",
         dict(low=0)),
        ("prune_fraction", "a fraction of the heads from 0 to 1, e.g. 0.5, or null",
         dict(low=0, high=1, optional=True)),
        ("target_heads", "a whole number of heads to keep, or null",
         dict(whole=True, optional=True)),
        ("finetune.minutes", "minutes > 0, or 0 for no fine-tuning", dict(low=0, optional=True)),
        ("finetune.lr", "a learning rate > 0, e.g. 5e-4", dict(above=0)),
        ("finetune.warmup_steps", "1 or more steps", dict(whole=True, low=1)),
        ("l0.minutes", "minutes > 0 (or 0 with l0.max_steps=)", dict(low=0, optional=True)),
        ("l0.max_steps", "1 or more updates, or null", dict(whole=True, low=1, optional=True)),
        ("l0.lr", "a learning rate > 0, e.g. 1e-4", dict(above=0)),
        ("l0.gate_lr", "a learning rate > 0, e.g. 0.05", dict(above=0)),
        ("l0.penalty", "a weight >= 0, e.g. 10", dict(low=0)),
        ("l0.anneal", "the part of the budget over which the aim falls to the target, from 0 "
                      "to 1, e.g. 0.6", dict(low=0, high=1)),
        ("l0.batch_tokens", "8 or more target tokens a step, e.g. 2048",
         dict(whole=True, low=8)),
    ]
    for key, hint, bounds in checks:
        check_value(key, OmegaConf.select(cfg, key), hint, **bounds)
    if cfg.method == "l0" and not (cfg.l0.minutes or cfg.l0.max_steps):
        raise ConfigError(f"l0.minutes={shown(cfg.l0.minutes)}, l0.max_steps="
                          f"{shown(cfg.l0.max_steps)}: the gates need minutes > 0 or max_steps "
                          f">= 1 to learn, e.g. l0.minutes=10")


def setup(cfg):
    """The run, its corpus and every setting of the study, checked before any work."""
    check_settings(cfg)
    decode_cfg, ctx = decoding_options(cfg)
    run_dir = Path(cfg.ckpt)
    model, tokenizer, data_cfg = load_run(run_dir, ctx, cfg.checkpoint)
    if model.cfg.heads_per_layer is not None:
        raise ConfigError(f"ckpt={cfg.ckpt} keeps {model.cfg.heads_per_layer} heads per attention "
                          f"layer (a pruned model): mtx-heads studies a model with the same "
                          f"heads in every layer; give the run it was pruned from")
    out = writable_out_dir(cfg, "heads")
    if (out / "pruned").exists():
        raise ConfigError(f"{out / 'pruned'} holds the pruned model of an earlier study; give "
                          f"this one another out_dir= (or delete that folder)")
    if data_cfg is None:
        raise CheckpointError(f"ckpt={cfg.ckpt} has no data.json (the corpus it was trained on), "
                              f"which the study reads; give a run that mtx-train wrote")
    run_cfg = RunDir(run_dir).train_config()
    if data_cfg.name == "multi30k":
        data_cfg = dataclasses.replace(data_cfg, raw_dir=cfg.raw_dir)
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
    result = train_gates(gated, s.corpus.train_pairs(s.data_cfg.max_pair_len), s.ctx, target,
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
    # built beside pruned/ and renamed to it when whole: an interrupted study leaves no pruned/
    for partial in s.out.glob(".pruned.partial-*"):  # an interrupted study's
        shutil.rmtree(partial, ignore_errors=True)
    staging = s.out / f".pruned.partial-{os.getpid()}"
    models = {"full": s.model}  # its one traced graph serves gated and plain calls
    if s.finetune_cfg is not None:
        models["pruned_before_finetune"] = pruned
        pruned, choice = continue_training(pruned, s.corpus, s.data_cfg, s.finetune_cfg,
                                           s.decode_cfg, staging, s.ctx, s.seed)
        meta["finetune"] = {"minutes": cfg.finetune.minutes, "lr": cfg.finetune.lr,
                            "warmup_steps": cfg.finetune.warmup_steps, "final": choice}
    save_pruned_run(pruned, s.run_dir, staging, meta)
    os.replace(staging, s.out / "pruned")  # setup() refused an existing pruned/
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
