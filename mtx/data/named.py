"""A corpus prepared into a folder the user names (`mtx-prepare`), and trained from with
``data.prepared=<name or folder>``: the vocabulary and the training split made once, under a
lock (`mtx.data.holds`: a second preparer waits for the first, then makes nothing), checked
against the settings of every run that uses it.

A name without a slash is ``<data dir>/prepared/<name>``; anything else a folder. It holds
    spm.model       the vocabulary (`mtx.data.vocab`)
    prepared.json   the format, the settings it was made with, the training files and their SHA-256
    meta.json, src.*, tgt.*, src_text.*, tgt_text.*   the training split (`mtx.data.prepare`)
"""
import json
import shutil
from pathlib import Path

from ..errors import ConfigError, DataError
from ..files import atomic_write_json, read_json
from ..typecheck import to_keys
from . import holds
from .fingerprints import content_sha256
from .mix import run_tags
from .prepare import FORMAT, PreparedTraining, encode_training
from .sources import prefix_pair
from .vocab import SentencePieceTokenizer
from .vocabularies import run_tokenizer

PREPARED_JSON, SPM_MODEL = "prepared.json", "spm.model"
# the data.* keys that decide what a prepared folder holds: a run on it must have the same
DECIDING = ("src_lang", "tgt_lang", "vocab", "vocab_size", "spm_model", "byte_fallback",
            "character_coverage", "user_symbols", "max_len", "max_length_ratio", "vocab_sample",
            "lowercase_source", "drop_copies", "drop_duplicates", "tsv_columns", "train_tags")


def prepared_folder(name, data_dir):
    """The folder ``data.prepared`` (or mtx-prepare's ``output``) names."""
    if "/" not in str(name):
        return Path(data_dir) / "prepared" / str(name)
    return Path(name).expanduser().absolute()


def deciding_settings(cfg):
    """The settings of the `DataConfig` ``cfg`` that decide a prepared folder (`DECIDING`)."""
    keys = to_keys(cfg)
    return {key: keys[key] for key in DECIDING}


def prepare_named(cfg, folder, data_dir):
    """Make ``folder`` from ``cfg``'s training files (data.train) unless it was made with the
    same settings (then nothing is read); one process at a time. Returns its prepared.json."""
    if cfg.distilled_target:
        raise ConfigError("mtx-prepare prepares data.train as it is; train with "
                          "data.distilled_target= without data.prepared")
    if cfg.vocab != "joint":
        raise ConfigError(f"data.vocab={cfg.vocab}: mtx-prepare makes one joint vocabulary; "
                          f"train with data.vocab=separate without data.prepared")
    with holds.preparing(folder):
        if (folder / PREPARED_JSON).is_file():
            return check_settings(cfg, folder)
        pairs = [prefix_pair(prefix, cfg, "data.train", data_dir) for prefix in cfg.train]
        digests = [content_sha256(path, data_dir, cfg.verify) for pair in pairs for path in pair]
        tokenizer = run_tokenizer(cfg, pairs, digests, data_dir,
                                  run_tags(cfg.train_tags, cfg.user_symbols))
        model = tokenizer.model_path
        description = {"format": FORMAT, "data": deciding_settings(cfg),
                       "files": [[str(p) for p in pair] for pair in pairs], "sha256": digests}

        def describe(tmp):
            shutil.copyfile(model, tmp / SPM_MODEL)
            atomic_write_json(tmp / PREPARED_JSON, description)
        encode_training(cfg, pairs, tokenizer, folder, describe)
        return description


def check_settings(cfg, folder):
    """prepared.json of ``folder`` when it was made by this mtx with ``cfg``'s deciding
    settings; else DataError (one line) naming what differs."""
    path = folder / PREPARED_JSON
    if not path.is_file():
        raise DataError(f"data.prepared={folder} is not a folder mtx-prepare made (no "
                        f"{PREPARED_JSON}); run mtx-prepare output={folder.name} first")
    description = read_json(path, DataError, "prepared corpus description")
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise DataError(f"{folder} was prepared by another version of mtx (format "
                        f"{description.get('format') if isinstance(description, dict) else '?'}, "
                        f"this one reads {FORMAT}); prepare it again with mtx-prepare")
    made, now = description.get("data", {}), deciding_settings(cfg)
    differ = [f"data.{key}={json.dumps(made.get(key))} (now {json.dumps(now[key])})"
              for key in DECIDING if made.get(key) != now[key]]
    if differ:
        raise DataError(f"{folder} was prepared with {', '.join(differ)}: give the settings it "
                        f"was made with, or prepare another folder")
    return description


def open_named(cfg, data_dir, tokenizer=None):
    """(tokenizer, `PreparedTraining`) of ``data.prepared``, held in use for the process's life;
    ``tokenizer`` (a resumed run's own) must be the folder's."""
    folder = prepared_folder(cfg.prepared, data_dir)
    check_settings(cfg, folder)
    own = SentencePieceTokenizer(folder / SPM_MODEL, cfg.lowercase_source,
                                 run_tags(cfg.train_tags, cfg.user_symbols))
    if tokenizer is not None and tokenizer.definition() != own.definition():
        raise DataError(f"{folder} holds another vocabulary than the run's (its spm.model, "
                        f"or init_from's): give a data.prepared made with that vocabulary "
                        f"(mtx-prepare data.spm_model=<its spm.model>)")
    return tokenizer or own, PreparedTraining(folder)
