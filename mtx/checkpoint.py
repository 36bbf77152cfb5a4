"""Checkpoints: parameters written atomically with a checksum and the config they belong to.

A run directory holds ``model.json`` (the ModelConfig), the tokenizer, and ``checkpoints/``:
``epoch_NNN.params`` (+ ``.json`` sidecar: step, epoch, sha256, config), ``best.params``,
``average.params``. `load_model` rebuilds the model from the saved config.
"""
import dataclasses
import hashlib
import json
from pathlib import Path

import mxnet as mx

from .config import ModelConfig
from .errors import CheckpointError
from .files import atomic_write, atomic_write_text, sha256_of



RESUME_HINT = "free some disk space and resume with train.resume=true"


def config_digest(model_cfg):
    text = json.dumps(dataclasses.asdict(model_cfg), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def save_params(model, path, **meta):
    """Write ``path`` (.params) and its ``.json`` sidecar atomically; returns the sidecar dict."""
    path = Path(path)
    atomic_write(path, model.save_parameters, RESUME_HINT)
    sidecar = dict(meta, sha256=sha256_of(path), config=dataclasses.asdict(model.cfg),
                   config_digest=config_digest(model.cfg))
    atomic_write_text(path.with_suffix(".json"), json.dumps(sidecar, indent=1))
    return sidecar


def check_params(path, model_cfg):
    """Raise CheckpointError unless ``path`` exists, matches its checksum and ``model_cfg``."""
    path = Path(path)
    sidecar_path = path.with_suffix(".json")
    if not path.is_file() or not sidecar_path.is_file():
        raise CheckpointError(f"{path}: checkpoint or its .json sidecar is missing; "
                              f"train first or point ckpt= at a run directory")
    sidecar = json.loads(sidecar_path.read_text())
    if sha256_of(path) != sidecar["sha256"]:
        raise CheckpointError(f"{path}: checksum mismatch (truncated or corrupted file); "
                              f"use another checkpoint of the run")
    if sidecar["config_digest"] != config_digest(model_cfg):
        raise CheckpointError(f"{path}: written for a different model config than "
                              f"{path.parent.parent / 'model.json'}; do not mix runs")
    return sidecar


def save_model_config(model_cfg, run_dir):
    atomic_write_text(Path(run_dir) / "model.json", json.dumps(dataclasses.asdict(model_cfg),
                                                               indent=1))


def load_model_config(run_dir):
    path = Path(run_dir) / "model.json"
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: {run_dir} is not an mtx training run")
    try:
        return ModelConfig(**json.loads(path.read_text()))
    except (ValueError, TypeError) as err:
        raise CheckpointError(f"{path}: not a valid model config ({err})") from None


def load_model(run_dir, ctx, which="best"):
    """Rebuild the model of a run and load checkpoint ``which`` (best | average | last | a path)."""
    from .model import Transformer
    cfg = load_model_config(run_dir)
    path = resolve_checkpoint(run_dir, which)
    check_params(path, cfg)
    model = Transformer(cfg)
    try:
        model.load_parameters(str(path), ctx=ctx)
    except (mx.MXNetError, AssertionError) as err:
        raise CheckpointError(f"{path}: cannot be loaded into the run's model ({err})") from None
    return model


def epoch_checkpoints(run_dir):
    return sorted((Path(run_dir) / "checkpoints").glob("epoch_*.params"))


def resolve_checkpoint(run_dir, which):
    ckpt_dir = Path(run_dir) / "checkpoints"
    if which == "last":
        found = epoch_checkpoints(run_dir)
        if not found:
            raise CheckpointError(f"{ckpt_dir} has no epoch checkpoints yet")
        return found[-1]
    if which in ("best", "average"):
        return ckpt_dir / f"{which}.params"
    return Path(which)
