"""Label-smoothed cross-entropy masked by the target valid lengths."""
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
        steps = F.npx.arange_like(nll, axis=1)  # (T,) float
        lengths = F.npx.reshape(tgt_valid_len, (-2, 1)).astype("float32")  # (B, 1)
        mask = (steps < lengths).astype("float32")  # (B, T)
        return (loss * mask).sum(), (nll * mask).sum()


def label_smoothed_loss(vocab_size, label_smoothing, ctx):
    """The `LabelSmoothedCrossEntropy` of a vocabulary of ``vocab_size`` on ``ctx`` (a device or
    a list), initialized and hybridized: how training, gate training and the head study get
    their loss (``label_smoothing`` 0: the plain nll)."""
    loss_fn = LabelSmoothedCrossEntropy(vocab_size, label_smoothing)
    loss_fn.initialize(ctx=ctx)
    loss_fn.hybridize(static_alloc=True)
    return loss_fn


def mean_nll(model, loss_fn, device_batches, head_gates=None):
    """The teacher-forced mean nll per target token of ``model`` (called outside autograd, so
    dropout is off) over ``device_batches``: [((src, src_len, tgt_in, tgt_out, tgt_len) on the
    model's device, target tokens)], ``loss_fn`` a `LabelSmoothedCrossEntropy` (its nll)."""
    total, tokens = 0.0, 0
    for (src, src_len, tgt_in, tgt_out, tgt_len), count in device_batches:
        total = total + loss_fn(model(src, src_len, tgt_in, head_gates), tgt_out, tgt_len)[1]
        tokens += count
    return float(total) / max(tokens, 1)
