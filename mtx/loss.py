"""Label-smoothed cross-entropy masked by the target valid lengths."""
import numpy as onp
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np


@use_np
class LabelSmoothedCrossEntropy(HybridBlock):
    """logits (B, T, V), tgt_out (B, T), tgt_valid_len (B,) -> (smoothed loss sum, nll sum),
    both scalars summed over the valid target tokens only (divide by their count).

    The smoothing term, the mean of the log-probabilities over V, is one matrix-vector product
    with a constant 1/V vector, which MXNet 1.9 runs faster on the CPU than a mean over V."""

    def __init__(self, vocab_size, label_smoothing=0.1, **kwargs):
        super().__init__(**kwargs)
        self.eps = label_smoothing
        with self.name_scope():
            self.uniform = self.params.get_constant(
                "uniform", onp.full((1, vocab_size), 1.0 / vocab_size, "float32"))

    def hybrid_forward(self, F, logits, tgt_out, tgt_valid_len, uniform):
        log_probs = F.npx.log_softmax(logits, axis=-1)  # (B, T, V)
        nll = -F.npx.pick(log_probs, tgt_out, axis=-1)  # (B, T)
        smooth = -F.npx.fully_connected(log_probs, uniform, num_hidden=1, no_bias=True,
                                        flatten=False)  # (B, T, 1): -mean over V
        steps = F.npx.arange_like(nll, axis=1)  # (T,) float
        lengths = F.npx.reshape(tgt_valid_len, (-2, 1)).astype("float32")  # (B, 1)
        mask = (steps < lengths).astype("float32")  # (B, T)
        loss = (1 - self.eps) * nll + self.eps * F.npx.reshape(smooth, (-2, -2))
        return (loss * mask).sum(), (nll * mask).sum()
