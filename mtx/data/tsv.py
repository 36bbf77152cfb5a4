"""Tab-separated corpora: ``<prefix>.tsv`` (or ``<prefix>.tsv.gz``), one pair a row, the source
and target in the columns ``data.tsv_columns`` names (counted from 0; other columns, e.g. an
attribution or a score, are ignored), the form most small public corpora come in.

Each file is split once into a pair of plain files in the data directory,
``tsv/<its SHA-256>-<columns>/<name>.<lang>``, which every later step (the checks, the
vocabulary, preparation, the held splits) reads as it reads ``<prefix>.<lang>`` files. A row
with too few columns, or not UTF-8, stops the command with one line naming it.
"""
import os
import tempfile
from pathlib import Path

from ..errors import DataError
from ..files import sha256_of
from .lines import numbered_text

SUFFIXES = (".tsv", ".tsv.gz")


def tsv_file(prefix):
    """``<prefix>.tsv`` or ``<prefix>.tsv.gz`` (absolute), or None when neither is a file."""
    candidates = (Path(f"{prefix}{suffix}").expanduser() for suffix in SUFFIXES)
    return next((path.absolute() for path in candidates if path.is_file()), None)


def tsv_pair(path, cfg, data_dir):
    """(source path, target path) of the TSV file ``path`` split by ``cfg.tsv_columns`` into
    ``data_dir`` (made once: an existing pair is reused); DataError for a row with too few
    columns or invalid UTF-8."""
    source, target = cfg.tsv_columns
    name = path.name[:-len(next(s for s in SUFFIXES[::-1] if path.name.endswith(s)))]
    folder = Path(data_dir) / "tsv" / f"{sha256_of(path)[:20]}-{source}-{target}"
    pair = (folder / f"{name}.{cfg.src_lang}", folder / f"{name}.{cfg.tgt_lang}")
    if all(p.is_file() for p in pair):
        return pair
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:  # another process may split it too
        parts = [Path(tmp) / p.name for p in pair]
        with open(parts[0], "w", encoding="utf-8") as src, \
                open(parts[1], "w", encoding="utf-8") as tgt:
            for number, text in numbered_text(path):
                fields = text.split("\t")
                if len(fields) <= max(source, target):
                    raise DataError(f"{path}:{number}: {len(fields)} column(s), but "
                                    f"data.tsv_columns=[{source},{target}] needs "
                                    f"{max(source, target) + 1}; fix or remove that row")
                src.write(fields[source] + "\n")
                tgt.write(fields[target] + "\n")
        for part, final in zip(parts, pair):
            os.replace(part, final)
    return pair
