"""A training run's directory: the one owner of its files.

    run.json            what the weights mean: model config, language pair, tokenizer hash
    model.json          the ModelConfig (rebuilds the model), data.json the DataConfig
    config.yaml         the resolved config the run was started with
    spm.model | toy_symbols.json     the tokenizer
    checkpoints/        params-<sha>.params, states-<sha>.states: content-addressed, never
                        overwritten; <name>.json: a manifest naming the files of checkpoint
                        <name> (latest, epoch_NNN, best, average, interrupted) with their SHA-256,
                        the model config digest and the training state
    metrics.jsonl       one record per epoch, appended
    report.json         the final report

A checkpoint is one unit: its data files are written first, its manifest last and atomically,
so a crash or a full disk between two files leaves the previous manifest pointing at the
previous files. Every file is verified against its manifest before it is loaded: the optimizer
state (`.states`) is a pickle and is never unpickled unverified.
"""
import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path

import mxnet as mx

from .config import DataConfig, ModelConfig
from .errors import CheckpointError
from .files import (append_line, atomic_write, atomic_write_json, fsync_dir, read_json,
                    read_json_lines, sha256_of)

log = logging.getLogger(__name__)

RESUME_HINT = "free some disk space and resume with train.resume=true"
LATEST = "latest"  # the resume point: written every train.save_every_minutes and every epoch


def config_digest(model_cfg):
    text = json.dumps(dataclasses.asdict(model_cfg), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_identity(model_cfg, data_cfg, tokenizer_sha256):
    """What changes the meaning of a run's weights; a resumed run must have the same."""
    return {"model": dataclasses.asdict(model_cfg), "data": data_cfg.name,
            "src_lang": data_cfg.src_lang, "tgt_lang": data_cfg.tgt_lang,
            "tokenizer_sha256": tokenizer_sha256}


class RunDir:
    """The files of one run directory (see the module docstring)."""

    def __init__(self, path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"

    # -- what the run is ---------------------------------------------------------------------
    def check_identity(self, identity):
        """Refuse (before anything is written) to continue a run that means something else."""
        path = self.path / "run.json"
        if not path.is_file():
            if self.manifests():
                legacy = self.model_config()
                if config_digest(legacy) != config_digest(ModelConfig(**identity["model"])):
                    raise CheckpointError(f"{self.path} was trained with another model config; "
                                          f"resume with the run's own settings")
            return
        saved = read_json(path, CheckpointError, "run description")
        differ = sorted(k for k in set(saved) | set(identity) if saved.get(k) != identity.get(k))
        if differ:
            keys = [f"model.{k}" for k in identity["model"]
                    if saved.get("model", {}).get(k) != identity["model"][k]]
            raise CheckpointError(f"{self.path} holds a run with other {', '.join(keys or differ)}"
                                  f"; resume with the run's own settings or use a new "
                                  f"hydra.run.dir (nothing in the run was changed)")

    def start(self, identity, model_cfg, data_cfg, resolved_config_yaml):
        """Write what describes the run (atomically; after `check_identity`)."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path / "run.json", identity)
        atomic_write_json(self.path / "model.json", dataclasses.asdict(model_cfg))
        atomic_write_json(self.path / "data.json", dataclasses.asdict(data_cfg))
        if resolved_config_yaml is not None:
            atomic_write(self.path / "config.yaml",
                         lambda tmp: Path(tmp).write_text(resolved_config_yaml, encoding="utf-8"))

    def model_config(self):
        values = read_json(self.path / "model.json", CheckpointError, "model config of the run")
        try:
            return ModelConfig(**values)
        except (ValueError, TypeError) as err:
            raise CheckpointError(f"{self.path / 'model.json'}: not a valid model config "
                                  f"({err})") from None

    def data_config(self):
        path = self.path / "data.json"
        if not path.is_file():
            return None
        try:
            return DataConfig(**read_json(path, CheckpointError, "data config of the run"))
        except (ValueError, TypeError) as err:
            raise CheckpointError(f"{path}: not a valid data config ({err})") from None

    def train_config(self):
        """The resolved config the run was started with (an OmegaConf DictConfig)."""
        from omegaconf import OmegaConf
        for path in (self.path / "config.yaml", self.path / ".hydra" / "config.yaml"):
            if path.is_file():
                try:
                    return OmegaConf.load(path)
                except Exception as err:  # a YAML error of any kind: the file is damaged
                    raise CheckpointError(f"{path} is damaged ({type(err).__name__}); restore "
                                          f"it from a copy of the run") from None
        raise CheckpointError(f"{self.path} has no config.yaml: is it a training run directory?")

    # -- checkpoints ---------------------------------------------------------------------------
    def manifests(self):
        return sorted(self.checkpoints.glob("*.json")) if self.checkpoints.is_dir() else []

    def epoch_names(self):
        return sorted(p.stem for p in self.checkpoints.glob("epoch_*.json"))

    def _store(self, kind, suffix, write):
        """Write a data file under its content's name; returns (file name, sha256)."""
        staging = self.checkpoints / f"staging-{kind}{suffix}"
        atomic_write(staging, write, RESUME_HINT)
        digest = sha256_of(staging)
        name = f"{kind}-{digest[:16]}{suffix}"
        os.replace(staging, self.checkpoints / name)
        fsync_dir(self.checkpoints)
        return name, digest

    def save(self, name, model, trainer=None, state=None, **meta):
        """Checkpoint ``name``: parameters (+ optimizer state and training state when given),
        then the manifest. Returns the manifest."""
        from . import faults
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        files, sha = {}, {}
        files["params"], sha["params"] = self._store("params", ".params", model.save_parameters)
        if trainer is not None:
            files["states"], sha["states"] = self._store("states", ".states", trainer.save_states)
        faults.point("checkpoint")
        manifest = dict(meta, format=2, files=files, sha256=sha,
                        state=None if state is None else dataclasses.asdict(state),
                        config=dataclasses.asdict(model.cfg), config_digest=config_digest(model.cfg))
        atomic_write_json(self.checkpoints / f"{name}.json", manifest, RESUME_HINT)
        return manifest

    def link(self, name, manifest):
        """Checkpoint ``name`` as the same files as ``manifest`` (no data is written again)."""
        manifest = {k: v for k, v in manifest.items() if k != "paths"}  # as `verify` adds
        atomic_write_json(self.checkpoints / f"{name}.json", manifest, RESUME_HINT)

    def verify(self, name, model_cfg=None):
        """The manifest of checkpoint ``name`` (or a path to one) after checking that every file
        is there with its SHA-256 and that it belongs to ``model_cfg`` (default: the run's)."""
        path = Path(name) if str(name).endswith(".json") else self.checkpoints / f"{name}.json"
        manifest = read_json(path, CheckpointError, "checkpoint manifest")
        try:
            files, sha = _files_of(manifest, path), manifest["sha256"]
            if not isinstance(sha, dict):
                sha = {"params": sha}
            digest = manifest["config_digest"]
        except (KeyError, TypeError):
            raise CheckpointError(f"{path} is not an mtx checkpoint manifest; use another "
                                  f"checkpoint of the run") from None
        for kind, file in files.items():
            if not file.is_file():
                raise CheckpointError(f"{file} is missing (named by {path.name}); use another "
                                      f"checkpoint of the run")
            if sha256_of(file) != sha.get(kind):
                raise CheckpointError(f"{file.name}: checksum mismatch with {path.name} "
                                      f"(truncated or corrupted file); use another checkpoint")
        model_cfg = model_cfg or self.model_config()
        if digest != config_digest(model_cfg):
            raise CheckpointError(f"{path}: written for a different model config than "
                                  f"{self.path / 'model.json'}; do not mix runs")
        manifest["paths"] = files
        return manifest

    def load(self, manifest, model, ctxs, trainer=None):
        """Load a verified manifest's parameters (and optimizer state) into ``model``."""
        try:
            model.load_parameters(str(manifest["paths"]["params"]), ctx=ctxs)
            if trainer is not None:
                trainer.load_states(str(manifest["paths"]["states"]))
        except (mx.MXNetError, AssertionError, KeyError, OSError) as err:
            raise CheckpointError(f"{manifest['paths'].get('params')}: cannot be loaded into "
                                  f"the run's model ({str(err).splitlines()[0]})") from None

    def drop(self, names):
        for name in names:
            (self.checkpoints / f"{name}.json").unlink(missing_ok=True)

    def collect_garbage(self):
        """Delete data files no manifest names (old checkpoints, a crash's leftovers)."""
        named = set()
        for path in self.manifests():
            try:
                named |= {p.name for p in _files_of(json.loads(path.read_text()), path).values()}
            except (ValueError, KeyError, TypeError, OSError):
                continue  # a damaged manifest names nothing; its files go
        for path in self.checkpoints.glob("*"):
            data_file = path.suffix in (".params", ".states") or path.name.startswith(".")
            if data_file and path.name not in named:
                path.unlink(missing_ok=True)

    def average(self, model, names, ctxs, out_name="average"):
        """Average the parameters of checkpoints ``names`` into ``model`` and save them as
        checkpoint ``out_name``; returns its manifest."""
        params, total = model.collect_params(), None
        for name in names:
            self.load(self.verify(name, model.cfg), model, ctxs)
            values = {k: p.data().copy() for k, p in params.items()}
            total = values if total is None else {k: total[k] + v for k, v in values.items()}
        for k, p in params.items():
            p.set_data(total[k] / len(names))
        return self.save(out_name, model, averaged=list(names))

    # -- metrics and reports ---------------------------------------------------------------------
    def append_metrics(self, record):
        append_line(self.path / "metrics.jsonl", json.dumps(record), RESUME_HINT)

    def metrics(self):
        return read_json_lines(self.path / "metrics.jsonl", CheckpointError)

    def keep_metrics_until(self, epoch):
        """Drop the records of epochs after ``epoch`` (they are being redone after a resume)."""
        kept = [r for r in self.metrics() if r["epoch"] <= epoch]
        atomic_write(self.path / "metrics.jsonl", lambda tmp: Path(tmp).write_text(
            "".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8"), RESUME_HINT)

    def write_json(self, name, obj):
        return atomic_write_json(self.path / name, obj)


def _files_of(manifest, path):
    """{kind: Path} of the data files a manifest names (format 1: the .params beside it)."""
    if "files" not in manifest:
        return {"params": path.with_suffix(".params")}
    return {kind: path.parent / name for kind, name in manifest["files"].items()}


def load_run(run_dir, ctx, which="auto"):
    """(model, tokenizer, DataConfig) of a run directory. ``which``: auto (the checkpoint the run
    chose: average or best), best, average, last, latest, epoch_NNN, or a manifest path."""
    from .corpus import load_tokenizer
    from .model import Transformer
    run = RunDir(run_dir)
    if not run.path.is_dir():
        raise CheckpointError(f"ckpt={run.path} is not a directory; pass a training run "
                              f"directory (outputs/train/runs/...)")
    if which == "auto":
        report = run.path / "report.json"
        which = (read_json(report, CheckpointError, "report")["final"]["checkpoint"]
                 if report.is_file() else "best")
    if str(which).endswith(".params"):  # a checkpoint file: its manifest sits beside it
        which = str(Path(which).with_suffix(".json"))
    if which == "last":
        names = run.epoch_names()
        if not names:
            raise CheckpointError(f"{run.checkpoints} has no epoch checkpoints yet")
        which = names[-1]
    model_cfg = run.model_config()
    manifest = run.verify(which, model_cfg)
    model = Transformer(model_cfg)
    run.load(manifest, model, ctx)
    return model, load_tokenizer(run.path), run.data_config()
