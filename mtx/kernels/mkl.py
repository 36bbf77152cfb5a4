"""oneMKL's bfloat16 products for ``mtx_mkl_dense`` (mkl_dense.cc): where the library is and
whether this process has it open.

oneMKL comes from the package index (``pip install mkl``: ``libmkl_rt.so.N`` in the
environment's ``lib/``); ``make install`` adds it on CPUs with AMX (README "Install"). The
kernels' library is not linked against it: `open_mkl` finds it and hands its path to
``mtx_mkl_open``, which opens it on the GNU OpenMP threading layer and asks Linux for the AMX
tile state. Decided once per process (``MTX_MKL=0`` leaves it closed); `status` says what and
why, for precision.json and the training log.
"""
import ctypes
import glob
import os
import sys
from importlib import metadata
from pathlib import Path

from . import load, status as kernels_status

INSTALL_HINT = "install it with `make install MKL=1` (or `pip install mkl`)"
_status = {}


def library():
    """The path of oneMKL's ``libmkl_rt.so.N`` in this environment, or None: the ``mkl``
    distribution's own file list first, then the environment's ``lib/``."""
    try:
        files = metadata.distribution("mkl").files or []
        found = [f.locate() for f in files if Path(str(f)).name.startswith("libmkl_rt.so")]
    except metadata.PackageNotFoundError:
        found = []
    found += [Path(p) for p in glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*"))]
    return next((str(Path(p).resolve()) for p in sorted(found, key=str) if Path(p).is_file()),
                None)


def open_mkl():
    """True when ``mtx_mkl_dense`` can run in this process (kernels loaded, oneMKL open)."""
    if not _status:
        reason, path = _open()
        _status.update(available=reason is None, reason=reason or "oneMKL open",
                       library=path if reason is None else None)
    return _status["available"]


def status():
    """``{"available": bool, "reason": str, "library": libmkl_rt's path or None}``; opens
    oneMKL like `open_mkl` if nothing did yet."""
    open_mkl()
    return dict(_status)


def unavailable():
    """Why ``mtx_mkl_dense`` cannot run here (one line), or None when it can."""
    return None if open_mkl() else _status["reason"]


def _open():
    """(None, libmkl_rt's path) once oneMKL is open in this process; else (the reason it is
    not, its path or None)."""
    if os.environ.get("MTX_MKL", "1") == "0":
        return "MTX_MKL=0 is set", None
    if not load():
        return f"mtx's native kernels are not loaded ({kernels_status()['reason']})", None
    path = library()
    if path is None:
        return f"oneMKL is not installed: {INSTALL_HINT}", None
    kernels = ctypes.CDLL(kernels_status()["library"])  # the handle MXNet's loader opened
    error = ctypes.create_string_buffer(512)
    if kernels.mtx_mkl_open(path.encode(), error, len(error)) != 0:
        return f"oneMKL at {path} cannot be used ({error.value.decode(errors='replace')})", path
    return None, path
