"""Typed configuration, the one place where sizes and settings are checked: scripts turn Hydra's
DictConfig into these dataclasses once (`mtx.typecheck.from_dict`); the code below them sees only
typed values, so an unknown key or an impossible size fails before any work is done."""
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from .errors import ConfigError
from .topology import attention_layers

# The Hydra configs: conf/, in the package as mtx/conf (a link, copied into wheels).
CONF_DIR = Path(__file__).resolve().parent / "conf"


@dataclass(frozen=True)
class ModelConfig:
    num_hiddens: int = 256          # D, the model width
    num_heads: int = 4              # H; each head is D / H wide
    ffn_num_hiddens: int = 1024     # inner width of the position-wise FFN
    num_encoder_layers: int = 3
    num_decoder_layers: int = 3
    dropout: float = 0.1            # on embeddings and sublayer outputs
    attention_dropout: float = 0.1  # on attention weights
    tie_embeddings: bool = True     # one matrix for source, target and output (shared vocabulary)
    pre_norm: bool = False          # LayerNorm before each sublayer instead of after
    max_len: int = 1024             # longest sequence the positional table covers
    vocab_size: int = 0             # taken from the data; 0 until it is known
    heads_per_layer: Optional[List[int]] = None  # after pruning (`attention_layers`); None: H

    def __post_init__(self):
        if self.num_heads < 1 or self.num_hiddens % self.num_heads:
            raise ConfigError(f"model.num_hiddens={self.num_hiddens} is not divisible by "
                              f"model.num_heads={self.num_heads}; pick a head count that divides "
                              f"the width (each head is num_hiddens / num_heads wide)")
        for key in ("num_hiddens", "ffn_num_hiddens", "num_encoder_layers", "num_decoder_layers"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be at least 1")
        for key in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(f"model.{key}={getattr(self, key)} must be in [0, 1)")
        if self.max_len < 2:  # a subword and the end-of-sentence mark
            raise ConfigError(f"model.max_len={self.max_len}: give at least 2 positions (a "
                              f"subword and the end of the sentence); the default is 1024")
        if self.heads_per_layer is not None and len(self.heads_per_layer) != self.num_attention_layers:
            raise ConfigError(f"model.heads_per_layer has {len(self.heads_per_layer)} entries; "
                              f"the model has {self.num_attention_layers} attention layers")

    @property
    def max_src_len(self):
        """The longest source (and output) in subwords: the positions less its EOS (or BOS)."""
        return self.max_len - 1

    @property
    def head_dim(self):
        return self.num_hiddens // self.num_heads

    def attention_layers(self):
        """[`mtx.topology.AttentionLayer`] of this model, in the order of every (A, H) array."""
        return attention_layers(self.num_encoder_layers, self.num_decoder_layers)

    @property
    def num_attention_layers(self):
        """A, the number of rows of `attention_layers`."""
        return len(self.attention_layers())

    def attention_row(self, kind, layer):
        """The row of attention layer (``kind``, ``layer``), e.g. ('decoder cross', 0)."""
        return next(a.row for a in self.attention_layers() if (a.kind, a.layer) == (kind, layer))

    def heads_of(self, row):
        """Heads of the attention layer in row ``row`` of `attention_layers`."""
        return self.num_heads if self.heads_per_layer is None else self.heads_per_layer[row]

    @property
    def heads_by_layer(self):
        """[heads of each attention layer], in `attention_layers` order."""
        return [self.heads_of(row) for row in range(self.num_attention_layers)]

    @property
    def total_heads(self):
        """The heads of every attention layer together (a pruned model's layers may differ)."""
        return sum(self.heads_by_layer)


TOY_TASKS = ("copy", "reverse")  # the toy task: the target is the source copied or reversed


@dataclass(frozen=True)
class DataConfig:
    name: str = "multi30k"          # multi30k | toy
    src_lang: str = "en"
    tgt_lang: str = "de"
    raw_dir: Optional[str] = None   # a local copy of Multi30k task1/raw; else MTX_MULTI30K_DIR; else download
    vocab_size: int = 8000          # joint SentencePiece vocabulary
    # training pairs longer than this (in subwords) are skipped; its key is data.max_len
    max_pair_len: int = field(default=128, metadata={"key": "max_len"})
    subword_dropout: float = 0.0    # BPE-dropout of the training split, resampled every epoch
    task: str = "reverse"           # the toy task's: one of TOY_TASKS
    num_symbols: int = 20
    min_len: int = 3
    max_toy_len: int = 12
    sizes: List[int] = field(default_factory=lambda: [4000, 200, 200])

    def __post_init__(self):
        if self.name not in ("multi30k", "toy"):
            raise ConfigError(f"data.name={self.name}: choose multi30k or toy")
        if self.vocab_size < 16:
            raise ConfigError(f"data.vocab_size={self.vocab_size} is too small (at least 16)")
        if self.max_pair_len < 1:
            raise ConfigError(f"data.max_len={self.max_pair_len} must be at least 1")
        if not 0.0 <= self.subword_dropout < 1.0 or (self.subword_dropout and self.name == "toy"):
            raise ConfigError(f"data.subword_dropout={self.subword_dropout}: give a probability "
                              f"in [0, 1) (0.1 is usual), for a SentencePiece corpus (not toy)")
        if self.name == "toy":
            if self.task not in TOY_TASKS:
                raise ConfigError(f"data.task={self.task}: the toy task is one of "
                                  f"{', '.join(TOY_TASKS)}")
            if self.num_symbols < 2 or not 1 <= self.min_len <= self.max_toy_len:
                raise ConfigError(f"data.num_symbols={self.num_symbols}, data.min_len="
                                  f"{self.min_len}, data.max_toy_len={self.max_toy_len}: need at "
                                  f"least 2 symbols and 1 <= min_len <= max_toy_len")
            if len(self.sizes) != 3 or min(self.sizes) < 1:
                raise ConfigError(f"data.sizes={list(self.sizes)}: give three positive sizes, "
                                  f"[train, val, test]")


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
    # Data parallelism: devices of this process (None: the top-level `device`), e.g. [gpu:0,gpu:1];
    # the KVStore that sums gradients: device | local | dist_sync | dist_device_sync (README).
    devices: Optional[List[str]] = None
    kvstore: str = "device"
    # Matrix products in float32, bfloat16 or float16 (GPUs only); the rest stays float32. auto
    # (conf/train/default.yaml) times bfloat16 against float32 at start and keeps the faster
    # (`mtx.training.precision.choose_precision`). float32 here: runs built in code measure nothing.
    precision: str = "float32"
    # Dynamic loss scaling (on the device): auto = on for float16 only | dynamic | off.
    loss_scale: str = "auto"

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
        for key in ("label_smoothing", "beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ConfigError(f"train.{key}={getattr(self, key)} must be in [0, 1)")
        if self.clip_norm < 0 or self.weight_decay < 0 or self.epsilon < 0:
            raise ConfigError("train.clip_norm, train.weight_decay and train.epsilon must be >= 0 "
                              "(clip_norm=0 or weight_decay=0: off)")


@dataclass(frozen=True)
class DecodeConfig:
    beam_size: int = 5
    length_penalty: float = 1.5     # GNMT alpha (`gnmt_penalty`), 0 to 10; chosen on val
    max_len_a: float = 1.5          # max output length = a * source length + b (`output_limits`)
    max_len_b: int = 10
    nbest: int = 1
    batch_tokens: int = 4096

    def greedy(self):
        """Greedy (beam 1, no length penalty, one output): validation's and the head study's."""
        return dataclasses.replace(self, beam_size=1, length_penalty=0.0, nbest=1)

    def __post_init__(self):
        if self.beam_size < 1:
            raise ConfigError(f"decode.beam_size={self.beam_size} must be at least 1")
        if not 1 <= self.nbest <= self.beam_size:
            raise ConfigError(f"decode.nbest={self.nbest} must be between 1 and decode.beam_size")
        if not (math.isfinite(self.length_penalty)
                and 0 <= self.length_penalty <= MAX_LENGTH_PENALTY):
            raise ConfigError(f"decode.length_penalty={self.length_penalty}: give a number from "
                              f"0 (no penalty) to {MAX_LENGTH_PENALTY}; 1.5 is the default")
        if self.batch_tokens < 1:
            raise ConfigError(f"decode.batch_tokens={self.batch_tokens}: give 1 or more source "
                              f"subwords per batch")
        if (not math.isfinite(self.max_len_a) or self.max_len_a < 0 or self.max_len_b < 0
                or self.max_len_a == self.max_len_b == 0):
            raise ConfigError(f"decode.max_len_a={self.max_len_a}, decode.max_len_b="
                              f"{self.max_len_b}: the output limit a * source length + b needs "
                              f"a, b >= 0 and one of them > 0")


# Above it ((5 + length) / 6) ** alpha leaves float32's range: long hypotheses all score alike.
MAX_LENGTH_PENALTY = 10
