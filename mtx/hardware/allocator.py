"""glibc's malloc arenas, capped before MXNet starts its threads, and its free blocks given back
between translation batches.

MXNet 1.9.1 allocates CPU arrays with plain ``malloc``/``free`` (no memory pool on the CPU), from
its engine's worker threads and OpenMP's. glibc gives each new thread that allocates an arena of
its own (up to 8 per core), and every arena keeps its own high-water mark of freed blocks: a
translation's peak memory grows with the number of threads that ever allocated, not with the
arrays in use. Capping the arenas at ``ARENAS`` keeps those blocks in fewer heaps, where later
steps reuse them (docs/performance.md measures the peak and the time with and without it).

A ``MALLOC_ARENA_MAX`` in the environment is the user's choice and wins; on a C library other
than glibc (musl, macOS) nothing is done. Effective only before the threads first allocate, so
``import mtx`` calls `cap_arenas` before anything imports mxnet; it must not import mxnet.
"""
import ctypes
import functools
import os

ARENAS = 2  # glibc's own default on 2 cores is 16
M_ARENA_MAX = -8  # mallopt's parameter number (glibc's malloc.h)


@functools.lru_cache(maxsize=1)
def _glibc():
    """glibc's ``mallopt`` and ``malloc_trim`` as ctypes functions, or None on another C
    library."""
    try:  # the C library this process runs on (find_library would run ldconfig at import)
        libc = ctypes.CDLL(None)
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: its own allocator, its own rules
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    trim.argtypes, trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return mallopt, trim


def release_free_memory():
    """Give the pages of glibc's free blocks back to the system (``malloc_trim``): between
    translation batches, so a batch's freed blocks do not stay resident while the next one
    allocates in other sizes. Nothing on another C library."""
    functions = _glibc()
    if functions is not None:
        functions[1](0)


def cap_arenas(arenas=ARENAS, environ=os.environ):
    """Cap glibc's malloc arenas at ``arenas`` for this process -> the cap set, or None when the
    environment sets MALLOC_ARENA_MAX or the C library is not glibc."""
    functions = None if "MALLOC_ARENA_MAX" in environ else _glibc()
    if functions is None:
        return None
    return arenas if functions[0](M_ARENA_MAX, arenas) == 1 else None
