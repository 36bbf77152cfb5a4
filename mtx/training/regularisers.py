"""The terms of the training loss beside the base loss (`mtx.training.terms.Term`), and the
regularisers of its inputs: word dropout on the inputs (`WordDropout`), R-Drop's consistency
between two dropout passes (`RDrop`), word-level distillation from a teacher model
(`WordDistillation`) and the z-loss on the logits (`ZLoss`). A new one is a `Term` subclass
here (what it needs, what it refuses, its part of the loss), its setting in
`mtx.config.TrainConfig` and a line in `terms_of`; the step (`mtx.training.steps`) needs
nothing else."""
import dataclasses

import numpy as onp
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from ..data.vocab import EOS, UNK
from .loss import SymmetricKL, valid_positions
from .terms import BUDGET, FLOAT32_LOGITS, SECOND_PASS, TEACHER, Term, check_combinations


class WordDropout(Term):
    """train.word_dropout: source and decoder-input subwords replaced by <unk>."""

    def __init__(self, probability):
        self.probability = probability
        self.setting, self.off = f"train.word_dropout={probability}", "train.word_dropout=0"

    def inputs(self, batch, seed):
        return drop_words(batch, self.probability, seed)


class RDrop(Term):
    """train.rdrop_alpha, from train.rdrop_from of the budget on: R-Drop (Liang et al. 2021),
    the batch through the model twice (each pass its own dropout), the passes' mean loss plus
    alpha / 4 times their `SymmetricKL` (the paper's sum of the two losses with alpha / 2,
    halved)."""

    def __init__(self, alpha, start):
        self.alpha, self.start = alpha, start
        self.setting, self.off = f"train.rdrop_alpha={alpha}", "train.rdrop_alpha=0"
        self.needs = frozenset({FLOAT32_LOGITS, SECOND_PASS} | ({BUDGET} if start else set()))

    def active(self, budget_spent):
        return budget_spent >= self.start

    def part(self):
        return Consistency(self.alpha)


@use_np
class Consistency(HybridBlock):
    """R-Drop's part: alpha / 2 times the `SymmetricKL` of the two passes (the first half of
    the rows and the second), before the loss's mean over the passes."""

    def __init__(self, alpha, **kwargs):
        super().__init__(**kwargs)
        self.alpha = alpha
        with self.name_scope():
            self.kl = SymmetricKL()

    def hybrid_forward(self, F, logits, tgt_out, tgt_valid_len, *provided):
        first_pass_len = F.np.split(tgt_valid_len, 2, axis=0)[0]  # (B,)
        return self.alpha / 2 * self.kl(logits, first_pass_len)


@dataclasses.dataclass(frozen=True)
class Teacher:
    """A model on the training's devices that a run distils from, and the weight of its
    distributions in the loss, in (0, 1) (mtx-heads: its full model, finetune.distill_weight)."""
    model: object
    weight: float


class WordDistillation(Term):
    """A `Teacher` (Kim and Rush 2016): (1 - weight) times the base loss plus weight times the
    cross-entropy against the teacher's distributions (`TeacherCrossEntropy`)."""
    needs = frozenset({FLOAT32_LOGITS, TEACHER})
    refuses = {SECOND_PASS: "the teacher's distributions are of one pass"}
    off = "finetune.distill_weight=0"

    def __init__(self, teacher):
        self.teacher, self.weight = teacher.model, teacher.weight
        self.base_weight = 1 - teacher.weight
        self.setting = f"distillation from a teacher (finetune.distill_weight={teacher.weight})"

    def part(self):
        return TeacherCrossEntropy(self.weight)


@use_np
class TeacherCrossEntropy(HybridBlock):
    """Distillation's part: ``weight`` times -sum_v q(v) log p(v), q the teacher's distribution,
    summed over the valid positions."""

    def __init__(self, weight, **kwargs):
        super().__init__(**kwargs)
        self.weight = weight

    def hybrid_forward(self, F, logits, tgt_out, tgt_valid_len, teacher_logits):
        soft = -(F.npx.softmax(teacher_logits, axis=-1)
                 * F.npx.log_softmax(logits, axis=-1)).sum(axis=-1)  # (B, T)
        return self.weight * (soft * valid_positions(F, soft, tgt_valid_len)).sum()


class ZLoss(Term):
    """train.z_loss: this weight times (log Z)^2 at each valid position, Z the softmax's
    normaliser sum_v exp(logit_v) (PaLM's z-loss, Chowdhery et al. 2022): keeps the output
    layer's logits from drifting, where bfloat16 rounds them coarsely."""
    needs = frozenset({FLOAT32_LOGITS})

    def __init__(self, weight):
        self.weight = weight
        self.setting, self.off = f"train.z_loss={weight}", "train.z_loss=0"

    def part(self):
        return SquaredLogNormaliser(self.weight)


@use_np
class SquaredLogNormaliser(HybridBlock):
    """The z-loss's part: ``weight`` times (log Z)^2 summed over the valid positions."""

    def __init__(self, weight, **kwargs):
        super().__init__(**kwargs)
        self.weight = weight

    def hybrid_forward(self, F, logits, tgt_out, tgt_valid_len, *provided):
        top = logits.max(axis=-1, keepdims=True)  # (B, T, 1): exp() of no more than 0
        log_z = F.np.log(F.np.exp(logits - top).sum(axis=-1)) + F.np.squeeze(top, axis=-1)
        return self.weight * (log_z ** 2 * valid_positions(F, log_z, tgt_valid_len)).sum()


def terms_of(train_cfg, teacher=None):
    """The terms ``train_cfg`` turns on (and the distillation from a `Teacher`), in the order
    they act; ConfigError when two of them cannot combine (`terms.check_combinations`)."""
    found = []
    if train_cfg.word_dropout:
        found.append(WordDropout(train_cfg.word_dropout))
    if train_cfg.rdrop_alpha:
        found.append(RDrop(train_cfg.rdrop_alpha, train_cfg.rdrop_from))
    if teacher is not None:
        found.append(WordDistillation(teacher))
    if train_cfg.z_loss:
        found.append(ZLoss(train_cfg.z_loss))
    return check_combinations(found)


def drop_words(batch, probability, seed):
    """The host `Batch` with each source subword and decoder-input subword (not BOS, EOS or PAD)
    replaced by UNK with ``probability``; the loss's targets (tgt_out) are unchanged. The same
    ``seed`` drops the same words."""
    rng = onp.random.default_rng(seed)
    dropped = {}
    for name in ("src_tokens", "tgt_in"):
        tokens = getattr(batch, name).copy()  # (B, S) or (B, T)
        tokens[(rng.random(tokens.shape) < probability) & (tokens > EOS)] = UNK
        dropped[name] = tokens
    return dataclasses.replace(batch, **dropped)
