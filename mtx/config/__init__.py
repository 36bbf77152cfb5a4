"""Typed configuration, the one place where sizes and settings are checked: scripts turn Hydra's
DictConfig into these dataclasses once (`mtx.typecheck.from_dict`); the code below them sees only
typed values, so an unknown key or an impossible size fails before any work is done."""
from pathlib import Path

from ..errors import ConfigError
from .data import TOY_TASKS, DataConfig
from .decode import MAX_LENGTH_PENALTY, DecodeConfig
from .model import ModelConfig
from .run import Placement, RunConfig, RunKeys
from .train import KVSTORES, LOSS_SCALES, MKL_BFLOAT16, PRECISIONS, TRAIN_PRECISIONS, TrainConfig

# The Hydra configs: conf/, in the package as mtx/conf (a link, copied into wheels).
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

__all__ = ["CONF_DIR", "ConfigError", "DataConfig", "DecodeConfig", "KVSTORES", "LOSS_SCALES",
           "MAX_LENGTH_PENALTY", "MKL_BFLOAT16", "ModelConfig", "PRECISIONS", "Placement",
           "RunConfig", "RunKeys", "TOY_TASKS", "TRAIN_PRECISIONS", "TrainConfig"]
