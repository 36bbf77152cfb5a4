"""The errors a user can cause, and the exit code each ends a command with.

Every class here but `Preempted` is a *user error*: bad input, a bad setting, a file that cannot be used. Its
message is one line that names the problem and the fix; the commands (`mtx.commands.exits`)
print it as ``error: <message>`` and exit with `USER_ERROR`. Anything else that escapes is a bug
(`BUG`), Ctrl-C is `INTERRUPTED`, a scheduler's SIGTERM or SIGUSR1 `PREEMPTED` (EX_TEMPFAIL:
try again, i.e. resume).
"""

USER_ERROR = 2
INTERRUPTED = 130
PREEMPTED = 75
BUG = 1


class MtxError(ValueError):
    """Base of all user errors; the message is one line: the problem and the fix."""


class ConfigError(MtxError):
    """A configuration value that cannot work; the message names the key and the fix."""


class DataError(MtxError):
    """Bad or missing data; the message names the file and what to do."""


class CheckpointError(MtxError):
    """A run directory or checkpoint that is missing, damaged, or belongs to another config."""


class TokenizerError(MtxError):
    """A tokenizer file that cannot be used; the message names it and the fix."""


class TrainingError(MtxError):
    """Training cannot go on (the loss stays non-finite); the last good checkpoint is kept."""


class FileWriteError(MtxError):
    """A file could not be written (full disk, read-only or missing directory); the previous
    version of the file, if any, is kept."""


class Preempted(BaseException):
    """SIGTERM or SIGUSR1 (a scheduler pre-empting the job) stopped the command after it saved
    where to continue; the message says how. Not an Exception: like Ctrl-C's KeyboardInterrupt,
    no error handler on the way up may swallow it. The command exits with `PREEMPTED`."""
