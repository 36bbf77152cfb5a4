"""A training run's directory: the one owner of its files.

    run.json            what the weights mean: model config, language pair, tokenizer hash
    model.json          the ModelConfig (rebuilds the model), data.json the DataConfig
    config.yaml         the resolved config the run was started with
    precision.json      the matrix-multiply precision it chose then (a resumed run keeps it)
    spm.model | toy_symbols.json     the tokenizer
    checkpoints/        the checkpoints, each one unit (`run.checkpoints`, `mtx.runs.checkpoints`)
    metrics.jsonl, steps.jsonl, events.out.tfevents.*   the records (`run.records`, `mtx.runs.records`)
    report.json         the final report

What a resume must keep is `mtx.runs.resume`'s.
"""
import re
from pathlib import Path

from .checkpoints import CheckpointStore, average_into, old_format_error
from ..config import DataConfig, ModelConfig
from ..data.corpus import DATA_FILE
from ..errors import CheckpointError
from ..files import atomic_write_json, atomic_write_text, read_json
from .records import RunRecords
from ..typecheck import from_keys, to_keys


def read_config(cls, path, what):
    """``cls`` (e.g. ModelConfig) from the JSON file ``path`` a run wrote (``what``, e.g. "model
    config"): missing, damaged or not such a config -> a one-line CheckpointError naming it."""
    values = read_json(path, CheckpointError, f"{what} of the run")
    try:
        return cls(**from_keys(cls, values))
    except (ValueError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{path}: not a valid {what} ({err})") from None


def run_identity(model_cfg, data_cfg, tokenizer_sha256):
    """What changes the meaning of a run's weights; a resumed run must have the same. A config
    is kept under the keys users type (`to_keys`), which a renamed setting's ``RENAMED`` maps."""
    return {"model": to_keys(model_cfg), "data": data_cfg.name,
            "src_lang": data_cfg.src_lang, "tgt_lang": data_cfg.tgt_lang,
            "tokenizer_sha256": tokenizer_sha256}


class RunDir:
    """The files of one run directory (see the module docstring): what the run is, its
    checkpoints (``checkpoints``, a `CheckpointStore`) and its records (``records``)."""

    def __init__(self, path):
        self.path = Path(path)
        self.checkpoints = CheckpointStore(self.path / "checkpoints", self.model_config)
        self.records = RunRecords(self.path)

    def start(self, identity, model_cfg, data_cfg, resolved_config_yaml):
        """Write what describes the run (atomically; after `mtx.runs.resume.check_identity`)."""
        self.checkpoints.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path / "run.json", identity)
        self.write_model_config(model_cfg)
        atomic_write_json(self.path / DATA_FILE, to_keys(data_cfg))
        if resolved_config_yaml is not None:
            atomic_write_text(self.path / "config.yaml", resolved_config_yaml)

    def record_precision(self, choice):
        """Keep `mtx.training.precision.choose_precision`'s choice for the resumes of this run."""
        atomic_write_json(self.path / "precision.json", choice)

    def recorded_precision(self):
        """The precision choice the run started with; None before it has one (a run whose
        training has not started)."""
        path = self.path / "precision.json"
        if path.is_file():
            return read_json(path, CheckpointError, "precision of the run")
        if self.checkpoints.manifests() and (self.path / "config.yaml").is_file():
            raise old_format_error(self.path, "a run with checkpoints but no precision.json")
        return None

    def model_config(self):
        return read_config(ModelConfig, self.path / "model.json", "model config")

    def write_model_config(self, model_cfg):
        """model.json: the ModelConfig that rebuilds the run's model (atomically)."""
        atomic_write_json(self.path / "model.json", to_keys(model_cfg))

    def data_config(self):
        """The run's DataConfig, or None for a run without data.json (one built in code)."""
        path = self.path / DATA_FILE
        return read_config(DataConfig, path, "data config") if path.is_file() else None

    def train_config(self):
        """The resolved config the run was started with, as a dict ({"train": {...}, ...})."""
        from omegaconf import OmegaConf
        path = self.path / "config.yaml"
        if not path.is_file():
            raise CheckpointError(f"{self.path} has no config.yaml: is it a training run "
                                  f"directory?")
        try:
            return OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        except Exception as err:  # a YAML error of any kind: the file is damaged
            raise CheckpointError(f"{path} is damaged ({type(err).__name__}); restore it from a "
                                  f"copy of the run") from None

    def started_from(self):
        """Where a fine-tuning run started (run.json's ``init_from``: run and checkpoint), or
        None."""
        path = self.path / "run.json"
        saved = read_json(path, CheckpointError, "run description") if path.is_file() else {}
        return saved.get("init_from")

    def report(self):
        """report.json of a finished run (a damaged one: CheckpointError), or None."""
        path = self.path / "report.json"
        return read_json(path, CheckpointError, "report") if path.is_file() else None

    def write_json(self, name, obj, hint=None):
        return atomic_write_json(self.path / name, obj, hint)

    def checkpoint_name(self, which="auto"):
        """The checkpoint ``which`` names: auto -> the one the run chose (report.json; best
        before the run finished), last -> the newest validated checkpoint, a .params file -> its
        manifest; any other name as it is (`CheckpointStore.verify` checks it)."""
        if which == "auto":
            report = self.report()
            try:
                return report["final"]["checkpoint"] if report else "best"
            except (KeyError, TypeError):
                raise CheckpointError(f"{self.path / 'report.json'} names no final checkpoint; "
                                      f"pass checkpoint=best (or another name)") from None
        if str(which).endswith(".params"):
            return self.checkpoints.manifest_of(which)
        if which == "last":
            names = self.checkpoints.validated_names()
            if not names:
                raise CheckpointError(f"{self.checkpoints.folder} has no validated checkpoints yet")
            return names[-1]
        return which

    def locate_checkpoint(self, which="auto"):
        """What ``which`` (as `load_run` takes it) names: the list of validated checkpoints to
        average (average_last_N), else the path of its manifest; CheckpointError when the run
        has no such checkpoint. Only names are looked at (`load_run` verifies the files)."""
        name = self.checkpoint_name(which)
        average = re.fullmatch(r"average_last_(\d+)", str(name))
        if not average:
            return self.checkpoints.manifest_path(name)
        n, names = int(average.group(1)), self.checkpoints.validated_names()
        if not 1 <= n <= len(names):
            raise CheckpointError(f"checkpoint=average_last_{n}: {self.checkpoints.folder} keeps "
                                  f"{len(names)} validated checkpoints (train.keep_last); pick N "
                                  f"from 1 to {len(names)}")
        return names[-n:]


def require_run(run_dir):
    """The `RunDir` of ``run_dir`` if it is a training run (it has model.json), else a
    CheckpointError that names the runs below it, if any (a sweep's or a day's folder)."""
    run = RunDir(run_dir)
    if not run.path.is_dir():
        raise CheckpointError(f"ckpt={run.path} is not a directory; pass a training run "
                              f"directory (outputs/train/runs/...)")
    if not (run.path / "model.json").is_file():
        below = sorted(p.parent for p in run.path.glob("**/model.json"))
        hint = (f"pass one of the {len(below)} runs below it, e.g. ckpt={below[0]}" if below
                else "pass a training run directory (outputs/train/runs/...)")
        raise CheckpointError(f"ckpt={run.path} is not a training run (no model.json); {hint}")
    return run


def load_run(run_dir, ctx, which="auto"):
    """(model, tokenizer, DataConfig) of a run directory. ``which``: auto (the checkpoint the run
    chose: average or best), best, average, last, latest, epoch_NNN, step_NNNNNN,
    average_last_N (the mean of the last N validated checkpoints, computed here, nothing
    written), or a manifest path."""
    from ..data.corpus import load_tokenizer
    from ..model.transformer import Transformer
    run = require_run(run_dir)
    found = run.locate_checkpoint(which)
    model_cfg = run.model_config()
    model = Transformer(model_cfg)
    if isinstance(found, list):  # average_last_N: the mean of those checkpoints
        average_into(run.checkpoints, model, found, [ctx])
    else:
        run.checkpoints.load(run.checkpoints.verify(found, model_cfg), model, ctx)
    return model, load_tokenizer(run.path), run.data_config()
