"""Devices: names to MXNet contexts, the NumPy interface on, host batches to device arrays, and
seeding.

MXNet is imported by the functions that use it: `parse_device` also serves the CTranslate2
backend (`mtx.deploy.backend`), which runs without MXNet.
"""
import logging
import random

import numpy as onp

from ..errors import ConfigError
from . import gpu

log = logging.getLogger(__name__)


def parse_device(device):
    """A device name, ``cpu``, ``cpu:N``, ``gpu``, ``gpu:N`` or ``auto`` -> (kind, index);
    ConfigError for anything else."""
    kind, colon, index = str(device).partition(":")
    if kind not in ("cpu", "gpu", "auto") or (colon and (kind == "auto" or not index.isdigit())):
        raise ConfigError(f"device={device} is not a device name: use cpu, cpu:N, gpu, gpu:N "
                          f"or auto")
    return kind, int(index or 0)


def use_numpy_interface():
    """``npx.set_np()`` (MXNet's NumPy interface, as the book uses it) without the two INFO
    lines MXNet logs on the root logger each time it is switched on."""
    import mxnet as mx
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)
    try:
        mx.npx.set_np()
    finally:
        root.setLevel(level)


def resolve_device(device):
    """'cpu' | 'cpu:N' | 'gpu' | 'gpu:N' | 'auto' -> an MXNet context; ConfigError for a bad
    name, a GPU MXNet does not see, or one it has no kernels for. ``auto`` logs what it chose
    and why."""
    import mxnet as mx
    kind, index = parse_device(device)
    if kind == "auto":
        kind, index, reason = choose_auto()
        log.info("device=auto: %s (%s)", "cpu" if kind == "cpu" else f"gpu:{index}", reason)
    if kind == "gpu":
        check_gpu(device, index)
        return mx.gpu(index)
    return mx.cpu(index)  # separate CPU contexts share the cores (tests, debugging)


def choose_auto():
    """``device=auto`` -> (kind, index, why): GPU 0 when MXNet sees one and has kernels for it,
    else the CPU. A GPU without kernels falls back to the CPU rather than stopping: auto promises
    a device that works, so `make train` on such a machine still trains (device=gpu is refused
    instead, in one line)."""
    count, none_because = gpu.gpus_seen()
    if not count:
        return "cpu", 0, none_because
    name, capability = gpu.cuda_device(0)
    missing = gpu.kernels_missing(capability)
    if missing:
        return "cpu", 0, f"{gpu.describe(0, name, capability)}: {missing}"
    return "gpu", 0, gpu.about(name, capability)


def check_gpu(device, index):
    """ConfigError unless MXNet sees GPU ``index`` and has kernels for it, naming what to do."""
    count, none_because = gpu.gpus_seen()
    if count <= index:
        because = f" ({none_because})" if none_because else ""
        raise ConfigError(f"device={device} but MXNet sees {count} GPU(s){because}: "
                          f"{no_such_gpu_fix(none_because, count)}")
    name, capability = gpu.cuda_device(index)
    missing = gpu.kernels_missing(capability)
    if missing:
        raise ConfigError(f"device={device} is {gpu.describe(index, name, capability)}, and "
                          f"{missing}: {gpu.INSTEAD}")


def no_such_gpu_fix(none_because, count):
    """What to do when ``device=gpu:N`` names a GPU MXNet does not see."""
    if count:
        return f"use device=gpu:0 ... gpu:{count - 1}, or device=auto"
    if none_because == gpu.NO_CUDA:
        return f"use device=cpu or device=auto, or install MXNet's CUDA build: {gpu.INSTALL_CUDA}"
    return ("use device=cpu or device=auto, or make a GPU visible (nvidia-smi lists them; the "
            "driver must support CUDA 11; CUDA_VISIBLE_DEVICES must not hide them)")


def to_device(batch, ctx):
    """A host `mtx.data.batching.Batch` -> [src_tokens (B, S), src_valid_len (B,), tgt_in (B, T),
    tgt_out (B, T), tgt_valid_len (B,)] on ``ctx``."""
    from mxnet import np
    return [np.array(a, ctx=ctx) for a in (batch.src_tokens, batch.src_valid_len, batch.tgt_in,
                                           batch.tgt_out, batch.tgt_valid_len)]


def seed_everything(seed):
    """Python's, NumPy's and MXNet's generators (dropout) from one seed."""
    import mxnet as mx
    random.seed(seed)
    onp.random.seed(seed % 2 ** 32)
    mx.random.seed(seed % 2 ** 31)
