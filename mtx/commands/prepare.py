"""mtx-prepare (scripts/prepare.py; fairseq-preprocess, Sockeye's prepare_data): prepare a
corpus once into a folder the user names (`mtx.data.named`), for ``mtx-train data=files
data.prepared=<it>``; ``--list`` and ``--prune`` show and remove what the data directory holds.

    mtx-prepare data.src_lang=en data.tgt_lang=xx data.train=corpus/train output=enxx
    mtx-prepare --list
    mtx-prepare --prune enxx
"""
import json
import shutil
import sys
from pathlib import Path

from ..errors import DataError
from .entry import hydra_command, typed
from .exits import OneLineParser, one_line_errors


def prepare(cfg):
    """Prepare data.train into ``output=`` (nothing when it was made with these settings); one
    line saying what it holds and how to train from it."""
    from ..data.named import prepare_named, prepared_folder
    data_cfg = typed(cfg, "data")
    folder = prepared_folder(cfg.output, cfg.data_dir)
    prepare_named(data_cfg, folder, cfg.data_dir)
    meta = json.loads((folder / "meta.json").read_text())
    dropped = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in meta["dropped"].items())
    print(f"{folder}: {meta['pairs']:,} training pairs of {meta['read']:,} (dropped: {dropped}), "
          f"{_size(folder)}; train with data=files data.prepared={cfg.output}")


def _bytes(path):
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _size(path):
    size = _bytes(path)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024


def prepared_corpora(data_dir):
    """[(folder, what it is)] of <data_dir>/prepared/: named (mtx-prepare) or cached (keyed)."""
    from ..data.named import PREPARED_JSON
    folder = Path(data_dir) / "prepared"
    found = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if folder.is_dir() else []
    return [(p, "named" if (p / PREPARED_JSON).is_file() else "cache") for p in found]


def list_data_dir(data_dir):
    """Print what the data directory holds: each prepared corpus (its pairs, size, whether a
    run uses it), then every other entry with its size."""
    from ..data import holds
    print(f"data directory {data_dir} ({_size(data_dir) if Path(data_dir).is_dir() else 'empty'})")
    for folder, kind in prepared_corpora(data_dir):
        meta = json.loads((folder / "meta.json").read_text())
        try:
            with holds.unused(folder):
                use = ""
        except DataError:
            use = ", in use"
        print(f"  prepared/{folder.name}  {kind}, {meta['pairs']:,} pairs, "
              f"{_size(folder)}{use}")
    for entry in sorted(Path(data_dir).iterdir()) if Path(data_dir).is_dir() else []:
        if entry.name != "prepared" and not entry.name.startswith("."):
            print(f"  {entry.name}{'/' if entry.is_dir() else ''}  {_size(entry)}")


def prune(names, data_dir):
    """Remove the prepared corpora ``names`` (names or cache keys in <data_dir>/prepared/, or
    folders), each with its lock files; DataError (one line) for one that is not a prepared
    corpus or that a run uses (nothing is removed then)."""
    from ..data import holds
    from ..data.named import prepared_folder
    folders = [prepared_folder(name, data_dir) for name in names]
    for folder in folders:
        if not (folder / "meta.json").is_file():
            raise DataError(f"{folder} is not a prepared corpus; mtx-prepare --list shows them")
        with holds.unused(folder):
            pass
    for folder in folders:
        size = _size(folder)
        with holds.unused(folder):
            shutil.rmtree(folder)
        for lock in holds.lock_files(folder):
            lock.unlink(missing_ok=True)
        print(f"removed {folder} ({size})")


def manage(argv):
    """``--list`` / ``--prune NAME ...`` (argparse, one-line errors)."""
    from ..datadir import data_dir
    parser = OneLineParser(prog="mtx-prepare", description="what the data directory holds")
    parser.add_argument("--list", action="store_true", help="show it, with sizes")
    parser.add_argument("--prune", nargs="+", metavar="NAME", help="remove prepared corpora")
    args = parser.parse_args(argv)
    with one_line_errors():
        if args.list:
            list_data_dir(data_dir())
        if args.prune:
            prune(args.prune, data_dir())


_prepare_main = hydra_command("prepare", prepare)


def main():
    """mtx-prepare: ``--list`` / ``--prune`` manage the data directory; else Hydra's command
    line prepares a corpus."""
    if any(arg in ("--list", "--prune") for arg in sys.argv[1:2]):
        return manage(sys.argv[1:])
    return _prepare_main()
