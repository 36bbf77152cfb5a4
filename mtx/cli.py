"""What the scripts share: typed configs from Hydra's DictConfig, and one-line errors."""
import contextlib
import logging
import os
import sys

from .checkpoint import CheckpointError
from .config import ConfigError, DataConfig, DecodeConfig, ModelConfig, TrainConfig, from_dict
from .data import DataError
from .trainer import TrainingError
from .vocab import TokenizerError

USER_ERRORS = (ConfigError, DataError, CheckpointError, FileNotFoundError, TrainingError,
               TokenizerError)


@contextlib.contextmanager
def one_line_errors():
    """Bad input ends the program with ``error: <what and how to fix>`` and exit code 2."""
    try:
        yield
    except USER_ERRORS as err:
        logging.getLogger("mtx").error("%s", err)
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def typed(cfg, section):
    """A DictConfig section -> its dataclass (ModelConfig, DataConfig, ...)."""
    from omegaconf import OmegaConf
    classes = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig,
               "decode": DecodeConfig}
    values = OmegaConf.to_container(cfg[section], resolve=True)
    if section == "data" and values.get("raw_dir"):
        values["raw_dir"] = os.path.abspath(values["raw_dir"])
    return from_dict(classes[section], values, section)
