"""How a command ends when something goes wrong: one line on the terminal and an exit code.

- a user error (`mtx.errors.MtxError`; a missing, unreadable or unwritable file, a name too
  long, a disk that fails, too many open files; out of memory; a bad override, an unknown key,
  a missing ``???`` value): ``error: <what and how to fix>``, exit 2;
- Ctrl-C: ``interrupted``, exit 130;
- SIGTERM or SIGUSR1 (a scheduler pre-empting the job) in training: ``stopped by SIGTERM: <where
  the run continues>``, exit 75;
- a closed pipe (``... | head``): nothing more, exit 141;
- anything else: ``error: internal error (<type>: <message>); this is a bug, please report it
  with the log (traceback in <file>)``, exit 1. The traceback goes to the command's log file
  (train.log) or, for commands without one, to a temporary file; never to the terminal. When
  neither can be written (a full /tmp), the line says so instead.

`one_line_errors` is the guard around a command (`mtx.commands.entry` puts it around every
Hydra command); `OneLineParser` does the same for argparse command lines.
"""
import argparse
import contextlib
import errno
import logging
import os
import re
import sys
import tempfile
import traceback

from ..config import CONF_DIR
from ..errors import BUG, INTERRUPTED, PREEMPTED, USER_ERROR, MtxError, Preempted

log = logging.getLogger("mtx")

# OSErrors a user can fix (a path that is missing, unreadable, read-only, full or too long; a
# failing disk; too many open files), each with what to do.
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
    errno.ENAMETOOLONG: "use shorter names: a shorter hydra.run.dir, or for a sweep (each run's "
                        "folder is named after its overrides) fewer or shorter overrides, or "
                        "hydra.sweep.subdir='${hydra.job.num}'",
    errno.ELOOP: "the symbolic links in that path form a loop; fix or remove them",
    errno.EIO: "the disk or network file system failed (see dmesg or the mount); check it, "
               "then run again",
    errno.EMFILE: "raise the limit of open files (ulimit -n 4096) and run again",
    errno.ENFILE: "the system has too many open files: close some programs, or raise "
                  "fs.file-max, and run again",
}
# Out of memory: Python's MemoryError, or an MXNetError with one of these (host and GPU).
OUT_OF_MEMORY = re.compile(r"out of memory|failed to allocate|bad_alloc", re.IGNORECASE)
MEMORY_FIX = ("use smaller batches: a smaller train.batch_tokens when training, a smaller "
              "decode.batch_tokens (or decode.beam_size) when translating")
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
        presets = [option for option in err.options if option != "declared"]
        if presets:
            return f"{what}; choose one of {', '.join(presets)}"
        return f"{what}: {GROUP_FIX}"
    if isinstance(err, OverrideParseException):
        return f"cannot parse the override {err.override!r}: {_one_line(err.message)}"
    if isinstance(cause, (ConfigKeyError, AttributeError)) and getattr(cause, "full_key", None):
        return (f"unknown key {cause.full_key}: check its spelling; `--cfg job` prints the "
                f"config with every key")
    text = str(err).splitlines()[0] if str(err).strip() else type(err).__name__
    full_key = getattr(err, "full_key", None)
    return f"{text} (key {full_key})" if full_key and full_key not in text else text


def _out_of_memory(err):
    """The line of ``err`` that says memory ran out, or None when it is not about memory."""
    if isinstance(err, MemoryError):
        return f"MemoryError: {_one_line(err)}".rstrip(": ")
    if not any(c.__name__ == "MXNetError" for c in type(err).__mro__):
        return None
    return next((line.strip() for line in str(err).splitlines()
                 if OUT_OF_MEMORY.search(line)), None)


def _user_message(err):
    """One line for a user error, or None if ``err`` is not one. (Hydra is imported last: with
    too many open files or no memory left, an import fails.)"""
    if isinstance(err, MtxError):
        return _one_line(err)
    if isinstance(err, OSError) and err.errno in FILE_ERRNO_FIXES:
        what = f"{err.filename}: {err.strerror}" if err.filename else _one_line(err)
        return f"{what}; {FILE_ERRNO_FIXES[err.errno]}"
    memory = _out_of_memory(err)
    if memory is not None:
        return f"out of memory ({memory[:200]}); {MEMORY_FIX}"
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException
    if isinstance(err, (HydraException, OmegaConfBaseException)):
        return _config_message(err)
    if isinstance(err, ValueError) and str(err).startswith(GROUP_GIVEN_A_VALUE):
        return _group_given_a_value()
    return None


# What Hydra raises (a ValueError) for ``<group>=<a number or a mapping>``, e.g. model=5
GROUP_GIVEN_A_VALUE = "Config group override must be a string or a list"


def _group_given_a_value():
    """One line for ``<group>=<value>`` that is no preset's name: the overrides of the command
    line that name a group, and what to give instead."""
    from .declared import GROUPS, presets_of
    groups = {*GROUPS, *(p.name for p in CONF_DIR.iterdir() if p.is_dir())}
    given = [arg for arg in sys.argv[1:] if "=" in arg
             and arg.split("=", 1)[0].lstrip("+~") in groups
             and arg.split("=", 1)[1] not in presets_of(arg.split("=", 1)[0].lstrip("+~"))]
    return (f"{', '.join(given) or 'an override of a group'}: {GROUP_FIX}")


GROUP_FIX = ("that is a group of settings: give one of its presets by name, or set one of its "
             "settings, group.key=value (--help lists both)")


def _log_to_files(level, message, exc_info=None):
    """Log ``message`` to the root logger's files only (the console gets the one line);
    returns the paths of those that take it (a file that failed before takes nothing:
    `mtx.commands.entry.one_warning_per_failed_log`)."""
    handlers = [h for h in logging.getLogger().handlers
                if isinstance(h, logging.FileHandler) and h.baseFilename != os.devnull
                and level >= h.level]
    record = log.makeRecord(log.name, level, __file__, 0, "%s", (message,), exc_info)
    for handler in handlers:
        handler.handle(record)
    return [h.baseFilename for h in handlers if level >= h.level]


def _report_bug(err):
    """Where the traceback went: the log file, or a temporary file when there is none; when
    that cannot be written either (a full /tmp), why not. Never raises."""
    exc_info = (type(err), err, err.__traceback__)
    try:
        files = _log_to_files(logging.ERROR, "internal error", exc_info)
        if files:
            return f"traceback in {files[0]}"
        fd, path = tempfile.mkstemp(prefix="mtx-traceback-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            traceback.print_exception(*exc_info, file=f)
        return f"traceback in {path}"
    except Exception as failure:  # noqa: BLE001 (the report of a bug must not be a second one)
        reason = getattr(failure, "strerror", None) or type(failure).__name__
        return f"the traceback could not be written: {reason}"


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
              f"bug, please report it with the log ({where})", file=sys.stderr)
        _exit(BUG)


class OneLineParser(argparse.ArgumentParser):
    """A bad command line is one line, ``error: <command>: <problem>`` (`--help` for usage),
    and exit code 2, like every other user error."""

    def error(self, message):
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        _exit(USER_ERROR)
