"""The head study of a trained run (scripts/heads.py): its scores, curves, a pruned model, speed
(its settings: `mtx.heads.settings`)."""
import logging

import numpy as onp
from mxnet import np

from . import importance as heads
from ..decoding.bleu import sacre_bleu
from ..config import ConfigError
from ..data.corpus import DATA_FILE, TOKENIZER_FILES
from ..data.vocabularies import SPM_SIDES
from ..files import atomic_copy
from ..runs.rundir import RunDir
from ..decoding.search import Translator

log = logging.getLogger(__name__)


class GatedScorer:
    """BLEU (greedy: ``decode_cfg.greedy()``) of a split with a given (A, H) 0/1 gate array,
    scored as fits ``data_cfg``'s target language."""

    def __init__(self, model, tokenizer, sources, references, ctx, decode_cfg, data_cfg):
        self.model, self.tokenizer, self.ctx = model, tokenizer, ctx
        self.scoring = (data_cfg.tgt_lang, data_cfg.bleu_tokenize)
        self.greedy = decode_cfg.greedy()
        self.sources, self.references = sources, references
        self.calls = 0

    def __call__(self, gates):
        self.calls += 1
        translator = Translator(self.model, self.tokenizer, self.greedy, self.ctx,
                                head_gates=np.array(gates, ctx=self.ctx))
        return sacre_bleu(translator.translate(self.sources), self.references,
                          *self.scoring)["score"]


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


def curves(scorer, shape, orders, random_orders, extra_steps=()):
    """BLEU vs heads removed (gates of ``shape`` (A, H)) for each of ``orders`` ({name:
    [(a, h), ...]}, "importance" among them) and for ``random_orders`` shuffles of the
    importance order (seeds 1..N), at every 10% of the heads and at ``extra_steps``. Returns
    (all orders, {name: [(removed, BLEU), ...]})."""
    orders = dict(orders)
    for seed in range(1, random_orders + 1):
        shuffled = list(orders["importance"])
        onp.random.RandomState(seed).shuffle(shuffled)
        orders[f"random{seed}"] = shuffled
    return orders, {name: heads.pruning_curve(scorer, shape, order, extra_steps=extra_steps)
                    for name, order in orders.items()}


def choose_pruning(points, max_bleu_loss, heads_to_remove=None):
    """(order name, heads removed) among the non-random orders: with ``heads_to_remove``, the
    order that scores best after removing that many heads (one of the curves' steps); else the
    order and step that remove the most heads within ``max_bleu_loss`` of the full model."""
    ranked = []
    for name, curve in points.items():
        if name.startswith("random"):
            continue
        if heads_to_remove is None:
            base = curve[0][1]
            removed = max(n for n, bleu in curve if base - bleu <= max_bleu_loss)
            ranked.append((removed, name))
        else:
            ranked += [(bleu, name) for n, bleu in curve if n == heads_to_remove]
    if not ranked:
        steps = sorted({n for curve in points.values() for n, _ in curve})
        raise ConfigError(f"no pruning curve has a step with {heads_to_remove} heads removed; "
                         f"pick prune_fraction so that it is one of {steps}")
    best = max(ranked)
    return (best[1], best[0]) if heads_to_remove is None else (best[1], heads_to_remove)


def save_pruned_run(pruned, run_dir, out_dir, meta):
    """A run directory for the pruned model that scripts/translate.py loads like any other."""
    source, pruned_run = RunDir(run_dir), RunDir(out_dir)
    pruned_run.checkpoints.folder.mkdir(parents=True, exist_ok=True)
    for name in (*TOKENIZER_FILES, SPM_SIDES[1], DATA_FILE):
        if (source.path / name).is_file():
            atomic_copy(source.path / name, pruned_run.path / name)
    pruned_run.write_model_config(pruned.cfg)
    pruned_run.checkpoints.save("best", pruned, **meta)
