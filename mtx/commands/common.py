"""What the commands share: their entry points, one-line errors and exit codes, typed configs
from Hydra's DictConfig, checks of the files a command reads and writes, and the decoding setup.

A command is `hydra_command` around a function of the composed config: ``mtx-<name>`` (pyproject
[project.scripts]) and ``scripts/<name>.py`` both call the entry point it returns, from any
working directory (the configs travel with the package: ``mtx/conf`` is the repository's
``conf/``). Whatever goes wrong, the terminal gets one line:

- a user error (`mtx.errors.MtxError`; a missing, unreadable or unwritable file; a bad override,
  an unknown key, a missing ``???`` value): ``error: <what and how to fix>``, exit 2;
- Ctrl-C: ``interrupted``, exit 130;
- anything else: ``error: internal error (<type>: <message>); this is a bug, please report it
  with the log (traceback in <file>)``, exit 1. The traceback goes to the command's log file
  (train.log) or, for commands without one, to a temporary file; never to the terminal.

The guard inside the job catches the command's errors before Hydra sees them (Hydra would print
an extra "Error executing job" line); the one around Hydra catches Hydra's own errors, which Hydra
re-raises instead of printing them when HYDRA_FULL_ERROR=1 (`run` sets it).
"""
import argparse
import contextlib
import errno
import logging
import os
import sys
import tempfile
import traceback
from pathlib import Path

from ..config import CONF_DIR, DataConfig, DecodeConfig, ModelConfig, TrainConfig
from ..typecheck import from_dict
from ..datadir import register_resolver
from ..errors import (BUG, INTERRUPTED, USER_ERROR, ConfigError, DataError, FileWriteError,
                      MtxError)

log = logging.getLogger("mtx")

# OSErrors a user causes and can fix (a path that is missing, unreadable, read-only or full),
# each with what to do.
FILE_ERRNO_FIXES = {
    errno.ENOENT: "give an existing path",
    errno.EACCES: "give a path you may use, or change its permissions",
    errno.EPERM: "give a path you may use, or change its permissions",
    errno.EROFS: "give a path on a writable file system",
    errno.EISDIR: "give a file, not a directory",
    errno.ENOTDIR: "a part of that path is a file, not a directory; give another path",
    errno.EEXIST: "something is in the way at that path (a file where a directory should be?); "
                  "give another path",
    errno.ENOSPC: "free some disk space, or write somewhere else",
    errno.EDQUOT: "free some disk space, or write somewhere else",
}
BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for `... | head` closing the pipe
HELP = {"ckpt": "pass a training run directory, e.g. ckpt=outputs/train/runs/<time>"}


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


def _one_line(text):
    """The non-empty lines of ``text``, stripped and joined with '; '."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


def _config_message(err):
    """One line for an error of Hydra or OmegaConf (bad override, unknown key, missing value)."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigKeyError, MissingMandatoryValue
    cause = err.__cause__
    if isinstance(err, MissingMandatoryValue):
        key = err.full_key
        return f"{key}= is required: {HELP.get(key, f'pass a value, {key}=...')}"
    if isinstance(err, MissingConfigException) and err.options:
        what = _one_line(str(err).split(os.linesep * 2)[0])  # before "Available options ..."
        return f"{what}; choose one of {', '.join(err.options)}"
    if isinstance(err, OverrideParseException):
        return f"cannot parse the override {err.override!r}: {_one_line(err.message)}"
    if isinstance(cause, (ConfigKeyError, AttributeError)) and getattr(cause, "full_key", None):
        return (f"unknown key {cause.full_key}: check its spelling; `--cfg job` prints the "
                f"config with every key")
    text = str(err).splitlines()[0] if str(err).strip() else type(err).__name__
    full_key = getattr(err, "full_key", None)
    return f"{text} (key {full_key})" if full_key and full_key not in text else text


def _user_message(err):
    """One line for a user error, or None if ``err`` is not one."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    if isinstance(err, (HydraException, OmegaConfBaseException)):
        return _config_message(err)
    if isinstance(err, MtxError):
        return _one_line(err)
    if isinstance(err, OSError) and err.errno in FILE_ERRNO_FIXES:
        what = f"{err.filename}: {err.strerror}" if err.filename else _one_line(err)
        return f"{what}; {FILE_ERRNO_FIXES[err.errno]}"
    return None


def _log_to_files(level, message, exc_info=None):
    """Log ``message`` to the root logger's files only (the console gets the one line);
    returns their paths."""
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.FileHandler) and h.baseFilename != os.devnull]
    record = log.makeRecord(log.name, level, __file__, 0, "%s", (message,), exc_info)
    for handler in handlers:
        if level >= handler.level:
            handler.handle(record)
    return [h.baseFilename for h in handlers]


def _report_bug(err):
    """The traceback into the log file, or a temporary file when there is none: its path."""
    exc_info = (type(err), err, err.__traceback__)
    files = _log_to_files(logging.ERROR, "internal error", exc_info)
    if files:
        return files[0]
    fd, path = tempfile.mkstemp(prefix="mtx-traceback-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        traceback.print_exception(*exc_info, file=f)
    return path


@contextlib.contextmanager
def one_line_errors():
    """Whatever escapes ends the program with one line on stderr and its exit code (module
    docstring). SystemExit passes through (``--help``, a nested guard's exit)."""
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        _exit(INTERRUPTED)
    except BrokenPipeError:  # the reader went away (`| head`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        _exit(BROKEN_PIPE)
    except Exception as err:  # noqa: BLE001 (this is the one place that turns them into lines)
        message = _user_message(err)
        if message is not None:
            _log_to_files(logging.ERROR, message)
            print(f"error: {message}", file=sys.stderr)
            _exit(USER_ERROR)
        where = _report_bug(err)
        print(f"error: internal error ({type(err).__name__}: {_one_line(err)[:300]}); this is a "
              f"bug, please report it with the log (traceback in {where})", file=sys.stderr)
        _exit(BUG)


class OneLineParser(argparse.ArgumentParser):
    """A bad command line is one line, ``error: <command>: <problem>`` (`--help` for usage),
    and exit code 2, like every other user error."""

    def error(self, message):
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        _exit(USER_ERROR)


def run(main):
    """Call a ``@hydra.main`` function so that Hydra's own errors (bad overrides, unknown keys,
    a missing config option) are one line too: HYDRA_FULL_ERROR=1 makes Hydra raise them."""
    with one_line_errors():
        return main()


def hydra_command(config_name, command):
    """The entry point of a command: ``command(cfg)`` with conf/<config_name>.yaml and the
    command line's overrides, every error one line (module docstring); returns its result."""
    import hydra
    register_resolver()

    @hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base="1.3")
    def main(cfg):
        with one_line_errors():
            refuse_null_paths(cfg, config_name)
            return command(cfg)

    def entry():
        return run(main)
    entry.__doc__ = command.__doc__
    return entry


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


def typed(cfg, section):
    """A DictConfig section -> its dataclass (ModelConfig, DataConfig, ...)."""
    from omegaconf import OmegaConf
    classes = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig,
               "decode": DecodeConfig}
    values = OmegaConf.to_container(cfg[section], resolve=True)
    if section == "data" and values.get("raw_dir"):
        values["raw_dir"] = os.path.abspath(values["raw_dir"])
    return from_dict(classes[section], values, section)


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


def decoding_options(cfg):
    """decode.* as a DecodeConfig and ``device=`` as a context: cheap checks that translate,
    evaluate and serve make before anything loads."""
    from ..devices import resolve_device
    return typed(cfg, "decode"), resolve_device(cfg.device)


def load_decoder(cfg, ctx):
    """(hybridized model, tokenizer, the run's DataConfig) of the run directory ``cfg.ckpt``
    (checkpoint ``cfg.checkpoint``) on ``ctx``."""
    from ..rundir import load_run
    model, tokenizer, data_cfg = load_run(cfg.ckpt, ctx, cfg.checkpoint)
    model.hybridize(static_alloc=True)
    return model, tokenizer, data_cfg
