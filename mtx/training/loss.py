"""The training losses, each summed over the valid target positions: label-smoothed
cross-entropy, R-Drop's symmetric KL between two dropout passes, and word-level distillation
from a teacher's distributions."""
import numpy as onp
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from .. import kernels


@use_np
class LabelSmoothedCrossEntropy(HybridBlock):
    """logits (B, T, V), tgt_out (B, T), tgt_valid_len (B,) -> (smoothed loss sum, nll sum),
    both scalars summed over the valid target tokens only (divide by their count).

    Per position: nll = -log p(gold), smoothed = (1 - eps) nll - eps mean_v log p(v). On the CPU
    with mtx's native kernels both come from one fused operator (``mtx_smoothed_ce``,
    mtx/kernels/cross_entropy.cc), which also skips the arithmetic of masked positions in the
    backward pass; otherwise from MXNet operators, the smoothing term as one matrix-vector
    product with a constant 1/V vector (faster on the CPU in MXNet 1.9 than a mean over V)."""

    def __init__(self, vocab_size, label_smoothing=0.1, **kwargs):
        super().__init__(**kwargs)
        self.eps = label_smoothing
        self._native = kernels.load()
        if not self._native:
            with self.name_scope():
                self.uniform = self.params.get_constant(
                    "uniform", onp.full((1, vocab_size), 1.0 / vocab_size, "float32"))

    def per_position(self, F, logits, tgt_out, uniform):
        """(smoothed loss, nll) per position, each (B, T)."""
        if self._native:
            out = F.mtx_smoothed_ce(logits.as_nd_ndarray(), tgt_out.as_nd_ndarray(),
                                    eps=self.eps)  # loss, nll, log-sum-exp (for the backward)
            return out[0].as_np_ndarray(), out[1].as_np_ndarray()
        log_probs = F.npx.log_softmax(logits, axis=-1)  # (B, T, V)
        nll = -F.npx.pick(log_probs, tgt_out, axis=-1)  # (B, T)
        smooth = -F.npx.fully_connected(log_probs, uniform, num_hidden=1, no_bias=True,
                                        flatten=False)  # (B, T, 1): -mean over V
        return (1 - self.eps) * nll + self.eps * F.npx.reshape(smooth, (-2, -2)), nll

    def hybrid_forward(self, F, logits, tgt_out, tgt_valid_len, uniform=None):
        loss, nll = self.per_position(F, logits, tgt_out, uniform)
        mask = valid_positions(F, nll, tgt_valid_len)
        return (loss * mask).sum(), (nll * mask).sum()


def valid_positions(F, per_position, tgt_valid_len):
    """per_position (B, T), tgt_valid_len (B,) -> (B, T) float32: 1 where t < the row's length."""
    steps = F.npx.arange_like(per_position, axis=1)  # (T,) float
    lengths = F.npx.reshape(tgt_valid_len, (-2, 1)).astype("float32")  # (B, 1)
    return (steps < lengths).astype("float32")


@use_np
class SymmetricKL(HybridBlock):
    """R-Drop's consistency term (Liang et al. 2021): logits (2B, T, V), the two dropout passes
    of one batch stacked on axis 0, and tgt_valid_len (B,) -> the sum over the valid positions
    of KL(p || q) + KL(q || p) between the passes' distributions at each position.

    On the CPU with mtx's native kernels one fused operator (``mtx_symmetric_kl``,
    mtx/kernels/symmetric_kl.cc) computes it without (2B, T, V) temporaries; otherwise MXNet's
    operators do, in one cached graph (fresh (B, T, V) arrays every step cost the CPU more in
    page faults than in arithmetic)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._native = kernels.load()

    def hybrid_forward(self, F, logits, tgt_valid_len):
        if self._native:  # kl (B, T), log-sum-exps and KL(p || q) for the backward
            both_ways = F.mtx_symmetric_kl(logits.as_nd_ndarray())[0].as_np_ndarray()
        else:
            first, second = F.np.split(F.npx.log_softmax(logits, axis=-1), 2, axis=0)
            both_ways = ((F.np.exp(first) - F.np.exp(second)) * (first - second)).sum(axis=-1)
        return (both_ways * valid_positions(F, both_ways, tgt_valid_len)).sum()


@use_np
class RDropLoss(HybridBlock):
    """R-Drop's loss (Liang et al. 2021): logits (2B, T, V) of the two dropout passes of a batch
    stacked on axis 0, tgt_out (2B, T), tgt_valid_len (2B,) -> (loss, nll): the passes' mean
    smoothed loss plus ``alpha`` / 4 times their `SymmetricKL` (the paper's sum of the two
    losses with alpha / 2, halved), and their mean nll; both summed over the valid positions.
    One cached graph for both terms: as two, each taking the logits, autograd would sum their
    (2B, T, V) gradients outside either, in fresh memory every step (twice the terms' own time)."""

    def __init__(self, vocab_size, label_smoothing, alpha, **kwargs):
        super().__init__(**kwargs)
        self.alpha = alpha
        with self.name_scope():
            self.smoothed = LabelSmoothedCrossEntropy(vocab_size, label_smoothing)
            self.consistency = SymmetricKL()

    def hybrid_forward(self, F, logits, tgt_out, tgt_valid_len):
        loss, nll = self.smoothed(logits, tgt_out, tgt_valid_len)
        first_pass_len = F.np.split(tgt_valid_len, 2, axis=0)[0]  # (B,)
        return loss / 2 + self.alpha / 4 * self.consistency(logits, first_pass_len), nll / 2


@use_np
class DistilledLoss(HybridBlock):
    """Word-level distillation (Kim and Rush 2016): logits (B, T, V), the teacher's logits
    (B, T, V) of the same batch, tgt_out (B, T), tgt_valid_len (B,) -> (loss, nll): (1 -
    ``weight``) times the smoothed loss plus ``weight`` times the cross-entropy against the
    teacher's distribution, -sum_v q(v) log p(v), and the nll; both summed over the valid
    positions. One cached graph, so the (B, T, V) gradient of both terms is summed inside it."""

    def __init__(self, vocab_size, label_smoothing, weight, **kwargs):
        super().__init__(**kwargs)
        self.weight = weight
        with self.name_scope():
            self.smoothed = LabelSmoothedCrossEntropy(vocab_size, label_smoothing)

    def hybrid_forward(self, F, logits, teacher_logits, tgt_out, tgt_valid_len):
        loss, nll = self.smoothed(logits, tgt_out, tgt_valid_len)
        soft = -(F.npx.softmax(teacher_logits, axis=-1)
                 * F.npx.log_softmax(logits, axis=-1)).sum(axis=-1)  # (B, T)
        soft = (soft * valid_positions(F, soft, tgt_valid_len)).sum()
        return (1 - self.weight) * loss + self.weight * soft, nll


def distilled_loss_fn(vocab_size, label_smoothing, weight, ctx):
    """The `DistilledLoss` on ``ctx`` (a device or a list), initialized and hybridized."""
    return _ready(DistilledLoss(vocab_size, label_smoothing, weight), ctx)


def label_smoothed_loss(vocab_size, label_smoothing, ctx):
    """The `LabelSmoothedCrossEntropy` of a vocabulary of ``vocab_size`` on ``ctx`` (a device or
    a list), initialized and hybridized: how training, gate training and the head study get
    their loss (``label_smoothing`` 0: the plain nll)."""
    return _ready(LabelSmoothedCrossEntropy(vocab_size, label_smoothing), ctx)


def rdrop_loss_fn(vocab_size, label_smoothing, alpha, ctx):
    """The `RDropLoss` on ``ctx`` (a device or a list), initialized and hybridized."""
    return _ready(RDropLoss(vocab_size, label_smoothing, alpha), ctx)


def _ready(block, ctx):
    block.initialize(ctx=ctx)
    block.hybridize(static_alloc=True)
    return block


def mean_nll(model, loss_fn, device_batches, head_gates=None):
    """The teacher-forced mean nll per target token of ``model`` (called outside autograd, so
    dropout is off) over ``device_batches``: [((src, src_len, tgt_in, tgt_out, tgt_len) on the
    model's device, target tokens)], ``loss_fn`` a `LabelSmoothedCrossEntropy` (its nll)."""
    total, tokens = 0.0, 0
    for (src, src_len, tgt_in, tgt_out, tgt_len), count in device_batches:
        total = total + loss_fn(model(src, src_len, tgt_in, head_gates), tgt_out, tgt_len)[1]
        tokens += count
    return float(total) / max(tokens, 1)
