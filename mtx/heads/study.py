"""The head study of a trained run (scripts/heads.py): its settings, scores, curves, a pruned
model, speed."""
import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as onp
from mxnet import np

from . import importance as heads
from ..decoding.bleu import sacre_bleu
from ..config import ConfigError
from ..typecheck import check_settings, setting, shown
from ..data.corpus import DATA_FILE, TOKENIZER_FILES
from ..files import atomic_copy
from ..runs.rundir import RunDir
from ..decoding.search import Translator

log = logging.getLogger(__name__)
METHODS = ("order", "l0")  # importance orders and their curves; learned gates (`mtx.heads.gates`)


@dataclass(frozen=True)
class FineTuning:
    """conf/heads.yaml ``finetune``: the pruned model trained further on the training split."""
    minutes: Optional[float] = setting(0, "minutes > 0, or 0 for no fine-tuning", low=0)
    lr: float = setting(5e-4, "a learning rate > 0, e.g. 5e-4", above=0)
    warmup_steps: int = setting(100, "1 or more steps", low=1)

    def __post_init__(self):
        check_settings(self, "finetune.")


@dataclass(frozen=True)
class GateTraining:
    """conf/heads.yaml ``l0`` (method=l0): the run fine-tuned with a hard-concrete gate per head
    (`mtx.heads.gates.train_gates`)."""
    minutes: Optional[float] = setting(10, "minutes > 0 (or 0 with l0.max_steps=)", low=0)
    max_steps: Optional[int] = setting(None, "1 or more updates, or null", low=1)
    lr: float = setting(1e-4, "a learning rate > 0, e.g. 1e-4", above=0)
    gate_lr: float = setting(0.05, "a learning rate > 0, e.g. 0.05", above=0)
    penalty: float = setting(10.0, "a weight >= 0, e.g. 10", low=0)
    anneal: float = setting(0.6, "the part of the budget over which the aim falls to the target, "
                                 "from 0 to 1, e.g. 0.6", low=0, high=1)
    batch_tokens: int = setting(2048, "8 or more target tokens a step, e.g. 2048", low=8)

    def __post_init__(self):
        check_settings(self, "l0.")


@dataclass(frozen=True)
class StudySettings:
    """The settings of the head study in conf/heads.yaml (the run, its checkpoint, decode.*,
    device= and the paths are the command's), checked before any work: a bad one found after
    the study would lose it."""
    method: str = "order"
    target_heads: Optional[int] = setting(None, "a whole number of heads to keep, or null")
    importance_split: str = "val"
    test_split: Optional[str] = None  # None: the run's first test set (Multi30k's test_2016_flickr)
    max_sentences: Optional[int] = setting(
        None, "1 or more sentences, or null for the whole split", low=1)
    leave_one_out: bool = setting(True, "true or false")
    random_orders: int = setting(3, "0 or more orders", low=0)
    iterative: bool = setting(True, "true or false")
    iterative_loss: bool = setting(True, "true or false")
    max_bleu_loss: float = setting(
        0.5, "the val BLEU the pruned model may lose, a number >= 0, e.g. 0.5", low=0)
    prune_fraction: Optional[float] = setting(
        None, "a fraction of the heads from 0 to 1, e.g. 0.5, or null", low=0, high=1)
    timing_rounds: int = setting(2, "1 or more rounds", low=1)
    finetune: FineTuning = field(default_factory=FineTuning)
    l0: GateTraining = field(default_factory=GateTraining)

    @classmethod
    def from_config(cls, cfg):
        """The study's keys of the composed heads config (a DictConfig)."""
        from omegaconf import OmegaConf
        groups = {"finetune": FineTuning, "l0": GateTraining}
        values = {f.name: cfg[f.name] for f in dataclasses.fields(cls) if f.name not in groups}
        return cls(**values, **{name: group(**OmegaConf.to_container(cfg[name], resolve=True))
                                for name, group in groups.items()})

    def __post_init__(self):
        check_settings(self)
        if self.method not in METHODS:
            raise ConfigError(f"method={self.method} is not a pruning method; use method=order "
                              f"(the importance orders) or method=l0 (learned gates)")
        if self.method == "order" and self.target_heads is not None:
            raise ConfigError("target_heads= is for method=l0; with the importance orders give "
                              "prune_fraction= (the fraction of heads to remove), e.g. 0.5")
        if self.method == "l0" and (self.target_heads is None) == (self.prune_fraction is None):
            raise ConfigError("method=l0 needs exactly one of target_heads= (heads to keep) and "
                              "prune_fraction= (fraction to remove), e.g. prune_fraction=0.75")
        if self.method == "l0" and not (self.l0.minutes or self.l0.max_steps):
            raise ConfigError(f"l0.minutes={shown(self.l0.minutes)}, l0.max_steps="
                              f"{shown(self.l0.max_steps)}: the gates need minutes > 0 or "
                              f"max_steps >= 1 to learn, e.g. l0.minutes=10")

    def heads_to_remove(self, model_cfg):
        """prune_fraction= (or, with method=l0, target_heads=) as a number of heads of the model
        ``model_cfg`` to remove (None: chosen by max_bleu_loss): any count that leaves a head in
        every layer and removes at least one; or, with the importance orders, prune_fraction=0
        (none: the whole model fine-tuned, the control for a pruned one)."""
        if self.target_heads is None and self.prune_fraction is None:
            return None  # method=order (method=l0 needs one of them)
        total, layers = model_cfg.total_heads, model_cfg.num_attention_layers
        keep = (self.target_heads if self.target_heads is not None
                else total - int(round(self.prune_fraction * total)))
        control = self.method == "order" and self.prune_fraction == 0
        if not (control or layers <= keep < total):
            asked = (f"target_heads={self.target_heads}" if self.target_heads is not None
                     else f"prune_fraction={self.prune_fraction}")
            raise ConfigError(f"{asked} would keep {keep} of the {total} heads; keep at least "
                              f"one per attention layer ({layers}) and fewer than all, e.g. "
                              f"prune_fraction=0.5")
        return total - keep


class GatedScorer:
    """BLEU (greedy: ``decode_cfg.greedy()``) of a split with a given (A, H) 0/1 gate array."""

    def __init__(self, model, tokenizer, sources, references, ctx, decode_cfg):
        self.model, self.tokenizer, self.ctx = model, tokenizer, ctx
        self.greedy = decode_cfg.greedy()
        self.sources, self.references = sources, references
        self.calls = 0

    def __call__(self, gates):
        self.calls += 1
        translator = Translator(self.model, self.tokenizer, self.greedy, self.ctx,
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
    for name in (*TOKENIZER_FILES, DATA_FILE):
        if (source.path / name).is_file():
            atomic_copy(source.path / name, pruned_run.path / name)
    pruned_run.write_model_config(pruned.cfg)
    pruned_run.checkpoints.save("best", pruned, **meta)
