"""The corpus's settings: `DataConfig` (Hydra group ``data``)."""
from dataclasses import dataclass, field
from typing import List, Optional

from ..errors import ConfigError


TOY_TASKS = ("copy", "reverse")  # the toy task: the target is the source copied or reversed


@dataclass(frozen=True)
class DataConfig:
    name: str = "multi30k"          # multi30k | toy
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
    task: str = "reverse"           # the toy task's: one of TOY_TASKS
    num_symbols: int = 20
    min_len: int = 3
    max_toy_len: int = 12
    sizes: List[int] = field(default_factory=lambda: [4000, 200, 200])

    def __post_init__(self):
        if self.name not in ("multi30k", "toy"):
            raise ConfigError(f"data.name={self.name}: choose multi30k or toy")
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
            raise ConfigError("data.lowercase_source=true is for a Multi30k corpus; the toy task "
                              "has no letter case")
        if self.distilled_target and self.name == "toy":
            raise ConfigError("data.distilled_target= is for a Multi30k corpus; the toy task has "
                              "no training files to distil")
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
