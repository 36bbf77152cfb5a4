"""Typed configuration: the one place where sizes and settings are checked.

Scripts turn Hydra's DictConfig into these dataclasses once (`from_dict`); the code below them
sees only typed values, so an unknown key or an impossible size fails before any work is done.
"""
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, NamedTuple, Optional

from .errors import ConfigError

# The Hydra configs: the repository's conf/, which travels with the package as mtx/conf (a
# symbolic link in the repository, copied into wheels), so every command finds it from any
# working directory.
CONF_DIR = Path(__file__).resolve().parent / "conf"



def parse_device(device):
    """A device name, ``cpu``, ``cpu:N``, ``gpu``, ``gpu:N`` or ``auto`` -> (kind, index);
    ConfigError for anything else. (MXNet-free: `mtx.devices` turns it into a context, the
    CTranslate2 backend into its own device names.)"""
    kind, colon, index = str(device).partition(":")
    if kind not in ("cpu", "gpu", "auto") or (colon and (kind == "auto" or not index.isdigit())):
        raise ConfigError(f"device={device} is not a device name: use cpu, cpu:N, gpu, gpu:N "
                          f"or auto")
    return kind, int(index or 0)


def read_config(cls, path, what):
    """``cls`` (e.g. ModelConfig) from the JSON file ``path`` a run wrote (``what``, e.g. "model
    config"): missing, damaged or not such a config -> a one-line CheckpointError naming it."""
    from .errors import CheckpointError
    from .files import read_json
    values = read_json(path, CheckpointError, f"{what} of the run")
    try:
        return cls(**values)
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: not a valid {what} ({err})") from None


def is_whole(value):
    """An int of a config (YAML reads ``true`` as a bool, which Python counts as the int 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    """An int or float of a config, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def from_dict(cls, values, section):
    """Build dataclass ``cls`` from a mapping. ConfigError names ``section.key`` for an unknown
    key, and for a value whose type does not fit the field's (int; float, which takes an int
    too; bool; str; Optional[...]; List[...]; other annotations are not checked)."""
    import typing

    def fits(value, hint):
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Union:
            return any(fits(value, arg) for arg in args)
        if origin is list:
            return isinstance(value, list) and all(fits(item, args[0]) for item in value)
        if hint in (int, float):  # True is an int to Python, not to a config
            return is_whole(value) if hint is int else is_number(value)
        return isinstance(value, hint) if isinstance(hint, type) else True

    def spell(hint):
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin is typing.Union:
            return " or ".join(spell(arg) for arg in args)
        if origin is list:
            return f"a list of {spell(args[0])}"
        return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))

    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ConfigError(f"unknown key(s) {', '.join(section + '.' + k for k in unknown)}; "
                          f"valid keys of {section}: {', '.join(sorted(names))}")
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        if not fits(value, hints[key]):
            raise ConfigError(f"{section}.{key}={value!r} has type {spell(type(value))}; "
                              f"expected {spell(hints[key])}")
    return cls(**values)


class AttentionLayer(NamedTuple):
    """One attention layer of the model, as `ModelConfig.attention_layers` lists them."""
    row: int    # its row in (A, H) head gates, importance scores and weight lists
    name: str   # short label: 'enc0 self', 'dec1 cross'
    kind: str   # 'encoder self' | 'decoder self' | 'decoder cross'
    layer: int  # index of its encoder or decoder layer

    @property
    def queries(self):
        """Which sequence the queries come from: 'source' or 'target'."""
        return "source" if self.kind == "encoder self" else "target"

    @property
    def keys(self):
        """Which sequence the keys come from: 'source' or 'target'."""
        return "target" if self.kind == "decoder self" else "source"


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
    # Heads kept per attention layer after physical pruning, in `attention_layers` order;
    # None means num_heads everywhere.
    heads_per_layer: Optional[List[int]] = None

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
        if self.heads_per_layer is not None and len(self.heads_per_layer) != self.num_attention_layers:
            raise ConfigError(f"model.heads_per_layer has {len(self.heads_per_layer)} entries; "
                              f"the model has {self.num_attention_layers} attention layers")

    @property
    def max_src_len(self):
        """The longest source in subwords: the positions less the source's EOS (and the most
        output subwords, less the target's BOS)."""
        return self.max_len - 1

    @property
    def head_dim(self):
        return self.num_hiddens // self.num_heads

    def attention_layers(self):
        """The attention layers in the one order that every per-layer list and (A, H) array
        uses (head gates, importance rows, `heads_per_layer`, weights, pictures): the encoder's
        self-attention layers, then self and cross for each decoder layer."""
        kinds = ([("enc", "encoder self", i) for i in range(self.num_encoder_layers)]
                 + [("dec", f"decoder {part}", i) for i in range(self.num_decoder_layers)
                    for part in ("self", "cross")])
        return [AttentionLayer(row, f"{side}{layer} {kind.split()[1]}", kind, layer)
                for row, (side, kind, layer) in enumerate(kinds)]

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
    max_len: int = 128              # training pairs longer than this (in subwords) are skipped
    # toy task
    task: str = "reverse"           # one of TOY_TASKS
    num_symbols: int = 20
    min_len: int = 3
    max_toy_len: int = 12
    sizes: List[int] = field(default_factory=lambda: [4000, 200, 200])

    def __post_init__(self):
        if self.name not in ("multi30k", "toy"):
            raise ConfigError(f"data.name={self.name}: choose multi30k or toy")
        if self.vocab_size < 16:
            raise ConfigError(f"data.vocab_size={self.vocab_size} is too small (at least 16)")
        if self.max_len < 1:
            raise ConfigError(f"data.max_len={self.max_len} must be at least 1")
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
TRAIN_PRECISIONS = PRECISIONS + ("auto",)        # auto: measured at start (`mtx.precision`)
LOSS_SCALES = ("auto", "dynamic", "off")


@dataclass(frozen=True)
class TrainConfig:
    batch_tokens: int = 1024        # padded tokens per batch (longer side)
    lr: float = 1e-3                # peak learning rate
    warmup_steps: int = 1600        # linear warm-up, then inverse square root decay
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
    ema_decay: float = 0.0          # > 0: keep an exponential moving average of the weights
                                    # (mtx/training/ema.py) and validate, choose and translate it
    log_every: int = 50             # steps between progress/metric reads from the device; the
                                    # mid-epoch checkpoints and dropout reseeding happen there too
    eval_bleu: bool = True          # val BLEU (greedy) each epoch
    hybridize: bool = True
    resume: bool = False
    # Data parallelism: devices of this process (None: the top-level `device`), e.g. [gpu:0,gpu:1];
    # the KVStore that sums gradients: device | local (one machine), dist_sync |
    # dist_device_sync (a cluster started by mxnet.tools.launch; see README).
    devices: Optional[List[str]] = None
    kvstore: str = "device"
    # Matrix multiplies in float32, bfloat16 or float16 (weights, optimizer, LayerNorm, softmax
    # and loss stay float32); bfloat16 pays off on some CPUs with AVX512-BF16 and not on others
    # (docs/performance.md), float16 is for GPUs (MXNet's float16 FullyConnected is cuDNN-only).
    # auto (conf/train/default.yaml) times bfloat16 against float32 at start and keeps the
    # faster (`mtx.precision.choose_precision`); a resumed run keeps its first choice. Here
    # float32, so runs built in code (tests, benchmarks) do not depend on a measurement.
    precision: str = "float32"
    # Dynamic loss scaling (on the device): auto = on for float16 only | dynamic | off.
    loss_scale: str = "auto"

    @property
    def dynamic_loss_scale(self):
        return self.loss_scale == "dynamic" or (self.loss_scale == "auto"
                                                and self.precision == "float16")

    def __post_init__(self):
        for field in dataclasses.fields(self):  # nan passes every comparison below
            value = getattr(self, field.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"train.{field.name}={value}: give a finite number")
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
        """This config searching greedily (beam 1, no length penalty, one output): what
        validation BLEU and the head study's BLEU use, with the same output limits and batches."""
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


# Above it, ((5 + length) / 6) ** alpha soon leaves float32's range and every hypothesis of a
# long sentence scores the same.
MAX_LENGTH_PENALTY = 10
