"""Learning-rate schedule."""
import math


def inverse_sqrt_warmup(step, peak_lr, warmup_steps):
    """Linear warm-up to ``peak_lr`` over ``warmup_steps``, then decay as 1/sqrt(step)."""
    step = max(step, 1)
    return peak_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))
