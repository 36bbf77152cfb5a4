"""The keys of a command itself (not of a group), declared once: `Placement` (``device=``, of
every command that runs a model), `RunKeys` (mtx-train's ``seed=``, ``init_from=``, and
``device=``), and `RunConfig`, one training run's whole configuration: its four groups and its
keys, built once by mtx-train (`mtx.commands.train`) or by a program calling
`mtx.training.train`, and passed down whole."""
from dataclasses import dataclass, field
from typing import Optional

from .. import datadir
from ..typecheck import check_settings, setting, to_keys
from .data import DataConfig
from .decode import DecodeConfig
from .model import ModelConfig
from .train import TrainConfig


@dataclass(frozen=True)
class Placement:
    """Where a command runs its model (Hydra root ``device_declared``)."""
    device: str = setting("auto", "auto (a GPU when MXNet sees one it has kernels for, else the "
                                  "CPU; logged), cpu, gpu or gpu:N")

    def __post_init__(self):
        check_settings(self)


@dataclass(frozen=True)
class RunKeys(Placement):
    """mtx-train's own keys (Hydra root ``train_declared``)."""
    seed: int = setting(1, "an integer: the run's random streams (initial weights, batch order, "
                           "dropout) all follow from it")
    init_from: Optional[str] = setting(None, "a trained run's directory: start from its weights "
                                             "and tokenizer (fine-tuning on this corpus with its "
                                             "model settings), or null")


@dataclass(frozen=True)
class RunConfig(RunKeys):
    """One training run: the groups ``model``, ``data``, ``train``, ``decode`` and mtx-train's own
    keys. ``data_dir``: where downloads and subword models go (by default mtx's data directory,
    `mtx.datadir.data_dir`; mtx-train gives ``paths.data_dir``)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    data_dir: str = field(default_factory=lambda: str(datadir.data_dir()))

    def as_keys(self):
        """{key: value} as mtx-train's composed config has them (``model``, ``data``, ``train``,
        ``decode`` as mappings of their keys): what config.yaml keeps of a run built in code."""
        return {"seed": self.seed, "device": self.device, "init_from": self.init_from,
                **{group: to_keys(getattr(self, group))
                   for group in ("model", "data", "train", "decode")}}
