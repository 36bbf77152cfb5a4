"""What a resumed run must share with the run it continues, checked before anything in the run
directory is written: what its weights mean (`check_identity`) and the settings that decide its
steps (`check_same_steps`), and how an optimizer state saved under an old module path loads
(`old_module_paths`)."""
import importlib
import sys
from contextlib import contextmanager

from ..config import ModelConfig
from ..errors import CheckpointError
from ..files import read_json
from ..typecheck import declared, renamed

# What a resumed run may change: how long it trains, how often it saves, where it runs (its
# precision is the one it started with anyway). Any other train.* key, the seed and data.* (but
# where Multi30k is read from and how the files are checked) decide the steps it takes: a resume
# must take the same ones.
RESUME_MAY_CHANGE = {"train": {"resume", "max_epochs", "max_minutes", "patience",
                               "save_every_minutes", "keep_last", "devices", "kvstore",
                               "hybridize", "precision"},
                     "data": {"raw_dir", "verify"}}


# run.json's keys added since runs were first written: a run without one is not compared on it
ADDED_KEYS = ("corpora",)


def check_identity(run, identity):
    """Refuse to continue the `RunDir` ``run`` as a run that means something else
    (`mtx.runs.rundir.run_identity`: model config, language pair, tokenizer)."""
    path = run.path / "run.json"
    if not path.is_file():  # mtx-train writes it before any checkpoint
        raise CheckpointError(f"{run.path} has checkpoints but no run.json: not a run that "
                              f"this mtx-train started; use a new hydra.run.dir")
    saved = read_json(path, CheckpointError, "run description")
    if isinstance(saved, dict) and isinstance(saved.get("model"), dict):  # a setting renamed
        # since: its new name; one added since: its default
        saved["model"] = {**declared(ModelConfig), **renamed(ModelConfig, saved["model"])}
    differ = sorted(k for k in set(saved) | set(identity) if saved.get(k) != identity.get(k)
                    and (k in saved or k not in ADDED_KEYS))
    if differ:
        keys = [f"model.{k}" for k in identity["model"]
                if saved.get("model", {}).get(k) != identity["model"][k]]
        raise CheckpointError(f"{run.path} holds a run with other {', '.join(keys or differ)}"
                              f"; resume with the run's own settings or use a new "
                              f"hydra.run.dir (nothing in the run was changed)")


def check_same_steps(run, resolved_config_yaml):
    """Refuse to resume the `RunDir` ``run`` with other training settings than its
    config.yaml's: the seed, and the train.* and data.* keys but RESUME_MAY_CHANGE. A key only
    one of the two configs has (one added to mtx since the run started) keeps its default, so
    it is not compared. ``resolved_config_yaml`` None (a `Fit` built in code, `new_fit`):
    nothing to compare."""
    from omegaconf import OmegaConf
    if resolved_config_yaml is None or not (run.path / "config.yaml").is_file():
        return
    saved = run.train_config()
    now = OmegaConf.to_container(OmegaConf.create(resolved_config_yaml), resolve=True)
    differ = []
    if "seed" in saved and "seed" in now and saved["seed"] != now["seed"]:
        differ.append(f"seed={saved['seed']} (now {now['seed']})")
    for section, free in RESUME_MAY_CHANGE.items():
        old, new = saved.get(section) or {}, now.get(section) or {}
        differ += [f"{section}.{key}={old[key]} (now {new[key]})"
                   for key in sorted(set(old) & set(new) - free) if old[key] != new[key]]
    if differ:
        raise CheckpointError(f"{run.path} was trained with {', '.join(differ)}; a resumed "
                              f"run must take the same steps: resume with the run's own "
                              f"settings (its config.yaml) or use a new hydra.run.dir "
                              f"(nothing in the run was changed)")


# The optimizer state pickles the optimizer object under its module's path. Runs saved while the
# optimizer lived in `mtx.optimizer` name that path: the one place that maps it to today's.
OLD_MODULE_PATHS = {"mtx.optimizer": "mtx.training.optimizer"}


@contextmanager
def old_module_paths():
    """While unpickling an optimizer state: each old module path names today's module."""
    added = [old for old in OLD_MODULE_PATHS if old not in sys.modules]
    for old in added:
        sys.modules[old] = importlib.import_module(OLD_MODULE_PATHS[old])
    try:
        yield
    finally:
        for old in added:
            del sys.modules[old]
