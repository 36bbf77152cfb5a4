"""mtx: a sequence-to-sequence Transformer for machine translation on MXNet Gluon, built around
the d2l book's multi-head attention block. README.md has the layout of the package."""
import os as _os

# MXNet reads OMP_NUM_THREADS when it loads; left unset, MXNet 1.9.1 ran mtx's decoding about
# 1.25x slower on a 2-core machine than with both cores. mtx's default: every CPU this process
# may run on. An OMP_NUM_THREADS given by the user wins. (Effective only if mtx is imported
# before mxnet, as every mtx command and script does.)
_os.environ.setdefault("OMP_NUM_THREADS", str(len(_os.sched_getaffinity(0))))

# Before anything imports mxnet: what MXNet 1.9.1 needs from newer numpy and Python (mtx.compat),
# and glibc's malloc arenas capped before MXNet's threads allocate (mtx.hardware.allocator).
from . import compat as _compat  # noqa: E402,F401
from .hardware.allocator import cap_arenas as _cap_arenas  # noqa: E402

_cap_arenas()
