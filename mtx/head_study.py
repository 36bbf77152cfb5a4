"""The head study of a trained run (scripts/heads.py): scores, curves, a pruned model, speed."""
import json
import logging
import shutil

import numpy as onp
from mxnet import np

from . import checkpoint as ckpt
from . import heads
from .bleu import sacre_bleu
from .config import DecodeConfig
from .evaluation import translate_and_score
from .search import Translator

log = logging.getLogger(__name__)
GREEDY = DecodeConfig(beam_size=1, length_penalty=0.0)


class GatedScorer:
    """BLEU (greedy) of a split with a given (A, H) 0/1 gate array."""

    def __init__(self, model, tokenizer, sources, references, ctx):
        self.model, self.tokenizer, self.ctx = model, tokenizer, ctx
        self.sources, self.references = sources, references
        self.calls = 0

    def __call__(self, gates):
        self.calls += 1
        translator = Translator(self.model, self.tokenizer, GREEDY, self.ctx,
                                head_gates=np.array(gates, ctx=self.ctx))
        return sacre_bleu(translator.translate(self.sources), self.references)["score"]


def importance_scores(model, corpus, split, max_sentences, scorer, ctx, leave_one_out):
    src_ids, tgt_ids = (ids[:max_sentences] for ids in corpus.ids[split])
    scores = {"gradient": heads.gradient_importance(model, src_ids, tgt_ids, ctx),
              "confidence": heads.confidence(model, src_ids, tgt_ids, ctx)}
    if leave_one_out:
        shape = scores["gradient"].shape
        base, drop = heads.leave_one_out(scorer, shape)
        scores["leave_one_out_bleu"] = drop
        log.info("leave-one-out done: full-model BLEU %.2f", base)
    return scores


def curves(scorer, importance, random_orders, iterative_importance=None):
    """BLEU vs heads removed for the importance order, the iterative order (re-scored with
    ``iterative_importance(gates)`` after each step, when given) and ``random_orders`` random
    orders. Returns ({order name: [(a, h), ...]}, {order name: [(removed, BLEU), ...]})."""
    shape = importance.shape
    orders = {"importance": heads.removal_order(importance)}
    if iterative_importance is not None:
        orders["iterative"] = heads.iterative_order(iterative_importance, shape)
    for seed in range(1, random_orders + 1):
        shuffled = list(orders["importance"])
        onp.random.RandomState(seed).shuffle(shuffled)
        orders[f"random{seed}"] = shuffled
    return orders, {name: heads.pruning_curve(scorer, shape, order)
                    for name, order in orders.items()}


def most_removable(points, max_bleu_loss):
    """(order name, heads removed): the non-random order and step that remove the most heads
    within ``max_bleu_loss`` of the full model's score."""
    best = None
    for name, curve in points.items():
        if name.startswith("random"):
            continue
        base = curve[0][1]
        removed = max(n for n, bleu in curve if base - bleu <= max_bleu_loss)
        if best is None or removed > best[1]:
            best = (name, removed)
    return best


def save_pruned_run(pruned, run_dir, out_dir, meta):
    """A run directory for the pruned model that scripts/translate.py loads like any other."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "checkpoints").mkdir(exist_ok=True)
    for name in ("spm.model", "toy_symbols.json", "data.json"):
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, out_dir / name)
    ckpt.save_model_config(pruned.cfg, out_dir)
    ckpt.save_params(pruned, out_dir / "checkpoints" / "best.params", **meta)


def timed_translation(model, tokenizer, decode_cfg, ctx, sources, references, tgt_lang):
    """`translate_and_score` after a short warm-up (the first shapes are slow)."""
    Translator(model, tokenizer, decode_cfg, ctx).translate(sources[:16])
    _, scores = translate_and_score(model, tokenizer, decode_cfg, ctx, sources, references,
                                    tgt_lang)
    return {"seconds": scores["decode_seconds"], "sacrebleu": scores["sacrebleu"]}


def write_json(path, obj):
    ckpt.atomic_write_text(path, json.dumps(obj, indent=1, default=lambda a: onp.asarray(a).tolist()))
