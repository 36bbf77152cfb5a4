"""The corpus's settings: `DataConfig` (Hydra group ``data``)."""
import os
from dataclasses import dataclass, field
from typing import List, Optional, Union

from ..errors import ConfigError
from ..typecheck import check_settings, setting


TOY_TASKS = ("copy", "reverse")  # the toy task: the target is the source copied or reversed
CORPORA = ("multi30k", "files", "toy")


@dataclass(frozen=True)
class DataConfig:
    name: str = "multi30k"          # one of CORPORA
    src_lang: str = "en"
    tgt_lang: str = "de"
    raw_dir: Optional[str] = None   # a local copy of Multi30k task1/raw; else MTX_MULTI30K_DIR; else download
    vocab_size: int = 8000          # joint SentencePiece vocabulary
    max_pair_len: int = field(default=128, metadata={"key": "max_len"})  # longer pairs: skipped
    subword_dropout: float = 0.0    # BPE-dropout of the training split, resampled every epoch
    subword_dropout_from: float = 0.0  # ... only in epochs from this fraction of the budget on
    distilled_target: Optional[str] = None  # a teacher's translations of the training sources
    distilled_with_references: bool = False  # train on them beside the references, not instead
    lowercase_source: bool = False  # the source side lowercased everywhere (the target keeps its case)
    # data=files: file prefixes, each naming <prefix>.<lang> or <prefix>.<lang>.gz
    train: Union[str, List[str], None] = None  # one prefix, or several (concatenated)
    valid: Optional[str] = None
    test: Union[str, List[str], None] = None   # test sets, each named by its last path component
    max_length_ratio: float = setting(9.0, "the longest ratio of a training pair's subword "
                                      "lengths to keep, at least 1 (9, as Moses' cleaning)", low=1.0)
    vocab_sample: int = setting(1_000_000, "how many training lines (source and target) "
                                "SentencePiece learns from, at least 1000", low=1000)
    task: str = "reverse"           # the toy task's: one of TOY_TASKS
    num_symbols: int = 20
    min_len: int = 3
    max_toy_len: int = 12
    sizes: List[int] = field(default_factory=lambda: [4000, 200, 200])

    def __post_init__(self):
        if self.name not in CORPORA:
            raise ConfigError(f"data.name={self.name}: choose one of {', '.join(CORPORA)} "
                              f"(data=files for your own parallel files)")
        for key in ("train", "test"):  # one prefix given alone is a list of one
            if isinstance(getattr(self, key), str):
                object.__setattr__(self, key, [getattr(self, key)])
        for key in ("train", "valid", "test"):  # absolute: data.json is read from anywhere
            value = getattr(self, key)
            if value:
                object.__setattr__(self, key, _absolute(value))
        check_settings(self, "data.")
        if self.name == "files":
            check_files_settings(self)
        elif self.train or self.valid or self.test:
            raise ConfigError(f"data.train/valid/test are for data=files, not data.name="
                              f"{self.name}: add data=files to the command")
        if self.vocab_size < 16:
            raise ConfigError(f"data.vocab_size={self.vocab_size} is too small (at least 16)")
        if self.max_pair_len < 1:
            raise ConfigError(f"data.max_len={self.max_pair_len} must be at least 1")
        if not 0.0 <= self.subword_dropout < 1.0 or (self.subword_dropout and self.name == "toy"):
            raise ConfigError(f"data.subword_dropout={self.subword_dropout}: give a probability "
                              f"in [0, 1) (0.1 is usual), for a SentencePiece corpus (not toy)")
        if not 0.0 <= self.subword_dropout_from < 1.0 or (self.subword_dropout_from
                                                           and not self.subword_dropout):
            raise ConfigError(f"data.subword_dropout_from={self.subword_dropout_from}: give the "
                              f"fraction of the budget in [0, 1) from which BPE-dropout starts "
                              f"(e.g. 0.5: the second half), with data.subword_dropout > 0")
        if self.lowercase_source and self.name == "toy":
            raise ConfigError("data.lowercase_source=true is for a corpus of files (Multi30k, "
                              "data=files); the toy task has no letter case")
        if self.distilled_target and self.name == "toy":
            raise ConfigError("data.distilled_target= is for a corpus of files (Multi30k, "
                              "data=files); the toy task has no training files to distil")
        if self.name == "toy":
            if self.task not in TOY_TASKS:
                raise ConfigError(f"data.task={self.task}: the toy task is one of "
                                  f"{', '.join(TOY_TASKS)}")
            if self.num_symbols < 2 or not 1 <= self.min_len <= self.max_toy_len:
                raise ConfigError(f"data.num_symbols={self.num_symbols}, data.min_len="
                                  f"{self.min_len}, data.max_toy_len={self.max_toy_len}: need at "
                                  f"least 2 symbols and 1 <= min_len <= max_toy_len")
            if len(self.sizes) != 3 or min(self.sizes) < 1:
                raise ConfigError(f"data.sizes={list(self.sizes)}: give three positive sizes, "
                                  f"[train, val, test]")


def _absolute(prefixes):
    if isinstance(prefixes, str):
        return os.path.abspath(os.path.expanduser(prefixes))
    return [_absolute(prefix) for prefix in prefixes]


def check_files_settings(cfg):
    """data=files: both languages named (they name the files) and the training and validation
    prefixes given."""
    for key in ("src_lang", "tgt_lang"):
        lang = getattr(cfg, key)
        if not lang or "/" in lang or lang != lang.strip():
            raise ConfigError(f"data.{key}={lang!r}: give the language code that ends the file "
                              f"names (<prefix>.<lang>), e.g. en")
    if cfg.src_lang == cfg.tgt_lang:
        raise ConfigError(f"data.src_lang and data.tgt_lang are both {cfg.src_lang}")
    if not cfg.train or not cfg.valid:
        raise ConfigError("data=files needs data.train=<prefix> (or a list) and "
                          "data.valid=<prefix>: files <prefix>.<lang> or <prefix>.<lang>.gz")
