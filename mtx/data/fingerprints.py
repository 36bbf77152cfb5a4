"""What a cached vocabulary or prepared corpus is keyed by: each training file's SHA-256, taken
once (at preparation) and then trusted while the file keeps its size and modification time, so
that a start reads no training file again; ``data.verify=full`` hashes every file again.

In the data directory (`mtx.datadir`):
    hashes/<path key>.json   a file's path, size, modification time (ns) and SHA-256
"""
import hashlib
import json
import logging
from pathlib import Path

from ..errors import FileWriteError
from ..files import atomic_write_json, sha256_of

log = logging.getLogger(__name__)


def content_sha256(path, data_dir, verify="quick"):
    """The SHA-256 of ``path``'s bytes: the one recorded for it when its size and modification
    time are those recorded and ``verify`` (`data.verify`) is quick, else hashed now and
    recorded."""
    path = Path(path).resolve()
    stat = path.stat()
    seen = {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    record_path = (Path(data_dir) / "hashes"
                   / f"{hashlib.sha256(str(path).encode()).hexdigest()[:20]}.json")
    record = _read(record_path)
    unchanged = record is not None and all(record.get(k) == v for k, v in seen.items())
    if unchanged and verify == "quick":
        return record["sha256"]
    digest = sha256_of(path)
    if unchanged and digest != record["sha256"]:
        log.warning("%s changed without a new size or modification time (data.verify=full "
                    "found it): what was prepared from it is prepared again", path)
    if not unchanged or digest != record["sha256"]:
        try:
            record_path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(record_path, dict(seen, sha256=digest))
        except (OSError, FileWriteError) as err:  # a read-only data directory: hashed each time
            log.warning("cannot keep the SHA-256 of %s (%s): the next start hashes it again",
                        path, err)
    return digest


def _read(record_path):
    """A record, or None when there is none or it is damaged (then the file is hashed again)."""
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("sha256"), str) else None
