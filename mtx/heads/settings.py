"""The head study's settings (mtx-heads), each declared once (`mtx.typecheck.setting`), checked
before any work: a bad one found after the study would lose it. No MXNet here."""
from dataclasses import dataclass, field
from typing import Optional

from ..errors import ConfigError
from ..typecheck import check_settings, setting, shown

# importance orders and their curves; learned gates (`mtx.heads.gates`); cuts with training
# between them (`mtx.heads.stages.gradual_cuts`)
METHODS = ("order", "l0", "gradual")


@dataclass(frozen=True)
class FineTuning:
    """conf/heads.yaml ``finetune``: the pruned model trained further on the training split."""
    minutes: Optional[float] = setting(0, "minutes of training the pruned model on the "
                                          "training split, > 0, or 0 for none", low=0)
    lr: float = setting(5e-4, "the peak learning rate, reached after warmup_steps, > 0, e.g. "
                              "5e-4", above=0)
    warmup_steps: int = setting(100, "1 or more steps", low=1)
    distill_weight: float = setting(0.0, "word-level distillation from the full model while the "
                                         "pruned one trains: the weight of the cross-entropy "
                                         "against its distributions, in [0, 1) (0: none)",
                                    low=0, below=1)
    distilled_target: Optional[str] = setting(None, "sequence-level distillation: a file of "
                                                    "the full model's translations of the "
                                                    "training sources, one per line (mtx-"
                                                    "evaluate ckpt=<run> split=train writes it), "
                                                    "as the targets; or null")

    def __post_init__(self):
        check_settings(self, "finetune.")
        if (self.distill_weight or self.distilled_target) and not self.minutes:
            raise ConfigError("finetune.distill_weight and finetune.distilled_target act while "
                              "the pruned model trains: give finetune.minutes > 0 too")


@dataclass(frozen=True)
class GateTraining:
    """conf/heads.yaml ``l0`` (method=l0): the run fine-tuned with a hard-concrete gate per head
    (`mtx.heads.gates.train_gates`)."""
    minutes: Optional[float] = setting(10, "the wall-clock budget of the gate training, minutes "
                                           "> 0 (or 0 with l0.max_steps=)", low=0)
    max_steps: Optional[int] = setting(None, "a number of updates to stop after, 1 or more, or "
                                             "null", low=1)
    lr: float = setting(1e-4, "the model's learning rate meanwhile (Adam), > 0, e.g. 1e-4",
                        above=0)
    gate_lr: float = setting(0.05, "the gates' (log_alpha) learning rate (Adam), > 0, e.g. 0.05",
                             above=0)
    penalty: float = setting(10.0, "the L0 weight (per gate, against the loss per token) on the "
                                   "gates outside the aim's best, >= 0, e.g. 10", low=0)
    anneal: float = setting(0.6, "the part of the budget over which the aim falls to the target, "
                                 "from 0 to 1, e.g. 0.6", low=0, high=1)
    batch_tokens: int = setting(2048, "8 or more target tokens a step, e.g. 2048", low=8)

    def __post_init__(self):
        check_settings(self, "l0.")


@dataclass(frozen=True)
class GradualPruning:
    """conf/heads.yaml ``gradual`` (method=gradual): Michel et al.'s iterative pruning with
    training between the cuts (`mtx.heads.stages.gradual_cuts`)."""
    steps: int = setting(3, "the cuts, 2 or more: before each the heads left are ranked by the "
                            "rise of the importance split's loss with each gated off alone "
                            "(re-ranked after every tenth of the heads), and after each the "
                            "model trains finetune.minutes / steps", low=2)

    def __post_init__(self):
        check_settings(self, "gradual.")


@dataclass(frozen=True)
class StudySettings:
    """The settings of the head study in conf/heads.yaml (the run, its checkpoint, decode.*,
    device= and the paths are the command's), checked before any work: a bad one found after
    the study would lose it."""
    method: str = setting("order", "order (the importance orders and their curves), l0 "
                                   "(learned gates, `mtx.heads.gates`) or gradual (cuts with "
                                   "training between them, gradual.*)", choices=METHODS)
    target_heads: Optional[int] = setting(None, "a whole number of heads to keep (method=l0; "
                                                "or prune_fraction=), or null")
    importance_split: str = setting("val", "the held-out split of the run's corpus that the "
                                           "importance scores and pruning curves are made on")
    test_split: Optional[str] = setting(None, "the split the pruned model is compared with the "
                                              "full one on, or null: the run's first test set "
                                              "(Multi30k's test_2016_flickr)")
    max_sentences: Optional[int] = setting(
        None, "only the first N sentences of importance_split (faster), 1 or more, or null for "
              "the whole split", low=1)
    leave_one_out: bool = setting(True, "true: the BLEU and loss change with each head alone "
                                        "gated off (slow: one decode per head)")
    random_orders: int = setting(3, "random removal orders (seeds 1..N) as the control, 0 or "
                                    "more", low=0)
    iterative: bool = setting(True, "true: also the iterative order, gradient importance "
                                    "re-scored after each step")
    iterative_loss: bool = setting(True, "true: and leave-one-out on the val loss, re-scored "
                                         "after each step")
    max_bleu_loss: float = setting(
        0.5, "the val BLEU the pruned model may lose (it removes the most heads within it), "
             "a number >= 0, e.g. 0.5", low=0)
    prune_fraction: Optional[float] = setting(
        None, "the fraction of all heads to remove (instead of max_bleu_loss), from 0 to 1, "
              "e.g. 0.5, or null", low=0, high=1)
    timing_rounds: int = setting(2, "rounds in which the full and the pruned model translate "
                                    "the test split in turn, 1 or more", low=1)
    finetune: FineTuning = field(default_factory=FineTuning)
    l0: GateTraining = field(default_factory=GateTraining)
    gradual: GradualPruning = field(default_factory=GradualPruning)

    def __post_init__(self):
        check_settings(self)
        if self.method == "gradual" and not (self.prune_fraction and self.finetune.minutes):
            raise ConfigError(f"method=gradual cuts prune_fraction= of the heads with training "
                              f"between the cuts: give prune_fraction= > 0 and finetune.minutes= "
                              f"> 0 (shared by the gradual.steps={self.gradual.steps} cuts), "
                              f"e.g. prune_fraction=0.75 finetune.minutes=20")
        if self.method != "l0" and self.target_heads is not None:
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
        if self.method == "gradual" and total - keep < self.gradual.steps:
            raise ConfigError(f"prune_fraction={self.prune_fraction} removes {total - keep} "
                              f"of the {total} heads, fewer than gradual.steps="
                              f"{self.gradual.steps} cuts; give fewer steps or a larger "
                              f"prune_fraction")
        if not (control or layers <= keep < total):
            asked = (f"target_heads={self.target_heads}" if self.target_heads is not None
                     else f"prune_fraction={self.prune_fraction}")
            raise ConfigError(f"{asked} would keep {keep} of the {total} heads; keep at least "
                              f"one per attention layer ({layers}) and fewer than all, e.g. "
                              f"prune_fraction=0.5")
        return total - keep
