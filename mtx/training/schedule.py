"""Learning-rate schedule."""
import math


def inverse_sqrt_warmup(step, peak_lr, warmup_steps):
    """Linear warm-up to ``peak_lr`` over ``warmup_steps``, then decay as 1/sqrt(step)."""
    step = max(step, 1)
    return peak_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))


def learning_rate(step, train_cfg, budget_spent=0.0):
    """The learning rate of update ``step`` (counted from 1): `inverse_sqrt_warmup`, and in the
    last ``train_cfg.cooldown`` of the training budget falling linearly to 0 at its end.
    ``budget_spent``: the fraction of the budget spent, 0 to 1 (`Fit.budget_spent`)."""
    lr = inverse_sqrt_warmup(step, train_cfg.lr, train_cfg.warmup_steps)
    if train_cfg.cooldown > 0:
        lr *= min(1.0, max(0.0, (1.0 - budget_spent) / train_cfg.cooldown))
    return lr
