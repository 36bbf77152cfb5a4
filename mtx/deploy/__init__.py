"""Deployment: an mtx run exported to CTranslate2 (`export`), and translation with the export
(`backend`). CTranslate2 is an optional dependency (the ``deploy`` extra); `require` turns its
absence into one line that says how to install it.

An exported directory holds CTranslate2's files (model.bin, config.json, the vocabulary), the
run's tokenizer (spm.model or toy_symbols.json) and ``mtx_export.json`` (what it was exported
from, `EXPORT_INFO`), which is how `is_export` recognises one.
"""
from pathlib import Path

from ..errors import ConfigError

EXPORT_INFO = "mtx_export.json"
BACKENDS = ("auto", "mtx", "ctranslate2")
INSTALL_HINT = ("pip install -e '.[deploy]' in the checkout (make install does it), or pip "
                "install ctranslate2")


def require():
    """The ``ctranslate2`` module, or ConfigError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as err:
        raise ConfigError(f"the CTranslate2 backend needs the ctranslate2 package ({err}); "
                          f"{INSTALL_HINT}") from None
    return ctranslate2


def is_export(path):
    """Whether ``path`` is a directory written by `mtx.deploy.export.export`."""
    return (Path(path) / EXPORT_INFO).is_file()


def backend_of(backend, ckpt):
    """mtx-translate's ``backend=`` for ``ckpt=`` resolved to 'mtx' or 'ctranslate2': auto (the
    default) is CTranslate2 for an exported directory and mtx for a training run."""
    exported = is_export(ckpt)
    if backend not in BACKENDS:
        raise ConfigError(f"backend={backend}: choose one of {', '.join(BACKENDS)}")
    if backend == "mtx" and exported:
        raise ConfigError(f"ckpt={ckpt} is a CTranslate2 export, which mtx's decoder does not "
                          f"read: use backend=ctranslate2 (or auto), or give the training run")
    if backend == "auto":
        return "ctranslate2" if exported else "mtx"
    return backend
