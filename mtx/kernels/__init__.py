"""mtx's native CPU kernels: C++ operators for MXNet 1.9's custom-operator library API.

The sources here are compiled on first use with the system C++ compiler against the headers the
MXNet wheel ships (``mxnet/include/mxnet/lib_api.h``, ``mxnet/src/lib_api.cc``), cached under
``build/`` by a hash of sources and MXNet version, and loaded with ``mx.library.load``. They are
used on machines without a GPU (the operators are CPU-only). When they cannot be built (no
compiler) or ``MTX_NATIVE_KERNELS=0`` is set, `load` returns False once with a warning and mtx
runs MXNet's own operators: same numbers, slower (docs/performance.md).

Operators: ``mtx_layer_norm`` (layer_norm.cc), used by `mtx.layers.LayerNorm`.
"""
import hashlib
import os
import platform
import subprocess
import tempfile
import warnings
from pathlib import Path

import mxnet as mx

SOURCES = [Path(__file__).with_name("layer_norm.cc")]
_loaded = {}


def cpu_features():
    """This CPU's instruction-set flags: the library is built with -march=native, so a checkout
    shared by machines with other CPUs (a cluster's network disk) gets one library per kind."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next((line for line in cpuinfo if line.startswith("flags")), "")
    except OSError:
        return platform.processor()


def library_path():
    """Where the compiled library of these sources, this MXNet and this CPU kind lives."""
    digest = hashlib.sha256((mx.__version__ + cpu_features()).encode())
    for source in SOURCES:
        digest.update(source.read_bytes())
    return Path(__file__).with_name("build") / f"libmtx_kernels-{digest.hexdigest()[:12]}.so"


def build():
    """Compile the sources into `library_path` (atomically) and return that path."""
    target = library_path()
    if target.exists():
        return target
    mxnet_dir = Path(mx.__file__).parent
    target.parent.mkdir(exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    command = [os.environ.get("CXX", "g++"), "-shared", "-fPIC", "-std=c++11", "-O3",
               "-march=native", "-fopenmp", *map(str, SOURCES),
               str(mxnet_dir / "src" / "lib_api.cc"), "-I", str(mxnet_dir / "include"), "-o", tmp]
    try:
        subprocess.run(command, check=True, capture_output=True, text=True)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def load():
    """Build (once) and load the kernels; True when their operators are registered."""
    if "ok" not in _loaded:
        _loaded["ok"] = _try_load()
    return _loaded["ok"]


def _try_load():
    if os.environ.get("MTX_NATIVE_KERNELS", "1") == "0":
        return False
    if mx.context.num_gpus() > 0:
        return False  # CPU-only operators; MXNet's CUDA kernels are used on GPUs
    try:
        mx.library.load(str(build()), verbose=False)
        return True
    except (OSError, subprocess.CalledProcessError, mx.base.MXNetError) as error:
        detail = getattr(error, "stderr", None) or str(error)
        warnings.warn(f"mtx native kernels not built ({detail.strip().splitlines()[-1]}); "
                      f"using MXNet's own LayerNorm (slower). Install a C++ compiler (g++) or "
                      f"set MTX_NATIVE_KERNELS=0 to silence this.")
        return False
