"""A training run's directory: the one owner of its files.

    run.json            what the weights mean: model config, language pair, tokenizer hash
    model.json          the ModelConfig (rebuilds the model), data.json the DataConfig
    config.yaml         the resolved config the run was started with
    precision.json      the matrix-multiply precision it chose then (a resumed run keeps it)
    spm.model | toy_symbols.json     the tokenizer
    checkpoints/        the checkpoints, each one unit (`mtx.checkpoints`)
    metrics.jsonl       one record per epoch, appended
    steps.jsonl         one record per log point (`train.log_every` steps) and epoch end: the
                        loss, learning rate and tokens/s of the steps since the one before
    events.out.tfevents.*   TensorBoard's view of both (`mtx.tensorboard`)
    report.json         the final report

After a resume the records of what is redone are dropped (`keep_records_until`).

"""
import dataclasses
import json
import re
from pathlib import Path

from .checkpoints import RESUME_HINT, CheckpointStore, config_digest
from .config import PRECISIONS, DataConfig, ModelConfig, read_config
from .errors import CheckpointError
from .files import append_line, atomic_write_json, atomic_write_text, read_json, read_json_lines
from .tensorboard import EventLog


# What a resumed run may change: how long it trains, how often it saves, where it runs (its
# precision is the one it started with anyway). Any other train.* key, the seed and data.* (but
# where the corpus is read from) decide the steps it takes: a resume must take the same ones.
RESUME_MAY_CHANGE = {"train": {"resume", "max_epochs", "max_minutes", "patience",
                               "save_every_minutes", "keep_last", "devices", "kvstore",
                               "hybridize", "precision"},
                     "data": {"raw_dir"}}


def run_identity(model_cfg, data_cfg, tokenizer_sha256):
    """What changes the meaning of a run's weights; a resumed run must have the same."""
    return {"model": dataclasses.asdict(model_cfg), "data": data_cfg.name,
            "src_lang": data_cfg.src_lang, "tgt_lang": data_cfg.tgt_lang,
            "tokenizer_sha256": tokenizer_sha256}


class RunDir(CheckpointStore):
    """The files of one run directory (see the module docstring); its checkpoints are
    `CheckpointStore`'s."""

    def __init__(self, path):
        super().__init__(path)
        self.events = None  # the TensorBoard event log, opened by the first record written

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

    def check_settings(self, resolved_config_yaml):
        """Refuse (before anything is written) to resume with other training settings than the
        run's config.yaml: the seed, and train.* and data.* keys but RESUME_MAY_CHANGE (keys
        only one of the two configs has are not compared: a run from an older mtx)."""
        from omegaconf import OmegaConf
        if resolved_config_yaml is None or not (self.path / "config.yaml").is_file():
            return
        saved = OmegaConf.to_container(self.train_config(), resolve=True)
        now = OmegaConf.to_container(OmegaConf.create(resolved_config_yaml), resolve=True)
        differ = []
        if "seed" in saved and "seed" in now and saved["seed"] != now["seed"]:
            differ.append(f"seed={saved['seed']} (now {now['seed']})")
        for section, free in RESUME_MAY_CHANGE.items():
            old, new = saved.get(section) or {}, now.get(section) or {}
            differ += [f"{section}.{key}={old[key]} (now {new[key]})"
                       for key in sorted(set(old) & set(new) - free) if old[key] != new[key]]
        if differ:
            raise CheckpointError(f"{self.path} was trained with {', '.join(differ)}; a resumed "
                                  f"run must take the same steps: resume with the run's own "
                                  f"settings (its config.yaml) or use a new hydra.run.dir "
                                  f"(nothing in the run was changed)")

    def start(self, identity, model_cfg, data_cfg, resolved_config_yaml):
        """Write what describes the run (atomically; after `check_identity`)."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path / "run.json", identity)
        atomic_write_json(self.path / "model.json", dataclasses.asdict(model_cfg))
        atomic_write_json(self.path / "data.json", dataclasses.asdict(data_cfg))
        if resolved_config_yaml is not None:
            atomic_write_text(self.path / "config.yaml", resolved_config_yaml)

    def record_precision(self, choice):
        """Keep `mtx.precision.choose_precision`'s choice for the resumes of this run."""
        atomic_write_json(self.path / "precision.json", choice)

    def recorded_precision(self):
        """The precision choice the run started with, or None. A run with checkpoints from before
        precision.json was kept ran its config.yaml's train.precision (read before `start`
        rewrites that file)."""
        path = self.path / "precision.json"
        if path.is_file():
            return read_json(path, CheckpointError, "precision of the run")
        if not (self.manifests() and (self.path / "config.yaml").is_file()):
            return None
        precision = self.train_config().get("train", {}).get("precision")
        return ({"used": precision, "requested": precision, "reason": "config.yaml of the run"}
                if precision in PRECISIONS else None)

    def model_config(self):
        return read_config(ModelConfig, self.path / "model.json", "model config")

    def data_config(self):
        """The run's DataConfig, or None for a run without data.json."""
        path = self.path / "data.json"
        return read_config(DataConfig, path, "data config") if path.is_file() else None

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

    # -- metrics and reports ---------------------------------------------------------------------
    def append_metrics(self, record):
        """An epoch's record (metrics.jsonl, and TensorBoard)."""
        events = self.event_log()
        append_line(self.path / "metrics.jsonl", json.dumps(record), RESUME_HINT)
        events.add(record, epoch=True)

    def metrics(self):
        return read_json_lines(self.path / "metrics.jsonl", CheckpointError)

    def append_step(self, record):
        """A log point's record (steps.jsonl, and TensorBoard)."""
        events = self.event_log()
        append_line(self.path / "steps.jsonl", json.dumps(record), RESUME_HINT)
        events.add(record)

    def steps(self):
        return read_json_lines(self.path / "steps.jsonl", CheckpointError)

    def keep_records_until(self, epoch, step):
        """Drop the records of epochs after ``epoch`` and of steps after ``step`` (they are
        being redone after a resume); the TensorBoard events start anew from those kept."""
        self.close_events()
        for name, kept in (("metrics.jsonl", [r for r in self.metrics() if r["epoch"] <= epoch]),
                           ("steps.jsonl", [r for r in self.steps() if r["step"] <= step])):
            atomic_write_text(self.path / name, "".join(json.dumps(r) + "\n" for r in kept),
                              RESUME_HINT)
        self.event_log()

    def event_log(self):
        """The open TensorBoard event log (`mtx.tensorboard`), started with the records kept."""
        if self.events is None:
            self.events = EventLog(self.path, [(r, False) for r in self.steps()]
                                   + [(r, True) for r in self.metrics()])
        return self.events

    def close_events(self):
        """Flush and close the TensorBoard event file (a later record opens it again)."""
        if self.events is not None:
            self.events.close()
            self.events = None

    def report(self):
        """report.json of a finished run (a damaged one: CheckpointError), or None."""
        path = self.path / "report.json"
        return read_json(path, CheckpointError, "report") if path.is_file() else None

    def checkpoint_name(self, which="auto"):
        """The checkpoint ``which`` names: auto -> the one the run chose (report.json; best
        before the run finished), last -> the newest epoch checkpoint, a .params file -> its
        manifest; any other name as it is (`CheckpointStore.verify` checks it)."""
        if which == "auto":
            report = self.report()
            try:
                return report["final"]["checkpoint"] if report else "best"
            except (KeyError, TypeError):
                raise CheckpointError(f"{self.path / 'report.json'} names no final checkpoint; "
                                      f"pass checkpoint=best (or another name)") from None
        if str(which).endswith(".params"):
            return self.manifest_of(which)
        if which == "last":
            names = self.epoch_names()
            if not names:
                raise CheckpointError(f"{self.checkpoints} has no epoch checkpoints yet")
            return names[-1]
        return which

    def locate_checkpoint(self, which="auto"):
        """What ``which`` (as `load_run` takes it) names: the list of epoch checkpoint names to
        average (average_last_N), else the path of its manifest; CheckpointError when the run
        has no such checkpoint. Only names are looked at (`load_run` verifies the files)."""
        name = self.checkpoint_name(which)
        average = re.fullmatch(r"average_last_(\d+)", str(name))
        if not average:
            return self.manifest_path(name)
        n, names = int(average.group(1)), self.epoch_names()
        if not 1 <= n <= len(names):
            raise CheckpointError(f"checkpoint=average_last_{n}: {self.checkpoints} keeps "
                                  f"{len(names)} epoch checkpoints (train.keep_last); pick N "
                                  f"from 1 to {len(names)}")
        return names[-n:]

    def manifest_of(self, params_file):
        """The manifest (path) of a checkpoint's .params file: the newest of the run's manifests
        that names it (a content-addressed params-<sha>.params), else the one beside it (an
        older run's <name>.params)."""
        name = Path(params_file).name
        for path in sorted(self.manifests(), key=lambda p: p.stat().st_mtime, reverse=True):
            try:
                if json.loads(path.read_text()).get("files", {}).get("params") == name:
                    return str(path)
            except (OSError, ValueError, AttributeError):
                continue  # a damaged manifest names nothing; verify reports it when it is chosen
        beside = Path(params_file).with_suffix(".json")
        if beside.is_file():
            return str(beside)
        raise CheckpointError(f"checkpoint={params_file}: no checkpoint of {self.path} names this "
                              f"file; choose checkpoint= a name such as best, last or epoch_NNN")

    def write_json(self, name, obj, hint=None):
        return atomic_write_json(self.path / name, obj, hint)


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
    chose: average or best), best, average, last, latest, epoch_NNN, average_last_N (the mean of
    the last N epoch checkpoints, computed here, nothing written), or a manifest path."""
    from .corpus import load_tokenizer
    from .model import Transformer
    run = require_run(run_dir)
    found = run.locate_checkpoint(which)
    model_cfg = run.model_config()
    model = Transformer(model_cfg)
    if isinstance(found, list):  # average_last_N: the mean of those epoch checkpoints
        run.average_into(model, found, [ctx])
    else:
        run.load(run.verify(found, model_cfg), model, ctx)
    return model, load_tokenizer(run.path), run.data_config()
