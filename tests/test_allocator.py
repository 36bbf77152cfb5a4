"""`import mtx` caps glibc's malloc arenas (mtx.hardware.allocator); the user's MALLOC_ARENA_MAX
wins. Counted in fresh processes: threads that each allocate while the others hold their
blocks, then glibc's own account of its arenas (``malloc_stats``, one "Arena N:" line each)."""
import os
import platform
import re
import subprocess
import sys

import pytest

from mtx.hardware.allocator import ARENAS, cap_arenas

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                                reason="arenas are glibc's (musl and macOS have none to cap)")

THREADS = 6
COUNT_ARENAS = f"""
import ctypes, threading
import mtx
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
start, done = threading.Barrier({THREADS}), threading.Barrier({THREADS})
def hold():
    start.wait()
    block = libc.malloc(1 << 20)  # every thread allocates while all of them are alive
    done.wait()
threads = [threading.Thread(target=hold) for _ in range({THREADS})]
for t in threads: t.start()
for t in threads: t.join()
libc.malloc_stats()
"""


def arenas_of_a_process(**env):
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    result = subprocess.run([sys.executable, "-c", COUNT_ARENAS], env={**environ, **env},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return len(re.findall(r"^Arena \d+:", result.stderr, flags=re.M))


def test_import_mtx_keeps_threads_to_the_capped_arenas():
    assert 1 <= arenas_of_a_process() <= ARENAS


def test_the_users_malloc_arena_max_wins():
    assert arenas_of_a_process(MALLOC_ARENA_MAX="16") > ARENAS  # the threads spread out
    assert cap_arenas(environ={"MALLOC_ARENA_MAX": "4"}) is None  # and mtx leaves it alone


FREED_BLOCKS_STAY = """
import ctypes
from mtx.hardware.allocator import release_free_memory
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
def resident_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
blocks = [libc.malloc(64 << 10) for _ in range(800)]  # 50 MB of heap blocks, under mmap's size
for b in blocks:
    ctypes.memset(b, 1, 64 << 10)
for b in blocks[:-1]:  # the last one holds the top of the heap
    libc.free(b)
before = resident_mb()
release_free_memory()
print(before, resident_mb())
"""


def test_free_blocks_go_back_to_the_system_between_batches():
    result = subprocess.run([sys.executable, "-c", FREED_BLOCKS_STAY], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    before, after = map(float, result.stdout.split())
    assert before - after > 30  # of the ~50 MB freed, resident until given back
