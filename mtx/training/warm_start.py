"""Fine-tuning (``init_from=<run>``): a new run that starts from another run's weights (the
checkpoint that run chose) and tokenizer, on any corpus; its model settings must be the other
run's (dropout aside)."""
import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from ..data.corpus import load_tokenizer
from ..errors import CheckpointError, ConfigError
from ..runs.rundir import RunDir, require_run

log = logging.getLogger(__name__)

MAY_DIFFER = ("dropout", "attention_dropout")  # model settings a fine-tuning run may change


@dataclass
class Parent:
    """The run a fine-tuning run starts from: ``run`` (`RunDir`), ``manifest`` (the checkpoint
    it chose), its tokenizer and `ModelConfig`."""
    run: RunDir
    manifest: Path
    tokenizer: object
    model_cfg: object

    def described(self):
        """What run.json and report.json say of where the run started."""
        return {"run": str(self.run.path), "checkpoint": Path(self.manifest).name}


def parent_run(init_from, data_cfg):
    """The `Parent` named by ``init_from`` (a training run directory); one-line errors for what
    is not a finished run, or has another language pair or source lowercasing than
    ``data_cfg``."""
    try:
        run = require_run(Path(init_from).expanduser().absolute())
        manifest = run.locate_checkpoint("auto")
        parent_data = run.data_config()
        tokenizer = load_tokenizer(run.path)
    except CheckpointError as err:
        raise CheckpointError(f"init_from: {str(err).replace('ckpt=', '', 1)}") from None
    pair = (parent_data.src_lang, parent_data.tgt_lang) if parent_data else None
    if pair and pair != (data_cfg.src_lang, data_cfg.tgt_lang):
        raise ConfigError(f"init_from={init_from} translates {pair[0]}->{pair[1]}, this run's "
                          f"data {data_cfg.src_lang}->{data_cfg.tgt_lang}: a fine-tuning run "
                          f"keeps its parent's languages (its vocabulary and output layer are "
                          f"theirs); give data.src_lang={pair[0]} data.tgt_lang={pair[1]}")
    lowercased = bool(parent_data and parent_data.lowercase_source)
    if lowercased != data_cfg.lowercase_source:
        raise ConfigError(f"init_from={init_from} was trained with data.lowercase_source="
                          f"{str(lowercased).lower()}: its tokenizer expects that; give the same")
    return Parent(run, manifest, tokenizer, run.model_config())


def check_model(parent, model_cfg):
    """ConfigError naming each model setting (but `MAY_DIFFER`) that differs from the parent's
    (``model_cfg`` with its vocabulary size already set)."""
    ours, theirs = dataclasses.asdict(model_cfg), dataclasses.asdict(parent.model_cfg)
    differ = [f"model.{key}={theirs.get(key)} (now {value})" for key, value in ours.items()
              if key not in MAY_DIFFER and theirs.get(key) != value]
    if differ:
        raise ConfigError(f"init_from={parent.run.path} has {', '.join(differ)}: a fine-tuning "
                          f"run keeps the model it starts from; give its model settings")


def load_weights(parent, model, ctxs):
    """The parent's chosen checkpoint into ``model`` on every device of ``ctxs``."""
    store = parent.run.checkpoints
    store.load(store.verify(parent.manifest, parent.model_cfg), model, ctxs)
    log.info("started from %s (%s)", parent.run.path, Path(parent.manifest).name)
