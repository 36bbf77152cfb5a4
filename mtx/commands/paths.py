"""Checks of the paths a command reads and writes, made before any work: a path that cannot be
used is one line naming the key (``input=``, ``output=``, ``out_dir=``) and the fix, not a
failure after minutes of translating."""
import os
from pathlib import Path

from ..config import CONF_DIR
from ..errors import ConfigError, DataError, FileWriteError


def refuse_null_paths(cfg, config_name):
    """A key the command cannot do without (``???`` in conf/<config_name>.yaml) or the data
    directory, set to null on the command line, is one line (not a crash deep in the command)."""
    from omegaconf import OmegaConf
    defaults = OmegaConf.load(CONF_DIR / f"{config_name}.yaml")
    for key in defaults:
        required = OmegaConf.is_missing(defaults, key) or key == "data_dir"
        if required and not OmegaConf.is_missing(cfg, key) and cfg[key] is None:
            fix = ("leave it out for the default" if key == "data_dir"
                   else f"see conf/{config_name}.yaml")
            raise ConfigError(f"{key}=null: {config_name} needs {key}=<a path>; {fix}")


def readable_file(path, key):
    """Check that ``key=path`` names a file that can be read, before any work; returns it."""
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise DataError(f"{key}={path}: {err.strerror or err}; give an existing, readable "
                        f"file") from None
    return Path(path)


def writable_file(path, key):
    """Check that ``key=path`` can be written (without touching it), before any work."""
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        problem = "is a directory"
    elif not parent.is_dir():
        problem = f"the directory {parent} does not exist"
    elif not os.access(parent, os.W_OK | os.X_OK) or (path.exists()
                                                      and not os.access(path, os.W_OK)):
        problem = f"{path if path.exists() else 'the directory ' + str(parent)} is not writable"
    else:
        return path
    raise FileWriteError(f"{key}={path}: {problem}; give a file in an existing, writable "
                         f"directory")


def writable_out_dir(cfg, name):
    """Where evaluate/heads write: ``out_dir=``, else <run>/<name>; created and checked before
    any work (a run directory can be read-only, e.g. a shared copy)."""
    path = Path(cfg.out_dir) if cfg.get("out_dir") else Path(cfg.ckpt) / name
    if path.exists() and not path.is_dir():
        key = "out_dir=" if cfg.get("out_dir") else ""
        raise FileWriteError(f"{key}{path} is a file; give a directory as out_dir=")
    try:
        path.mkdir(parents=True, exist_ok=True)
        problem = None if os.access(path, os.W_OK | os.X_OK) else "Permission denied"
    except OSError as err:
        problem = err.strerror
    if problem is None:
        return path
    where = "the output directory" if cfg.get("out_dir") else "the run directory"
    raise FileWriteError(f"cannot write into {path} ({problem}): {where} is not writable; pass "
                         f"out_dir=<a writable directory>, or copy the run somewhere writable")
