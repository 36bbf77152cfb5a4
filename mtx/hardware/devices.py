"""Devices: names to MXNet contexts, the NumPy interface on, host batches to device arrays, and
seeding.

MXNet is imported by the functions that use it: `parse_device` also serves the CTranslate2
backend (`mtx.deploy.backend`), which runs without MXNet.
"""
import logging
import random

import numpy as onp

from ..errors import ConfigError


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
    """'cpu' | 'cpu:N' | 'gpu' | 'gpu:N' | 'auto' -> an MXNet context (ConfigError otherwise,
    or when the GPU is not there)."""
    import mxnet as mx
    kind, index = parse_device(device)
    if kind == "auto":
        return mx.gpu(0) if mx.context.num_gpus() > 0 else mx.cpu()
    if kind == "gpu":
        if mx.context.num_gpus() <= index:
            raise ConfigError(f"device={device} but MXNet sees {mx.context.num_gpus()} GPU(s): "
                              f"use device=cpu, or install a CUDA build of mxnet")
        return mx.gpu(index)
    return mx.cpu(index)  # separate CPU contexts share the cores (tests, debugging)


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
