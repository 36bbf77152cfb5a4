"""How a command ends when something goes wrong: one line on the terminal and an exit code.

- a user error (`mtx.errors.MtxError`; a missing, unreadable or unwritable file; a bad override,
  an unknown key, a missing ``???`` value): ``error: <what and how to fix>``, exit 2;
- Ctrl-C: ``interrupted``, exit 130;
- SIGTERM or SIGUSR1 (a scheduler pre-empting the job) in training: ``stopped by SIGTERM: <where
  the run continues>``, exit 75;
- a closed pipe (``... | head``): nothing more, exit 141;
- anything else: ``error: internal error (<type>: <message>); this is a bug, please report it
  with the log (traceback in <file>)``, exit 1. The traceback goes to the command's log file
  (train.log) or, for commands without one, to a temporary file; never to the terminal.

`one_line_errors` is the guard around a command (`mtx.commands.entry` puts it around every
Hydra command); `OneLineParser` does the same for argparse command lines.
"""
import argparse
import contextlib
import errno
import logging
import os
import sys
import tempfile
import traceback

from ..errors import BUG, INTERRUPTED, PREEMPTED, USER_ERROR, MtxError, Preempted

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
    docstring). SystemExit passes through (``--help``, a nested guard's exit). Sets
    HYDRA_FULL_ERROR=1, so that Hydra raises its own errors (a bad override, an unknown key)
    to this guard instead of printing them."""
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        _exit(INTERRUPTED)
    except Preempted as stop:  # its message says where the run continues
        print(stop, file=sys.stderr)
        _exit(PREEMPTED)
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
