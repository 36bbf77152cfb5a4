"""mtx's native CPU kernels: C++ operators for MXNet 1.9's custom-operator library API.

Operators (each file's head says what it computes): ``mtx_layer_norm`` (layer_norm.cc) for
`mtx.model.layers.LayerNorm`; ``mtx_smoothed_ce`` (cross_entropy.cc) and ``mtx_symmetric_kl``
(symmetric_kl.cc) for `mtx.training.loss`; ``mtx_top_log_probs`` (top_log_probs.cc) and
``mtx_cached_attention`` (cached_attention.cc) for `mtx.model.ops`' decoding steps;
``mtx_mkl_dense`` (mkl_dense.cc), the products of precision ``bfloat16-mkl`` through oneMKL
(`mtx.kernels.mkl`). CPU-only; with a GPU, MXNet's CUDA operators run instead.

The sources are compiled on first use (or by ``make install``) with ``$CXX`` (default ``g++``;
extra flags from ``$CXXFLAGS``) against the headers the MXNet wheel ships
(``mxnet/include/mxnet/lib_api.h``, and ``mxnet/src/lib_api.cc`` with a case for bfloat16
arrays, `lib_api_with_bfloat16`) and loaded with `registry.load_library` (MXNet's loader,
registering only the library's operators). Loading a library runs its code, so it is only
loaded from a private cache and only when its bytes are those that were built:

- `cache_dir`: ``$MTX_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/mtx/kernels``, else
  ``~/.cache/mtx/kernels``; created (with its parents) with mode 0700. A directory that another
  user owns, or that group or others may access, is not used.
- in it, ``libmtx_kernels-<key>.so`` and ``libmtx_kernels-<key>.so.sha256`` (the library's SHA-256
  in ``sha256sum`` format, written atomically after the library). ``<key>`` (`cache_key`) hashes
  the sources and their headers, the MXNet version, the CPU's instruction-set flags (the build uses
  ``-march=native``), the compiler's path and ``--version`` line and the full compile command.
  A library that does not match its recorded SHA-256 is not loaded: mtx warns and rebuilds it.
  A library without a record (a build cut short) is rebuilt. ``.lock`` serialises builds.

When the kernels cannot be used (``MTX_NATIVE_KERNELS=0``, no compiler, a failed compile, an
unsafe cache directory) mtx warns once (`NativeKernelWarning`) and runs MXNet's LayerNorm and
MXNet's operators for the loss and the search's top-k: same numbers, slower
(docs/performance.md). `status` says which
LayerNorm this process runs and why, for reports and benchmarks.
"""
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import mxnet as mx

from .. import files
from ..hardware.cpu import flags_line
from ..datadir import cache_home
from ..errors import FileWriteError
from .registry import load_library

SOURCES = [Path(__file__).with_name(name)
           for name in ("layer_norm.cc", "cross_entropy.cc", "symmetric_kl.cc",
                        "top_log_probs.cc", "cached_attention.cc", "mkl_dense.cc")]
HEADERS = [Path(__file__).with_name(name) for name in ("fast_exp.h", "op_api.h", "bfloat16.h")]
FLAGS = ["-shared", "-fPIC", "-std=c++11", "-O3", "-march=native", "-fopenmp", "-ldl"]
_status = {}  # this process's decision, made once by `load`


class NativeKernelWarning(UserWarning):
    """mtx runs MXNet's operators instead of its native ones, or rebuilt a library that did not
    match its recorded SHA-256."""


class _Unavailable(Exception):
    """The kernels cannot be used here; the message is the reason (one line)."""


def cache_dir():
    """Where this user's compiled kernels live (not created here; see `private_dir`)."""
    if os.environ.get("MTX_KERNEL_CACHE"):
        return Path(os.environ["MTX_KERNEL_CACHE"]).expanduser()
    return cache_home() / "kernels"


def private_dir(path):
    """Create ``path`` and its parents, ``path`` with mode 0700, and return it. _Unavailable when
    it exists but is not a directory of this user that only this user may access (anyone else
    who can write there could swap the library mtx loads)."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=True)
        path.chmod(0o700)  # mkdir's mode is masked by the umask; this only clears bits
    except FileExistsError:
        pass
    except OSError as err:
        raise _Unavailable(f"cannot create the kernel cache {path} ({err.strerror})") from None
    info = path.stat()
    if not path.is_dir() or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise _Unavailable(f"the kernel cache {path} is not a private directory of this user "
                           f"(mode {info.st_mode & 0o777:o}, owner uid {info.st_uid}); run "
                           f"`chmod 700 {path}` if it is yours, or set MTX_KERNEL_CACHE")
    return path


def compiler():
    """``$CXX`` (default g++) as a command list with the program's full path, and the first
    line of its ``--version``; _Unavailable when it is not installed."""
    command = shlex.split(os.environ.get("CXX") or "g++")
    path = shutil.which(command[0]) if command else None
    if path is None:
        raise _Unavailable(f"no C++ compiler ({os.environ.get('CXX') or 'g++'} not found; "
                           f"install g++ or set CXX)")
    try:
        done = subprocess.run([path, *command[1:], "--version"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        raise _Unavailable(f"the C++ compiler {path} does not run ({err})") from None
    return [path, *command[1:]], (done.stdout.strip().splitlines() or [""])[0]


# MXNet 1.9.1's src/lib_api.cc (compiled into the library) throws when it wraps a bfloat16
# array (dtype 12) in an MXTensor: its DLPack switch has no case for it. The library compiles a
# copy with that case (DLPack's bfloat16: code 4, 16 bits), so cross_entropy.cc can read them.
LIB_API_DEFAULT = "  default:\n    dltensor.dtype.code = 0;"
LIB_API_BFLOAT16 = "  case 12:\n    dltensor.dtype.code = 4;\n    dltensor.dtype.bits = 16;\n    break;\n"


def lib_api_with_bfloat16(directory):
    """MXNet's lib_api.cc with the bfloat16 case, written into ``directory``; its path."""
    text = (Path(mx.__file__).parent / "src" / "lib_api.cc").read_text()
    if text.count(LIB_API_DEFAULT) != 1:
        raise _Unavailable(f"MXNet {mx.__version__}'s src/lib_api.cc is not the one mtx's "
                           f"kernels are built with (1.9.1); install mxnet==1.9.1")
    path = Path(directory) / "lib_api.cc"
    path.write_text(text.replace(LIB_API_DEFAULT, LIB_API_BFLOAT16 + LIB_API_DEFAULT))
    return path


def build_command(output, lib_api="lib_api.cc"):
    """The compiler's version line and the full command that compiles the sources and
    ``lib_api`` (`lib_api_with_bfloat16`'s file) to ``output``."""
    cxx, version = compiler()
    include = Path(mx.__file__).parent / "include"
    flags = [*FLAGS, *shlex.split(os.environ.get("CXXFLAGS", ""))]
    return version, [*cxx, *flags, *map(str, SOURCES), str(lib_api), "-I", str(include),
                     "-o", str(output)]


def cache_key():
    """Hash of everything the library's bytes depend on: sources, MXNet, CPU kind, compiler
    (path and version) and the compile command."""
    version, command = build_command("LIBRARY")
    digest = hashlib.sha256("\0".join([mx.__version__, flags_line(), version, *command,
                                       LIB_API_BFLOAT16]).encode())
    for source in SOURCES + HEADERS:
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def library_path():
    """Where the library for this machine, compiler and flags lives in `cache_dir`."""
    return cache_dir() / f"libmtx_kernels-{cache_key()}.so"


def record_path(library):
    """The file beside ``library`` that holds its SHA-256."""
    return Path(f"{library}.sha256")


def build(target):
    """Compile the sources into ``target`` and record its SHA-256 beside it; both files are
    written atomically (`mtx.files`), the record last. _Unavailable when compiling fails."""
    with tempfile.TemporaryDirectory(prefix="mtx-kernels-") as tmp:  # private (mode 0700)
        built = Path(tmp) / target.name
        _, command = build_command(built, lib_api_with_bfloat16(tmp))
        try:
            subprocess.run(command, check=True, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.SubprocessError) as err:
            lines = (getattr(err, "stderr", None) or "").strip().splitlines()
            status = getattr(err, "returncode", None)
            detail = next((line for line in lines if "error" in line), lines[-1] if lines else
                          f"{command[0]} exited with status {status}" if status else str(err))
            raise _Unavailable(f"compiling the kernels failed ({detail.strip()})") from None
        digest = files.sha256_of(built)
        files.atomic_copy(built, target)
    files.atomic_write_text(record_path(target), f"{digest}  {target.name}\n")
    return target


def check(library):
    """'ok' when ``library`` matches the SHA-256 recorded beside it, 'mismatch' when it does
    not, 'missing' when the library or its record is absent (a build that never finished)."""
    try:
        recorded = record_path(library).read_text().split()[0]
        actual = files.sha256_of(library)
    except (OSError, IndexError, UnicodeDecodeError):
        return "missing"
    return "ok" if recorded == actual else "mismatch"


@contextmanager
def _locked(directory):
    """Hold ``directory/.lock``: one process builds and checks a library at a time."""
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def load():
    """Build (once per machine) and load the kernels; True when their operators are registered.
    Decided once per process: later calls return the same answer and do not warn again."""
    if not _status:
        loaded, reason, library = _try_load()
        _status.update(native_layer_norm=loaded, reason=reason, library=library)
    return _status["native_layer_norm"]


def status():
    """Which LayerNorm this process runs, for training reports and benchmarks:
    ``{"native_layer_norm": bool, "reason": str, "library": path of the loaded library or
    None}``. Decides (and builds) like `load` if nothing did yet."""
    load()
    return dict(_status)


def _try_load():
    """(loaded, reason, library path or None); warns once when the kernels are not used."""
    if os.environ.get("MTX_NATIVE_KERNELS", "1") == "0":
        return _fall_back("MTX_NATIVE_KERNELS=0 is set")
    if mx.context.num_gpus() > 0:
        return False, "a GPU is present: MXNet's CUDA operators are used", None
    try:
        target = private_dir(cache_dir()) / f"libmtx_kernels-{cache_key()}.so"
        with _locked(target.parent):
            state = check(target)
            if state == "mismatch":
                warnings.warn(f"{target} does not match the SHA-256 recorded beside it; not "
                              f"loading it, rebuilding it", NativeKernelWarning, stacklevel=3)
            if state != "ok":
                build(target)
                if check(target) != "ok":
                    raise _Unavailable(f"{target} does not match its SHA-256 right after the build")
            load_library(target)
    except (_Unavailable, FileWriteError) as err:
        return _fall_back(str(err))
    except (OSError, mx.base.MXNetError) as err:
        return _fall_back(f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[-1]}")
    return True, "loaded", str(target)


def _fall_back(reason):
    warnings.warn(f"mtx native kernels not used: {reason}. Running MXNet's LayerNorm, loss, "
                  f"log-softmax/top-k and attention operators (same results, slower).", NativeKernelWarning,
                  stacklevel=4)
    return False, reason, None
