"""Who holds a prepared corpus folder, through two lock files beside it (``flock``: the kernel
drops a dead process's hold, ``kill -9`` too):

    .<name>.preparing   held alone by the process that makes the folder: a second preparer
                        waits for it, then finds the folder made and makes nothing
    .<name>.in_use      held shared by every process that maps the folder (a training run, for
                        its whole life); a prune takes it alone without waiting, so it is
                        refused while any run holds it
"""
import contextlib
import errno
import fcntl
import logging
import os
from pathlib import Path

from ..errors import DataError

log = logging.getLogger(__name__)


def _lock_file(folder, what):
    """The lock file's descriptor; in a data directory this user cannot write, the file opened
    to read if it is there, else None (no lock: nothing can be prepared or removed there)."""
    folder = Path(folder)
    path = folder.parent / f".{folder.name}.{what}"
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def preparing(folder):
    """While making ``folder``: the only process doing so (another one's preparation is waited
    for, said in the log)."""
    def wait(fd):
        log.info("%s: another process is preparing it; waiting for it to finish", folder)
        fcntl.flock(fd, fcntl.LOCK_EX)
    return _alone(folder, "preparing", wait)


def in_use(folder):
    """Hold ``folder`` as in use while the returned file object is open (it closes when it is
    no longer referenced, or the process ends)."""
    fd = _lock_file(folder, "in_use")
    if fd is None:
        return None
    held = os.fdopen(fd, "rb")
    fcntl.flock(held.fileno(), fcntl.LOCK_SH)
    return held


def unused(folder):
    """While removing ``folder``: no run holds it (DataError, one line, when one does)."""
    def refuse(fd):
        raise DataError(f"{folder} is in use by a training run that maps it; prune it after "
                        f"that run ends")
    return _alone(folder, "in_use", refuse)


@contextlib.contextmanager
def _alone(folder, name, when_held):
    """Inside, this process alone holds ``folder``'s lock ``name``; ``when_held(fd)`` runs when
    another holds it (it waits for the lock, or raises). Without a lock file (a data directory
    this user cannot write), nothing is held."""
    fd = _lock_file(folder, name)
    if fd is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            when_held(fd)
        yield
    finally:
        os.close(fd)


def lock_files(folder):
    """The lock files beside ``folder`` (removed with it by a prune)."""
    folder = Path(folder)
    return [folder.parent / f".{folder.name}.{what}" for what in ("preparing", "in_use")]
