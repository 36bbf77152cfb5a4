"""scripts/download.py (`make data`): fetch every Multi30k task 1 file mtx knows (train, val and
the four test sets, en/de/fr) into the data directory and check its SHA-256, without training.
Files in a local copy (raw_dir= / MTX_MULTI30K_DIR) are checked where they are."""
from ..data.multi30k import fetch_all
from .entry import hydra_command


def download(cfg):
    """One line per file: its verified path, or why a test set could not be had (a training
    split that cannot be had is an error)."""
    results = fetch_all(cfg.raw_dir, cfg.data_dir)
    for name, path, problem in results:
        print(f"verified {path}" if path else f"skipped {name}: {problem}")
    missing = sum(path is None for _, path, _ in results)
    print(f"{len(results) - missing} of {len(results)} Multi30k files verified; data directory "
          f"{cfg.data_dir}" + (f"; {missing} test-set files are not at hand" if missing else ""))


# scripts/download.py and `make data`
main = hydra_command("download", download)
