"""The training's settings: `TrainConfig` (Hydra group ``train``)."""
from dataclasses import dataclass
from typing import ClassVar, Dict, List, Optional

from ..errors import ConfigError
from ..typecheck import check_settings, setting


KVSTORES = ("device", "local", "dist_sync", "dist_device_sync")
# what matrix products run in: bfloat16-mkl is bfloat16 through oneMKL (AMX where the CPU has it)
MKL_BFLOAT16 = "bfloat16-mkl"
PRECISIONS = ("float32", "bfloat16", MKL_BFLOAT16, "float16")
TRAIN_PRECISIONS = PRECISIONS + ("auto",)        # auto: measured at start (`mtx.training.precision`)
LOSS_SCALES = ("auto", "dynamic", "off")


@dataclass(frozen=True)
class TrainConfig:
    """The training's settings. conf/train/default.yaml, what mtx-train uses, differs in two:
    a 60-minute budget and precision auto (a run built in code measures nothing and has no
    clock)."""
    # {old key: key} of settings renamed: runs and configs written before still load
    # (`mtx.typecheck.renamed`)
    RENAMED: ClassVar[Dict[str, str]] = {}
    batch_tokens: int = setting(1024, "target-side padded tokens a step, 8 or more; 1024 gives "
                                      "twice the updates of 2048, the better hour", low=8)
    lr: float = setting(1e-3, "the peak learning rate, > 0", above=0)
    warmup_steps: int = setting(1600, "linear warm-up steps, then inverse square root decay, 1 "
                                      "or more", low=1)
    cooldown: float = setting(0.0, "the last fraction of the budget (max_minutes or max_epochs, "
                                   "the nearer) in which the lr falls linearly to 0, from 0 "
                                   "(none) to 1, e.g. 0.2", low=0, high=1)
    beta1: float = setting(0.9, "Adam's first-moment decay, in [0, 1)", low=0, below=1)
    beta2: float = setting(0.98, "Adam's second-moment decay, in [0, 1)", low=0, below=1)
    epsilon: float = setting(1e-9, "Adam's epsilon (outside the square root), >= 0", low=0)
    weight_decay: float = setting(0.0, "the decay of weight matrices only, >= 0 (0: off)", low=0)
    label_smoothing: float = setting(0.1, "a smoothing in [0, 1)", low=0, below=1)
    rdrop_alpha: float = setting(0.0, "> 0 (e.g. 5): R-Drop, two dropout passes and this times "
                                      "their symmetric KL (Liang et al. 2021), a step costs 2.5x; "
                                      "0: off", low=0)
    rdrop_from: float = setting(0.0, "R-Drop only after this fraction of the budget, in [0, 1) "
                                     "(e.g. 0.5: the second half)", low=0, below=1)
    z_loss: float = setting(0.0, "> 0 (e.g. 1e-4): this times the squared log of the softmax's "
                                 "normaliser at each target position, added to the loss "
                                 "(PaLM's z-loss, keeps the logits from drifting); 0: off", low=0)
    word_dropout: float = setting(0.0, "the probability that a source or decoder-input subword "
                                       "is replaced by <unk> (never a loss target), in [0, 1), "
                                       "e.g. 0.1", low=0, below=1)
    clip_norm: float = setting(1.0, "the global gradient norm, >= 0 (0: off)", low=0)
    max_nonfinite_steps: int = setting(20, "non-finite losses in a row before training stops, "
                                           "1 or more", low=1)
    max_epochs: int = setting(100, "1 or more epochs", low=1)
    max_minutes: Optional[float] = setting(None, "the wall-clock budget in minutes, > 0 (then "
                                                 "evaluate and stop), or null for none (then "
                                                 "train.max_epochs stops training)", above=0)
    validate_every: Optional[int] = setting(None, "the updates between two validations (each "
                                                  "checkpointed as step_NNNNNN, one more at the "
                                                  "end), 1 or more, e.g. 2000 where an epoch "
                                                  "outlasts the budget; null: validate at every "
                                                  "epoch's end", low=1)
    patience: int = setting(0, "validations without a better val BLEU before stopping, 0 "
                               "(never) or more", low=0)
    save_every_minutes: float = setting(5.0, "minutes between resume points inside an epoch, "
                                             ">= 0", low=0)
    keep_last: int = setting(5, "validated checkpoints kept (epoch_NNN or step_NNNNNN), 0 or "
                                "more", low=0)
    average_last: int = setting(5, "the last validated checkpoints averaged at the end, 0 or "
                                   "more (0/1: off)", low=0)
    ema_decay: float = setting(0.0, "0 (off) or a decay in (0, 1), e.g. 0.999: validate, choose "
                                    "and translate a moving average of the weights",
                               low=0, below=1)
    log_every: int = setting(50, "steps between reads from the device (and resume points), 1 or "
                                 "more", low=1)
    eval_bleu: bool = setting(True, "true: val BLEU (greedy) at each validation")
    hybridize: bool = setting(True, "true: the model as one graph")
    resume: bool = setting(False, "true: go on with the run in the output folder")
    devices: Optional[List[str]] = setting(None, "this process's devices, e.g. [gpu:0,gpu:1], "
                                                 "or null: the top-level device=")
    kvstore: str = setting("device", f"what sums gradients, one of {', '.join(KVSTORES)} "
                                     f"(README)", choices=KVSTORES)
    # Matrix products in float32, bfloat16 (MXNet's or oneMKL's) or float16 (GPUs only); the
    # rest stays float32.
    precision: str = setting("float32", f"one of {', '.join(TRAIN_PRECISIONS)} (auto times "
                                        f"the bfloat16 products against float32 at start and "
                                        f"keeps the fastest, `mtx.training.precision`)",
                             choices=TRAIN_PRECISIONS)
    loss_scale: str = setting("auto", f"dynamic loss scaling, one of {', '.join(LOSS_SCALES)} "
                                      f"(auto: on for float16)", choices=LOSS_SCALES)

    @property
    def dynamic_loss_scale(self):
        return self.loss_scale == "dynamic" or (self.loss_scale == "auto"
                                                and self.precision == "float16")

    def __post_init__(self):
        check_settings(self, "train.")
        if self.devices is not None and not self.devices:
            raise ConfigError("train.devices=[] is empty: list at least one device, e.g. [cpu]")
