"""An exponential moving average of the weights, kept during training (train.ema_decay > 0).

After every update ``shadow = d * shadow + (1 - d) * weight`` on the first device, with
``d = min(ema_decay, (1 + step) / (10 + step))`` so that the first steps do not average in the
random initialisation for long (TensorFlow's ExponentialMovingAverage with num_updates).

Where the average is used: the end-of-epoch validation (`applied`), and every checkpoint, which
stores it as its ``ema`` file beside the raw parameters: a resume loads both, and anything that
loads a checkpoint for translation (`mtx.runs.checkpoints.CheckpointStore.load` without a trainer:
the final choice, averaging, translate, evaluate) loads the average.
"""
import contextlib


class WeightAverage:
    """The moving average of ``params`` (the trainable `Parameter`s) on device ``ctx``."""

    def __init__(self, params, ctx, decay):
        self.params, self.ctx, self.decay = list(params), ctx, decay
        self.shadow = [p.data(ctx).copy() for p in self.params]

    def update(self, step):
        """Fold in the weights after update ``step`` (counted from 1); queued on the device."""
        d = min(self.decay, (1.0 + step) / (10.0 + step))
        for shadow, param in zip(self.shadow, self.params):
            shadow *= d
            shadow += (1.0 - d) * param.data(self.ctx)

    @contextlib.contextmanager
    def applied(self):
        """The model holds the average inside the block (on every device), its own weights
        again after it. Whatever the block loads into the model becomes the average (how a
        checkpoint's ``ema`` file is restored)."""
        raw = [p.data(self.ctx).copy() for p in self.params]
        for shadow, param in zip(self.shadow, self.params):
            param.set_data(shadow)
        try:
            yield
        finally:
            for i, (weights, param) in enumerate(zip(raw, self.params)):
                self.shadow[i] = param.data(self.ctx).copy()
                param.set_data(weights)
