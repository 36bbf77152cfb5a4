"""A run's checkpoints (its ``checkpoints/`` folder): content-addressed data files and the
manifests that make each checkpoint one unit.

Files: ``params-<sha>.params``, ``states-<sha>.states`` and, with a moving average of the
weights (train.ema_decay), ``ema-<sha>.params`` (never overwritten) and
``<name>.json``, a manifest naming the files of checkpoint ``<name>`` (latest, epoch_NNN or
step_NNNNNN, best, average) with their SHA-256, the model config and the training state. The
data files are written first and the manifest last, atomically: a crash or a full disk between
two files leaves the previous manifest pointing at the previous files. Every file is verified
against its manifest before it is loaded, so the optimizer state (a pickle) is never unpickled
unverified. MXNet is imported only to load (`mtx.runs.rundir` serves processes without it).
"""
import dataclasses
import json
import os
from pathlib import Path

from . import faults
from .resume import old_module_paths
from ..typecheck import declared, renamed, to_keys
from ..config import ModelConfig
from ..errors import CheckpointError
from ..files import (
    atomic_write,
    atomic_write_json,
    fsync_dir,
    held_by_another_process,
    read_json,
    sha256_of,
    temp_path,
)

RESUME_HINT = "free some disk space and resume with train.resume=true"
MANIFEST_FORMAT = 2  # what `save` writes; `verify` reads no other


def old_format_error(path, what):
    """The refusal of a run file in a format this mtx does not write (``what`` describes it):
    it reads the formats it writes, nothing older."""
    return CheckpointError(f"{path}: {what}, written by an older mtx, which this one does not "
                           f"read; train the run again, or use the mtx that wrote it")


VALIDATED_PREFIXES = ("epoch", "step")  # <prefix>_<number>: a validation's checkpoint


class CheckpointFolder:
    """The names of the checkpoints in ``folder`` (a run's checkpoints/): which there are and
    where their manifests are (nothing is verified)."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def manifests(self):
        return sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []

    def validated_names(self):
        """The kept checkpoints of validations, oldest first: epoch_NNN (a validation at each
        epoch's end) or step_NNNNNN (`train.validate_every`), by number (epoch_1000 after
        epoch_999)."""
        names = [p.stem.split("_", 1) for p in self.folder.glob("*_*.json")]
        names = [(VALIDATED_PREFIXES.index(kind), int(n) if n.isdigit() else -1, f"{kind}_{n}")
                 for kind, n in names if kind in VALIDATED_PREFIXES]
        return [name for *_, name in sorted(names)]

    def resume_points(self):
        """The checkpoints training can continue from, newest first: `latest`, then the
        validated checkpoints."""
        latest = ["latest"] if (self.folder / "latest.json").is_file() else []
        return latest + self.validated_names()[::-1]

    def manifest_path(self, name):
        """The manifest of checkpoint ``name`` (or a path to one); CheckpointError listing the
        run's checkpoints when the run has none of that name (nothing is read)."""
        path = Path(name) if str(name).endswith(".json") else self.folder / f"{name}.json"
        if path.parent == Path("."):  # best.json: the run's own
            path = self.folder / path.name
        if path.is_file() and path.resolve().parent != self.folder.resolve():
            # its weights would meet this run's tokenizer
            raise CheckpointError(f"checkpoint={name} is not in {self.folder}: a checkpoint "
                                  f"of another run would be read with this run's tokenizer; "
                                  f"give ckpt= the run it belongs to")
        if not path.is_file() and path.parent == self.folder:
            names = [p.stem for p in self.manifests()]
            raise CheckpointError(
                f"{self.folder.parent} has no checkpoint {path.stem}; " + (
                    f"choose checkpoint= one of {', '.join(names)} (or last, average_last_N)"
                    if names else "it has no checkpoint yet (stopped in its first epoch?); "
                    "resume it with train.resume=true hydra.run.dir=<the run>"))
        return path

    def manifest_of(self, params_file):
        """The manifest (path) of a checkpoint's .params file: the newest of the manifests that
        names it."""
        name = Path(params_file).name
        for path in sorted(self.manifests(), key=lambda p: p.stat().st_mtime, reverse=True):
            try:
                if json.loads(path.read_text()).get("files", {}).get("params") == name:
                    return str(path)
            except (OSError, ValueError, AttributeError):
                continue  # a damaged manifest names nothing; verify reports it when it is chosen
        raise CheckpointError(f"checkpoint={params_file}: no checkpoint of {self.folder.parent} "
                              f"names this file; choose checkpoint= best, last, epoch_NNN or "
                              f"step_NNNNNN")



class CheckpointStore(CheckpointFolder):
    """The checkpoints in ``folder``, written, verified and loaded. ``model_config``: a function
    that returns the ModelConfig the checkpoints must belong to (the run's model.json)."""

    def __init__(self, folder, model_config):
        super().__init__(folder)
        self.model_config = model_config

    def _store(self, kind, suffix, write):
        """Write a data file under its content's name; returns (file name, sha256)."""
        staging = temp_path(self.folder / f"{kind}-staging{suffix}")  # this process's own
        atomic_write(staging, write, RESUME_HINT)
        digest = sha256_of(staging)
        name = f"{kind}-{digest[:16]}{suffix}"
        os.replace(staging, self.folder / name)
        fsync_dir(self.folder)
        return name, digest

    def save(self, name, model, trainer=None, state=None, ema=None, **meta):
        """Checkpoint ``name``: parameters (+ optimizer state, training state and the moving
        average of the weights when given), then the manifest. Returns the manifest."""
        self.folder.mkdir(parents=True, exist_ok=True)
        files, sha = {}, {}
        files["params"], sha["params"] = self._store("params", ".params", model.save_parameters)
        if trainer is not None:
            files["states"], sha["states"] = self._store("states", ".states", trainer.save_states)
        if ema is not None:
            with ema.applied():
                files["ema"], sha["ema"] = self._store("ema", ".params", model.save_parameters)
        faults.point("checkpoint")
        manifest = dict(meta, format=MANIFEST_FORMAT, files=files, sha256=sha,
                        state=None if state is None else dataclasses.asdict(state),
                        config=to_keys(model.cfg))
        atomic_write_json(self.folder / f"{name}.json", manifest, RESUME_HINT)
        return manifest

    def link(self, name, manifest):
        """Checkpoint ``name`` as the same files as ``manifest`` (no data is written again)."""
        manifest = {k: v for k, v in manifest.items() if k != "paths"}  # as `verify` adds
        atomic_write_json(self.folder / f"{name}.json", manifest, RESUME_HINT)

    def verify(self, name, model_cfg=None):
        """The manifest of checkpoint ``name`` (or a path to one) after checking that every file
        is there with its SHA-256 and that it belongs to ``model_cfg`` (default: the run's)."""
        path = self.manifest_path(name)
        manifest = read_json(path, CheckpointError, "checkpoint manifest")
        if isinstance(manifest, dict) and "format" not in manifest and "sha256" in manifest:
            raise old_format_error(path, "a checkpoint manifest of format 1 (beside its .params)")
        try:
            files, sha = _files_of(manifest, path), dict(manifest["sha256"])
            # a setting renamed since: its new name; one added since: its default
            written_for = {**declared(ModelConfig), **renamed(ModelConfig, manifest["config"])}
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CheckpointError(f"{path} is not an mtx checkpoint manifest; use another "
                                  f"checkpoint of the run") from None
        for kind, file in files.items():
            if not file.is_file():
                raise CheckpointError(f"{file} is missing (named by {path.name}); use another "
                                      f"checkpoint of the run")
            if sha256_of(file) != sha.get(kind):
                raise CheckpointError(f"{file.name}: checksum mismatch with {path.name} "
                                      f"(truncated or corrupted file); use another checkpoint")
        if written_for != to_keys(model_cfg or self.model_config()):
            raise CheckpointError(f"{path}: written for a different model config than "
                                  f"{self.folder.parent / 'model.json'}; do not mix runs")
        manifest["paths"] = files
        return manifest

    def load(self, manifest, model, ctxs, trainer=None, ema=None):
        """Load a verified manifest into ``model``: to resume (``trainer`` given), its parameters,
        optimizer state and moving average (into ``ema``); to translate (no ``trainer``), the
        weights it is used with: the moving average when it has one, else its parameters."""
        import mxnet as mx
        paths = manifest["paths"]
        try:
            if trainer is None:
                model.load_parameters(str(paths.get("ema", paths["params"])), ctx=ctxs)
                return
            model.load_parameters(str(paths["params"]), ctx=ctxs)
            with old_module_paths():
                trainer.load_states(str(paths["states"]))
            if ema is not None and "ema" in paths:
                with ema.applied():
                    model.load_parameters(str(paths["ema"]), ctx=ctxs)
        except (mx.MXNetError, AssertionError, KeyError, OSError, ImportError) as err:
            raise CheckpointError(f"{manifest['paths'].get('params')}: cannot be loaded into "
                                  f"the run's model ({str(err).splitlines()[0]})") from None

    def drop(self, names):
        """Delete the manifests of checkpoints ``names`` (`collect_garbage` then takes their
        files)."""
        for name in names:
            (self.folder / f"{name}.json").unlink(missing_ok=True)

    def collect_garbage(self):
        """Delete data files no manifest names (old checkpoints, a crash's leftovers)."""
        named = set()
        for path in self.manifests():
            try:
                named |= {p.name for p in _files_of(json.loads(path.read_text()), path).values()}
            except (ValueError, KeyError, TypeError, AttributeError, OSError):
                continue  # a damaged manifest names nothing; its files go
        for path in self.folder.glob("*"):
            data_file = path.suffix in (".params", ".states") or path.name.startswith(".")
            if data_file and path.name not in named and not held_by_another_process(path):
                path.unlink(missing_ok=True)


def _files_of(manifest, path):
    """{kind: Path} of the data files a manifest (at ``path``) names; CheckpointError when it
    names anything but a file beside it (``../x``, an absolute path): a damaged manifest."""
    files = {}
    for kind, name in manifest["files"].items():
        if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name:
            raise CheckpointError(f"{path} is damaged: it names {name!r}, which is not a file "
                                  f"of {path.parent}; use another checkpoint of the run")
        files[kind] = path.parent / name
    return files


def average_into(store, model, names, ctxs):
    """Load the mean of the parameters of checkpoints ``names`` of ``store`` into ``model``
    (nothing is written)."""
    params, total = model.collect_params(), None
    first = ctxs[0] if isinstance(ctxs, (list, tuple)) else ctxs  # data() alone: cpu(0)
    for name in names:
        store.load(store.verify(name, model.cfg), model, ctxs)
        values = {k: p.data(first).copy() for k, p in params.items()}
        total = values if total is None else {k: total[k] + v for k, v in values.items()}
    for k, p in params.items():
        p.set_data(total[k] / len(names))


def save_average(store, model, names, ctxs, out_name="average"):
    """`average_into` ``model``, saved as checkpoint ``out_name`` of ``store``; its manifest."""
    average_into(store, model, names, ctxs)
    return store.save(out_name, model, averaged=list(names))


