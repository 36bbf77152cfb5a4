"""Adam with gradient clipping and the non-finite guard on the device, in fused kernels.

Per step and device: one `multi_sum_sq` gives the global gradient norm; the clip factor and the
1/tokens normalisation become one scale array (0 when the norm is not finite); MXNet's fused
`multi_adamw_update` applies it (one parameter per kernel: `aggregate_num`) and skips the whole
update when the scale is 0 or not finite. No gradient is rewritten and nothing is read back to the
host, so the Python thread keeps queueing the next step.
"""
import math

import mxnet as mx
from mxnet import optimizer as mx_optimizer


def gradient_scale(grads, max_norm, num_tokens):
    """Gradients summed over ``num_tokens`` target tokens (arrays on one device) ->
    (scale, finite), both (1,) arrays on that device: scale = min(1, max_norm / norm) / num_tokens
    with norm the per-token global norm (no clipping when ``max_norm`` <= 0), or 0 when the norm
    is not finite; finite = 1.0 or 0.0. ``num_tokens`` may be a (1,) device array (tokens times
    a loss scale)."""
    grads = [g.as_nd_ndarray() for g in grads]
    norm = mx.nd.multi_sum_sq(*grads, num_arrays=len(grads)).sum().sqrt() / num_tokens
    finite = mx.nd.contrib.isfinite(norm)
    clip = mx.nd.minimum(max_norm / (norm + 1e-6), 1.0) if max_norm > 0 else mx.nd.ones_like(norm)
    return mx.nd.where(finite, clip / num_tokens, mx.nd.zeros_like(norm)), finite


class DynamicLossScale:
    """Dynamic loss scaling for float16 products, kept on the device (no host reads).

    The loss is multiplied by ``value`` (a (1,) array) before the backward pass and the gradients
    divided by it again (`gradient_scale` with tokens x value), so small float16 gradients do not
    underflow. `update` after every step: a non-finite step (skipped by `GuardedAdam`) halves the
    scale; ``window`` finite steps in a row double it."""

    def __init__(self, ctx, init=2.0 ** 10, window=1000):
        self.value = mx.nd.full((1,), init, ctx=ctx)
        self.finite_run = mx.nd.zeros((1,), ctx=ctx)
        self.window = window

    def update(self, finite):
        """``finite``: the (1,) flag of `gradient_scale` for this step."""
        run = (self.finite_run + 1) * finite
        grow = run >= self.window
        self.value = mx.nd.where(finite, mx.nd.where(grow, self.value * 2, self.value),
                                 self.value / 2)
        self.finite_run = mx.nd.where(grow, mx.nd.zeros_like(run), run)


@mx_optimizer.register
class GuardedAdam(mx_optimizer.Optimizer):
    """Adam as MXNet's (bias-corrected, epsilon outside the square root) whose gradient scale is a
    device array, ``scales[context]``, set before every update (see `gradient_scale`). Weight
    decay is decoupled (AdamW), ``wd * lr`` per step."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        # parameters per fused update kernel: MXNet's multi_adamw_update walks its parameters in
        # lock step (element i of every one, then i + 1): 32 parameters a kernel are 224 memory
        # streams at once, one parameter is 7 (what that bought: docs/performance.md)
        self.aggregate_num = 1
        self.scales = {}

    def __getstate__(self):
        state = super().__getstate__()
        state["scales"] = {}  # device arrays of one step; set again before the next
        return state

    def create_state(self, index, weight):
        return (mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype),   # mean
                mx.nd.zeros(weight.shape, weight.context, dtype=weight.dtype))   # variance

    def update(self, index, weight, grad, state):
        if not isinstance(index, (list, tuple)):
            index, weight, grad, state = [index], [weight], [grad], [state]
        lrs, wds = [], []
        for i in index:
            self._update_count(i)
            t, lr = self._index_update_count[i], self._get_lr(i)
            lrs.append(lr * math.sqrt(1 - self.beta2 ** t) / (1 - self.beta1 ** t))
            wds.append(self._get_wd(i) * lr)
        means, variances = zip(*state)
        mx.nd.contrib.multi_adamw_update(list(weight), list(grad), list(means), list(variances),
                                         self.scales[weight[0].context], lrs=lrs, wds=wds,
                                         etas=[1.0] * len(weight), beta1=self.beta1,
                                         beta2=self.beta2, epsilon=self.epsilon,
                                         out=list(weight))

    update_multi_precision = update
