"""The stages of a head study (mtx-heads; `mtx.commands.heads` prepares its settings ``s``):
importance scores and pruning curves (`score_heads`), the gates to prune by, from those curves
(`ordered_gates`), learned (`learned_gates`) or cut in steps with training between them
(`gradual_cuts`), and the pruned model with its speed (`prune_and_time`). Each writes its
files into ``s.out`` (`mtx.heads.files`)."""
import dataclasses
import logging
import os
import shutil

import numpy as onp

from ..decoding.evaluation import translation_rounds
from ..decoding.search import load_decoder
from ..files import temp_path
from ..runs.pictures import gate_training_plot, importance_heatmaps, pruning_plot
from ..training import continue_training
from ..training.regularisers import Teacher
from . import importance as heads
from .files import write_gates, write_importance, write_pruning, write_speed
from .gates import train_gates, valid_heads
from .study import GatedScorer, choose_pruning, curves, importance_scores, save_pruned_run

log = logging.getLogger(__name__)


def removal_orders(settings, model, scores, src_ids, tgt_ids, ctx):
    """The non-random orders to try: {name: [(a, h), ...]}."""
    orders = {"importance": heads.removal_order(scores["gradient"])}
    shape = scores["gradient"].shape
    if settings.iterative:
        orders["iterative"] = heads.iterative_order(
            lambda gates: heads.gradient_importance(model, src_ids, tgt_ids, ctx, gates=gates),
            shape)
    if settings.iterative_loss:
        loss = heads.gated_loss(model, src_ids, tgt_ids, ctx)
        orders["iterative_loss"] = heads.iterative_order(
            lambda gates: heads.loss_importance(loss, gates), shape)
    return orders


def score_heads(s):
    """Importance scores and pruning curves, written to importance.* and pruning.*: (shape,
    orders, curve points)."""
    split, n = s.settings.importance_split, s.settings.max_sentences
    sources, references = (x[:n] for x in s.corpus.text[split])
    src_ids, tgt_ids = (ids[:n] for ids in s.corpus.ids[split])
    scorer = GatedScorer(s.model, s.tokenizer, sources, references, s.ctx, s.decode_cfg,
                         s.data_cfg)
    scores = importance_scores(s.model, s.corpus, split, n, scorer, s.ctx,
                               s.settings.leave_one_out)
    names = heads.layer_names(s.model.cfg)
    write_importance(s.out, names, scores)
    importance_heatmaps(scores, names, s.out / "importance.png")
    shape = scores["gradient"].shape
    orders = removal_orders(s.settings, s.model, scores, src_ids, tgt_ids, s.ctx)
    orders, points = curves(scorer, shape, orders, s.settings.random_orders,
                            extra_steps=[s.to_remove] if s.to_remove else [])
    write_pruning(s.out, orders, points)
    pruning_plot(points, shape[0] * shape[1], s.out / "pruning.png")
    return shape, orders, points


def ordered_gates(s, shape, orders, points):
    """0/1 gates (A, H) of the importance order chosen on the curves, and what was chosen."""
    order_name, removed = choose_pruning(points, s.settings.max_bleu_loss, s.to_remove)
    gates = onp.ones(shape)
    for a, h in orders[order_name][:removed]:
        gates[a, h] = 0
    return s.model, gates, {"method": "order", "removed_heads": removed, "order": order_name}


def learned_gates(s):
    """Gates learned with an L0 penalty (`mtx.heads.gates`) on a copy of the run fine-tuned with them,
    written to gates.json and gates.png: (the gated copy, its exact gates (A, H), meta)."""
    gated, _, _ = load_decoder(s.run_dir, s.ctx, s.checkpoint)  # its weights change with the gates
    model_cfg, l0 = s.model.cfg, s.settings.l0
    target = model_cfg.total_heads - s.to_remove
    result = train_gates(gated, s.corpus.train_pairs(), s.ctx, target,
                         l0.minutes, lr=l0.lr, gate_lr=l0.gate_lr, penalty=l0.penalty,
                         anneal=l0.anneal, batch_tokens=l0.batch_tokens, seed=s.seed,
                         max_steps=l0.max_steps, log=log.info)
    names = heads.layer_names(model_cfg)
    write_gates(s.out, names, target, result)
    importance_heatmaps({"P(gate open)": result["open_probability"], "gate": result["gates"]},
                        names, s.out / "gates.png")
    gate_training_plot(result["history"], names, model_cfg.heads_by_layer,
                       s.out / "gates_training.png")
    meta = {"method": "l0", "removed_heads": s.to_remove,
            "l0": {**{k: getattr(l0, k) for k in ("minutes", "lr", "gate_lr", "penalty",
                                                    "anneal")},
                   "steps": result["steps"]}}
    return gated, result["gates"], meta


def finetuned(s, model, run_dir):
    """``model`` trained further in the new run directory ``run_dir`` with ``s.finetune_run``,
    distilling from the full model with finetune.distill_weight -> (the model its run chose,
    the choice)."""
    weight = s.settings.finetune.distill_weight
    return continue_training(model, s.corpus, s.finetune_run, run_dir, s.ctx,
                             Teacher(s.model, weight) if weight else None)


def gradual_cuts(s):
    """method=gradual (Michel et al.'s iterative pruning, with training between the cuts): the
    ``s.to_remove`` heads cut in gradual.steps shares, each by the iterative loss order ranked
    on the model as it is then; every cut but the last is followed by its share of the
    fine-tuning (setup gives ``s.finetune_run`` that share), in gradual/cut_K/. The last cut
    and its training are `prune_and_time`'s. -> (the model before the last cut, its gates
    (A, H), meta with every cut's kept heads, numbered as in the full model)."""
    steps, n = s.settings.gradual.steps, s.settings.max_sentences
    src_ids, tgt_ids = (ids[:n] for ids in s.corpus.ids[s.settings.importance_split])
    model, cuts = s.model, []
    A, H = s.model.cfg.num_attention_layers, s.model.cfg.num_heads
    original = [list(range(H)) for _ in range(A)]  # the full model's number of each head
    for k in range(1, steps + 1):
        count = round(s.to_remove * k / steps) - round(s.to_remove * (k - 1) / steps)
        gates = valid_heads([model.cfg.heads_of(a) for a in range(A)], H).astype(float)
        loss = heads.gated_loss(model, src_ids, tgt_ids, s.ctx)
        for a, h in heads.iterative_order(lambda g: heads.loss_importance(loss, g), (A, H),
                                          gates=gates, limit=count):
            gates[a, h] = 0
        original = [[original[a][h] for h in kept]
                    for a, kept in enumerate(heads.kept_heads(gates, model.cfg))]
        cuts.append({"removed": count, "kept_heads": original})
        log.info("gradual pruning, cut %d of %d: %d heads out, %d kept", k, steps, count,
                 sum(map(len, original)))
        if k < steps:
            run_dir = s.out / "gradual" / f"cut_{k}"
            shutil.rmtree(run_dir, ignore_errors=True)  # a dead study's (this one holds out/)
            model, cuts[-1]["final"] = finetuned(s, heads.prune(model, gates, s.ctx), run_dir)
    return model, gates, {"method": "gradual", "removed_heads": s.to_remove,
                          "gradual": {"steps": steps, "cuts": cuts}}


def prune_and_time(s, source, gates, meta):
    """The model ``source`` cut to ``gates`` (fine-tuned if asked) in pruned/, and its speed
    against the full model."""
    pruned = heads.prune(source, gates, s.ctx)
    # built beside pruned/ and renamed to it when whole: an interrupted study leaves no pruned/
    staging = temp_path(s.out / "pruned")
    for partial in s.out.glob(".pruned.*.tmp"):  # a dead study's (this one holds out/)
        shutil.rmtree(partial, ignore_errors=True)
    models = {"full": s.model}  # its one traced graph serves gated and plain calls
    if s.finetune_run is not None:  # a `RunConfig`
        models["pruned_before_finetune"] = pruned
        pruned, choice = finetuned(s, pruned, staging)
        meta["finetune"] = {**dataclasses.asdict(s.settings.finetune), "final": choice}
    save_pruned_run(pruned, s.run_dir, staging, meta)
    os.replace(staging, s.out / "pruned")  # setup() refused an existing pruned/
    models["pruned"] = pruned
    for m in models.values():
        m.hybridize(static_alloc=True)
    split = s.settings.test_split
    test_src, test_ref = s.corpus.text[split]
    speed = {**meta, "kept_per_layer": pruned.cfg.heads_per_layer,
             "decode": dict(s.decode_cfg.__dict__), "split": split,
             **translation_rounds(models, dict.fromkeys(models, s.tokenizer), s.decode_cfg,
                                  s.ctx, test_src, test_ref, s.data_cfg.tgt_lang,
                                  s.settings.timing_rounds)}
    speed["speedup"] = round(speed["full"]["best"] / speed["pruned"]["best"], 3)
    write_speed(s.out, speed)
    return speed
