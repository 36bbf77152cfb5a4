"""The training loss as the base loss (label-smoothed cross-entropy) plus terms.

A `Term` declares what it needs of the step (`NEEDS`: float32 logits, a second forward pass, a
teacher's logits, the training budget), which of those needs of another term it cannot combine
with (``refuses``), and its part of the loss (``part``: a block summed in with the base loss in
one cached graph, `mtx.training.loss.LossWithTerms`). The step provides each need once, for all
the terms that act (`TermLosses.loss`); two terms that cannot combine are refused in one line
before training (`check_combinations`). The terms themselves are in `mtx.training.regularisers`.
"""
from ..errors import ConfigError

FLOAT32_LOGITS = "float32 logits"  # the output layer's logits cast to float32 (else bfloat16
# with bfloat16 products and the native loss, `mtx.training.build.loss_reads_bfloat16`)
SECOND_PASS = "a second forward pass"  # the batch stacked on itself, (2B, ...): own dropout each
TEACHER = "a teacher"  # the teacher model's logits of the batch, (B, T, V), out of autograd
BUDGET = "the training budget"  # the fraction spent, read by the loop (`control.budget_spent`)
NEEDS = (FLOAT32_LOGITS, SECOND_PASS, TEACHER, BUDGET)


class Term:
    """What the step asks of a term of the loss (or of its inputs); each may be left as here.
    ``setting``: what turns it on, as users type it (the refusal names it); ``off``: how to turn
    it off; ``needs``: a subset of `NEEDS`; ``refuses``: {a need of another term: why they
    cannot combine}; ``base_weight``: what the base loss is multiplied by (distillation's
    1 - weight)."""
    setting, off = "", ""
    needs = frozenset()
    refuses = {}
    base_weight = 1.0

    def active(self, budget_spent):
        """Whether it acts on a step at ``budget_spent`` (the fraction of the budget spent)."""
        return True

    def inputs(self, batch, seed):
        """The host `Batch` the step trains on instead of ``batch`` (``seed``: the step's and
        the part's, so a resumed run draws the same)."""
        return batch

    def part(self):
        """A HybridBlock: (logits (P*B, T, V) of P passes, tgt_out (P*B, T), tgt_valid_len
        (P*B,), then what it needs: the teacher's logits (B, T, V)) -> its part of the loss,
        a scalar summed over the valid positions of every pass (the loss is then divided by
        P); None: it adds nothing to the loss."""
        return None


def check_combinations(terms):
    """ConfigError, one line, when a term refuses what another needs (its ``refuses``)."""
    for term in terms:
        for other in terms:
            clash = sorted(need for need in term.refuses if need in other.needs)
            if other is not term and clash:
                raise ConfigError(f"{term.setting} and {other.setting} cannot combine: "
                                  f"{term.refuses[clash[0]]}; set {other.off} for this training")
    return terms


def needed(terms, need):
    """Whether any of ``terms`` needs ``need`` (one of `NEEDS`)."""
    return any(need in term.needs for term in terms)


class TermLosses:
    """The step's loss with the terms that act, one `LossWithTerms` per set of them (R-Drop from
    a fraction of the budget on: two sets), built when first used, on ``ctxs``; with no term
    that adds to the loss, ``base`` (the `LabelSmoothedCrossEntropy` validation uses too)."""

    def __init__(self, base, vocab_size, label_smoothing, ctxs):
        self.base, self.vocab_size, self.label_smoothing, self.ctxs = (
            base, vocab_size, label_smoothing, ctxs)
        self.built = {}

    def block(self, terms):
        """The loss block of ``terms`` (a tuple), built on first use."""
        if terms not in self.built:
            adding = [(term, term.part()) for term in terms]
            adding = [(term, part) for term, part in adding if part is not None]
            base_weight = 1.0
            for term, _ in adding:
                base_weight *= term.base_weight
            from .loss import LossWithTerms, ready
            plain = not adding and not needed(terms, SECOND_PASS) and not needed(terms, TEACHER)
            self.built[terms] = self.base if plain else ready(LossWithTerms(
                self.vocab_size, self.label_smoothing, [part for _, part in adding],
                passes=2 if needed(terms, SECOND_PASS) else 1, base_weight=base_weight),
                self.ctxs)
        return self.built[terms]

    def loss(self, model, terms, src, src_len, tgt_in, tgt_out, tgt_len):
        """(loss, nll) of the device batch through ``model`` with ``terms`` acting, both summed
        over the valid target tokens (nll: the mean of the passes): one call of the model (the
        batch twice, stacked, with `SECOND_PASS`) and of the teacher (with `TEACHER`)."""
        from mxnet import autograd, np
        if needed(terms, SECOND_PASS):
            src, src_len, tgt_in, tgt_out, tgt_len = (np.concatenate([x, x], axis=0) for x in (
                src, src_len, tgt_in, tgt_out, tgt_len))
        logits = model(src, src_len, tgt_in)  # (P*B, T, V)
        provided = ()
        if needed(terms, TEACHER):
            teacher = next(term.teacher for term in terms if TEACHER in term.needs)
            with autograd.pause():  # the teacher runs without dropout and is not trained
                provided = (teacher(src, src_len, tgt_in).copy(),)  # its graph reuses memory
        return self.block(tuple(terms))(logits, tgt_out, tgt_len, *provided)
