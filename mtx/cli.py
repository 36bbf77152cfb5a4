"""What the scripts share: typed configs from Hydra's DictConfig, and one-line errors."""
import contextlib
import logging
import os
import sys
import traceback

from .config import DataConfig, DecodeConfig, ModelConfig, TrainConfig, from_dict
from .errors import MtxError

USER_ERRORS = (MtxError, FileNotFoundError)


def _cluster_worker():
    """A worker process of a KVStore cluster (started by mxnet.tools.launch)."""
    return os.environ.get("DMLC_ROLE") == "worker"


def _exit(code):
    """Exit with ``code``; a KVStore cluster worker exits at once, because a normal exit waits
    for every other worker (ps-lite's final barrier) and the job would hang (scripts/launch.py
    then stops the whole job)."""
    if _cluster_worker():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


@contextlib.contextmanager
def one_line_errors():
    """Bad input ends the program with ``error: <what and how to fix>`` and exit code 2."""
    try:
        yield
    except USER_ERRORS as err:
        logging.getLogger("mtx").error("%s", err)
        print(f"error: {err}", file=sys.stderr)
        _exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        _exit(130)
    except Exception:
        if not _cluster_worker():
            raise
        traceback.print_exc()
        _exit(1)


def typed(cfg, section):
    """A DictConfig section -> its dataclass (ModelConfig, DataConfig, ...)."""
    from omegaconf import OmegaConf
    classes = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig,
               "decode": DecodeConfig}
    values = OmegaConf.to_container(cfg[section], resolve=True)
    if section == "data" and values.get("raw_dir"):
        values["raw_dir"] = os.path.abspath(values["raw_dir"])
    return from_dict(classes[section], values, section)


def decoding_setup(cfg):
    """What translate/evaluate start from: (DecodeConfig, device, hybridized model, tokenizer,
    the run's DataConfig), the model rebuilt from the run directory ``cfg.ckpt``."""
    from .run import load_run
    from .devices import resolve_device
    decode_cfg = typed(cfg, "decode")
    ctx = resolve_device(cfg.device)
    model, tokenizer, data_cfg = load_run(cfg.ckpt, ctx, cfg.checkpoint)
    model.hybridize(static_alloc=True)
    return decode_cfg, ctx, model, tokenizer, data_cfg
