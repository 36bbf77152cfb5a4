"""The training's settings: `TrainConfig` (Hydra group ``train``)."""
import dataclasses
import math
from dataclasses import dataclass
from typing import List, Optional

from ..errors import ConfigError


KVSTORES = ("device", "local", "dist_sync", "dist_device_sync")
PRECISIONS = ("float32", "bfloat16", "float16")  # what matrix products run in
TRAIN_PRECISIONS = PRECISIONS + ("auto",)        # auto: measured at start (`mtx.training.precision`)
LOSS_SCALES = ("auto", "dynamic", "off")


@dataclass(frozen=True)
class TrainConfig:
    batch_tokens: int = 1024        # padded tokens per batch (longer side)
    lr: float = 1e-3                # peak learning rate
    warmup_steps: int = 1600        # linear warm-up, then inverse square root decay
    cooldown: float = 0.0           # the last fraction of the budget (max_minutes or max_epochs,
                                    # the nearer): the lr falls linearly to 0; 0 = none
    beta1: float = 0.9              # Adam's first-moment decay
    beta2: float = 0.98
    epsilon: float = 1e-9           # Adam's epsilon (outside the square root)
    weight_decay: float = 0.0       # on weight matrices only
    label_smoothing: float = 0.1
    rdrop_alpha: float = 0.0        # > 0 (e.g. 5): R-Drop, two dropout passes and this times
                                    # their symmetric KL (Liang et al. 2021); a step costs 2x
    rdrop_from: float = 0.0         # R-Drop only after this fraction of the budget (0: all of it)
    word_dropout: float = 0.0       # source and decoder-input subwords replaced by <unk> with
                                    # this probability (never the targets of the loss)
    clip_norm: float = 1.0          # global gradient norm; 0 disables
    max_nonfinite_steps: int = 20   # non-finite losses in a row before training stops
    max_epochs: int = 100
    max_minutes: Optional[float] = None  # wall-clock budget for training; then evaluate and stop
    patience: int = 0               # epochs without a better val BLEU before stopping; 0 = never
    save_every_minutes: float = 5.0  # also checkpoint inside an epoch this often (resume point)
    keep_last: int = 5              # epoch checkpoints kept
    average_last: int = 5           # average this many last checkpoints at the end; 0/1 = off
    ema_decay: float = 0.0          # > 0: validate, choose and translate a moving average
    log_every: int = 50             # steps between reads from the device (and resume points)
    eval_bleu: bool = True          # val BLEU (greedy) each epoch
    hybridize: bool = True
    resume: bool = False
    devices: Optional[List[str]] = None  # this process's, e.g. [gpu:0,gpu:1]; None: `device`
    kvstore: str = "device"         # what sums gradients: one of KVSTORES (README)
    # Matrix products in float32, bfloat16 or float16 (GPUs only); the rest stays float32. auto
    # (conf/train/default.yaml) times bfloat16 against float32 at start and keeps the faster
    # (`mtx.training.precision.choose_precision`). float32 here: runs built in code measure nothing.
    precision: str = "float32"
    loss_scale: str = "auto"        # dynamic loss scaling: auto (float16 only) | dynamic | off

    @property
    def dynamic_loss_scale(self):
        return self.loss_scale == "dynamic" or (self.loss_scale == "auto"
                                                and self.precision == "float16")

    def __post_init__(self):
        for setting in dataclasses.fields(self):  # nan passes every comparison below
            value = getattr(self, setting.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"train.{setting.name}={value}: give a finite number")
        if self.precision not in TRAIN_PRECISIONS:
            raise ConfigError(f"train.precision={self.precision}: choose one of "
                              f"{', '.join(TRAIN_PRECISIONS)}")
        if self.loss_scale not in LOSS_SCALES:
            raise ConfigError(f"train.loss_scale={self.loss_scale}: choose one of "
                              f"{', '.join(LOSS_SCALES)}")
        if self.kvstore not in KVSTORES:
            raise ConfigError(f"train.kvstore={self.kvstore}: choose one of {', '.join(KVSTORES)}")
        if self.devices is not None and not self.devices:
            raise ConfigError("train.devices=[] is empty: list at least one device, e.g. [cpu]")
        if self.batch_tokens < 8:
            raise ConfigError(f"train.batch_tokens={self.batch_tokens} is too small")
        if self.log_every < 1 or self.save_every_minutes < 0:
            raise ConfigError("train.log_every must be >= 1 and train.save_every_minutes >= 0")
        if self.lr <= 0 or self.warmup_steps < 1:
            raise ConfigError(f"train.lr={self.lr}, train.warmup_steps={self.warmup_steps}: "
                              f"give a learning rate > 0 and 1 or more warm-up steps")
        if not 0 <= self.cooldown <= 1:
            raise ConfigError(f"train.cooldown={self.cooldown}: give the fraction of the budget "
                              f"in which the learning rate falls to 0, from 0 (none) to 1, "
                              f"e.g. 0.2")
        if not 0 <= self.ema_decay < 1:
            raise ConfigError(f"train.ema_decay={self.ema_decay}: 0 (off) or a decay in (0, 1), "
                              f"e.g. 0.999")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ConfigError(f"train.max_minutes={self.max_minutes}: give minutes > 0, or null "
                              f"for no time limit (then train.max_epochs stops training)")
        at_least = {"max_epochs": 1, "max_nonfinite_steps": 1, "keep_last": 0, "patience": 0,
                    "average_last": 0}
        for key, low in at_least.items():
            if getattr(self, key) < low:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be at least {low}")
        for key in ("label_smoothing", "beta1", "beta2", "rdrop_from", "word_dropout"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be in [0, 1)")
        if min(self.clip_norm, self.weight_decay, self.epsilon, self.rdrop_alpha) < 0:
            raise ConfigError("train.clip_norm, train.weight_decay, train.epsilon and "
                              "train.rdrop_alpha must be >= 0 (clip_norm, weight_decay or "
                              "rdrop_alpha 0: off)")
