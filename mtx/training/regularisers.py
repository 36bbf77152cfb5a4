"""Regularisers of a training step beside dropout and label smoothing, behind one interface
(`Regulariser`): word dropout on the inputs (`WordDropout`), R-Drop's consistency between
two dropout passes (`RDrop`) and word-level distillation from a teacher model
(`WordDistillation`). A new one is a subclass here, its setting in
`mtx.config.TrainConfig` and a line in `regularisers_of`; the step (`mtx.training.steps`)
needs nothing else."""
import dataclasses

import numpy as onp

from ..data.vocab import EOS, UNK
from ..errors import ConfigError


class Regulariser:
    """What a training step asks of a regulariser; each method may be left as it is here."""

    def active(self, budget_spent):
        """Whether it acts on a step at ``budget_spent`` (the fraction of the budget spent)."""
        return True

    def inputs(self, batch, seed):
        """The host `Batch` the step trains on instead of ``batch`` (``seed``: the step's and
        the part's, so a resumed run draws the same)."""
        return batch

    def loss(self, pieces, src, src_len, tgt_in, tgt_out, tgt_len):
        """(loss, nll) of the device batch instead of the plain forward pass and loss, or None."""
        return None


class WordDropout(Regulariser):
    """train.word_dropout: source and decoder-input subwords replaced by <unk>."""

    def __init__(self, probability):
        self.probability = probability

    def inputs(self, batch, seed):
        return drop_words(batch, self.probability, seed)


class RDrop(Regulariser):
    """train.rdrop_alpha, from train.rdrop_from of the budget on: R-Drop's loss (`rdrop_loss`)
    with ``loss_fn`` (`mtx.training.loss.RDropLoss`)."""

    def __init__(self, start, loss_fn):
        self.start, self.loss_fn = start, loss_fn

    def active(self, budget_spent):
        return budget_spent >= self.start

    def loss(self, pieces, src, src_len, tgt_in, tgt_out, tgt_len):
        return rdrop_loss(pieces.model, self.loss_fn, src, src_len, tgt_in, tgt_out, tgt_len)


@dataclasses.dataclass(frozen=True)
class Teacher:
    """A model on the training's devices that a run distils from, and the weight of its
    distributions in the loss, in (0, 1) (mtx-heads: its full model, finetune.distill_weight)."""
    model: object
    weight: float


class WordDistillation(Regulariser):
    """A `Teacher`: the loss against the teacher model's output distributions too
    (`mtx.training.loss.DistilledLoss`); the teacher runs without dropout and is not trained."""

    def __init__(self, teacher, loss_fn):
        self.teacher, self.loss_fn = teacher, loss_fn

    def loss(self, pieces, src, src_len, tgt_in, tgt_out, tgt_len):
        from mxnet import autograd
        logits = pieces.model(src, src_len, tgt_in)  # (B, T, V)
        with autograd.pause():
            teacher_logits = self.teacher(src, src_len, tgt_in).copy()  # its graph reuses memory
        return self.loss_fn(logits, teacher_logits, tgt_out, tgt_len)


def regularisers_of(model_cfg, train_cfg, ctxs, teacher=None):
    """The regularisers ``train_cfg`` turns on (and the distillation from a `Teacher`), their
    blocks on ``ctxs``; at most one of them computes the loss (`Regulariser.loss`)."""
    from .loss import distilled_loss_fn, rdrop_loss_fn
    if teacher is not None and train_cfg.rdrop_alpha:
        raise ConfigError(f"train.rdrop_alpha={train_cfg.rdrop_alpha} and distillation from a "
                          f"teacher each compute the loss: set train.rdrop_alpha=0 for this "
                          f"training")
    found = []
    if train_cfg.word_dropout:
        found.append(WordDropout(train_cfg.word_dropout))
    if train_cfg.rdrop_alpha:
        found.append(RDrop(train_cfg.rdrop_from, rdrop_loss_fn(
            model_cfg.vocab_size, train_cfg.label_smoothing, train_cfg.rdrop_alpha, ctxs)))
    if teacher is not None:
        found.append(WordDistillation(teacher.model, distilled_loss_fn(
            model_cfg.vocab_size, train_cfg.label_smoothing, teacher.weight, ctxs)))
    return found


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


def rdrop_loss(model, loss_fn, src, src_len, tgt_in, tgt_out, tgt_len):
    """R-Drop (Liang et al. 2021): the rows through ``model`` twice in one call (the batch
    stacked on itself, (2B, ...)), so each pass has its own dropout -> (loss, nll) of
    ``loss_fn`` (`mtx.training.loss.RDropLoss`), summed over the valid target tokens."""
    from mxnet import np
    twice = lambda x: np.concatenate([x, x], axis=0)  # noqa: E731
    logits = model(twice(src), twice(src_len), twice(tgt_in))  # (2B, T, V)
    return loss_fn(logits, twice(tgt_out), twice(tgt_len))
