"""Files: the one way mtx hashes, writes and reads back what it keeps on disk.

Every file mtx writes goes through `atomic_write`: a temporary file in the same directory,
flushed and fsync'ed, renamed over the target, then the directory fsync'ed. A crash or a full
disk leaves either the old file or the new one, never a mix. Logs of records are appended line by
line (`append_line`), each line flushed and fsync'ed.

A process's temporary files (and folders) are named by `temp_path`, ``.<name>.<pid>.tmp``: no
two processes share one, and cleanup leaves those of a live process alone
(`held_by_another_process`).
"""
import ctypes
import errno
import hashlib
import json
import os
import re
from pathlib import Path

from .errors import FileWriteError


def sha256_of(path):
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fsync_dir(directory):
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(path, pid=None):
    """The temporary file (or folder) of process ``pid`` (default: this one) for ``path``:
    ``.<name>.<pid>.tmp`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid() if pid is None else pid}.tmp")


def temp_owner(path):
    """The process id in the name of a `temp_path`, or None for any other name."""
    found = re.fullmatch(r"\..+\.(\d+)\.tmp", Path(path).name)
    return int(found.group(1)) if found else None


def held_by_another_process(path):
    """Is ``path`` a `temp_path` of another process that is still running? Such a file is that
    process's to finish or remove."""
    pid = temp_owner(path)
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def exchange(first, second):
    """Swap two paths (files or folders) in one step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``): at every instant each path holds one of the two. False where the
    system or the file system cannot (then nothing was moved)."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd, rename_exchange = -100, 2
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def atomic_write(path, write, hint=None):
    """Call ``write(tmp_path)`` (it creates the file), fsync it, rename it to ``path`` and fsync
    the directory. On failure the temporary file is removed, any previous ``path`` is kept and
    FileWriteError names the file (``hint``: what the user can do, e.g. how to resume).
    Returns ``path``."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        write(str(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except Exception as err:  # OSError, MXNetError, a full disk inside a library's writer
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        reason = getattr(err, "strerror", None) or (str(err).strip().splitlines() or [""])[-1]
        raise FileWriteError(f"cannot write {path} ({reason}); the previous file is kept: "
                             f"{hint or 'check that the directory exists, is writable and has space'}"
                             ) from None
    return path


def atomic_write_bytes(path, data, hint=None):
    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)
    return atomic_write(path, write, hint)


def atomic_write_text(path, text, hint=None):
    return atomic_write_bytes(path, text.encode("utf-8"), hint)


def atomic_write_json(path, obj, hint=None):
    """``obj`` as indented JSON; numpy arrays and scalars are written as lists and numbers."""
    import numpy as onp
    return atomic_write_text(path, json.dumps(obj, indent=1, default=lambda a: onp.asarray(a).tolist())
                             + "\n", hint)


def atomic_copy(src, dst, hint=None):
    return atomic_write_bytes(dst, Path(src).read_bytes(), hint)


def append_line(path, line, hint=None):
    """Append one line (no newline inside) to a log of records, flushed and fsync'ed."""
    path = Path(path)
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line.rstrip("\n") + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        raise FileWriteError(f"cannot append to {path} ({err.strerror}); "
                             f"{hint or 'check that the directory is writable and has space'}"
                             ) from None


def read_json(path, error, what="file", kind=dict):
    """The JSON object (``kind`` list: array) in ``path``; ``error`` (an MtxError class) with one
    line naming the file when it is missing, unreadable, not JSON or JSON of another kind."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path} is missing: the {what} was not written or was deleted") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise error(f"{path} is damaged ({type(err).__name__}: {err}); restore it from a copy "
                    f"of the run, or retrain") from None
    if not isinstance(value, kind):
        expected = "an object" if kind is dict else "an array"
        raise error(f"{path} is damaged (JSON {type(value).__name__} where the {what} is "
                    f"{expected}); restore it from a copy of the run, or retrain")
    return value


def read_json_lines(path, error):
    """Records of a JSON-lines log; a last line cut off by a crash is dropped, a damaged line
    elsewhere is ``error``."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise error(f"{path}:{number} is not JSON; remove that line") from None
    return records
