"""Where mtx keeps what it downloads and derives: the data directory.

``MTX_DATA_DIR`` when set; else the top-level ``data/`` of the checkout mtx runs from (known by
its committed README.md), whatever the working directory; else, for mtx installed from a wheel,
``$XDG_CACHE_HOME/mtx/data`` or ``~/.cache/mtx/data``. Inside (data/README.md):

    multi30k/   Multi30k task 1 files downloaded from github.com/multi30k/dataset, SHA-256 checked
    spm/        SentencePiece models, named by the hash of their training text and settings

Configs ask for it as ``${mtx.data_dir:}`` (the resolver is registered by `register_resolver`).
"""
import os
from pathlib import Path

CHECKOUT_DATA = Path(__file__).resolve().parent.parent / "data"


def cache_home():
    """This user's cache folder for mtx: ``$XDG_CACHE_HOME/mtx``, else ``~/.cache/mtx`` (the XDG
    spec says to ignore a relative ``XDG_CACHE_HOME``); not created here."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache") / "mtx"


def data_dir():
    """The data directory (see the module docstring); not created here."""
    if os.environ.get("MTX_DATA_DIR"):
        return Path(os.environ["MTX_DATA_DIR"]).expanduser().absolute()
    if (CHECKOUT_DATA / "README.md").is_file():
        return CHECKOUT_DATA
    return cache_home() / "data"


def register_resolver():
    """``${mtx.data_dir:}`` in the Hydra configs (conf/paths/default.yaml and the commands)."""
    from omegaconf import OmegaConf
    if not OmegaConf.has_resolver("mtx.data_dir"):
        OmegaConf.register_new_resolver("mtx.data_dir", lambda: str(data_dir()))
