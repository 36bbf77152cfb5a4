"""The training losses, each summed over the valid target positions: label-smoothed
cross-entropy, R-Drop's symmetric KL between two dropout passes, and the base loss with the
terms of `mtx.training.terms` in one graph (`LossWithTerms`)."""
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
class LossWithTerms(HybridBlock):
    """The training loss with terms (`mtx.training.terms`): logits (P*B, T, V) of P passes of a
    batch stacked on axis 0, tgt_out (P*B, T), tgt_valid_len (P*B,), then what the terms need
    (the teacher's logits) -> (loss, nll): the smoothed loss times ``base_weight`` plus each of
    ``parts`` (the terms' blocks, each called with every input), and the nll, both summed over
    the valid positions and divided by P (the passes' mean). One cached graph for all: as separate
    blocks, each taking the logits, autograd would sum their (P*B, T, V) gradients outside
    them, in fresh memory every step (twice the terms' own time)."""

    def __init__(self, vocab_size, label_smoothing, parts, passes=1, base_weight=1.0, **kwargs):
        super().__init__(**kwargs)
        self.passes, self.base_weight, self.parts = passes, base_weight, list(parts)
        with self.name_scope():
            self.smoothed = LabelSmoothedCrossEntropy(vocab_size, label_smoothing)
        for index, part in enumerate(self.parts):
            self.register_child(part, f"term{index}")

    def hybrid_forward(self, F, logits, tgt_out, tgt_valid_len, *provided):
        loss, nll = self.smoothed(logits, tgt_out, tgt_valid_len)
        if self.base_weight != 1:
            loss = loss * self.base_weight
        for part in self.parts:
            loss = loss + part(logits, tgt_out, tgt_valid_len, *provided)
        if self.passes != 1:
            loss, nll = loss / self.passes, nll / self.passes
        return loss, nll


def label_smoothed_loss(vocab_size, label_smoothing, ctx):
    """The `LabelSmoothedCrossEntropy` of a vocabulary of ``vocab_size`` on ``ctx`` (a device or
    a list), initialized and hybridized: how training, gate training and the head study get
    their loss (``label_smoothing`` 0: the plain nll)."""
    return ready(LabelSmoothedCrossEntropy(vocab_size, label_smoothing), ctx)


def ready(block, ctx):
    """``block`` initialized on ``ctx`` (a device or a list) and hybridized."""
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
