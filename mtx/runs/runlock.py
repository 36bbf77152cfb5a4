"""One writer per run directory: an advisory lock held for the life of a command that writes it
(training its run, evaluate and heads their out_dir, export its output).

`RunLock(path)` takes an exclusive `flock` on ``<run>/.lock`` (or another name in it) and writes
the holder's process id, host and command line into it. A second writer gets one line
(`RunInUse`, exit 2) that names the holder. The kernel drops the lock when its process ends,
however it ends (``kill -9`` too), so a lock file left behind by a dead process never blocks: the
next command takes it over.
"""
import fcntl
import os
import socket
import sys
from pathlib import Path

from ..errors import MtxError

LOCK_NAME = ".lock"


class RunInUse(MtxError):
    """Another process holds the run directory's lock."""


class RunLock:
    """``with RunLock(run_dir):`` the calling process is the run directory's only writer.
    ``name``: the lock file's name in it; ``other``: where else a user could write instead (the
    fix in the refusal)."""

    def __init__(self, run_dir, name=LOCK_NAME, other="give another directory "
                 "(hydra.run.dir=... for training, out_dir=... for evaluate and heads)"):
        self.path, self.other = Path(run_dir) / name, other
        self._fd = None

    def acquire(self):
        """Take the lock or raise `RunInUse`; taking it again in the same process is a no-op."""
        if self._fd is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise RunInUse(f"{self.path.parent} is in use by {holder}: one command at a time "
                           f"writes there; wait for it to end, or {self.other}") from None
        command = " ".join(Path(arg).name if i == 0 else arg for i, arg in enumerate(sys.argv))
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"process {os.getpid()} on {socket.gethostname()} ({command[:200]})\n"
                  .encode(), 0)
        self._fd = fd
        return self

    def release(self):
        """Let the lock go (the file stays: removing it would race with a process opening it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
