"""The corpus's settings: `DataConfig` (Hydra group ``data``)."""
import os
import re
from dataclasses import dataclass
from typing import ClassVar, Dict, List, Optional, Union

from ..errors import ConfigError
from ..typecheck import check_settings, setting


TOY_TASKS = ("copy", "reverse")  # the toy task: the target is the source copied or reversed
CORPORA = ("multi30k", "files", "toy")
VOCABS = ("joint", "separate")  # one SentencePiece model for both sides, or one a side
VERIFY = ("quick", "full")  # data.verify (`mtx.data.fingerprints`)


@dataclass(frozen=True)
class DataConfig:
    """The corpus's settings; the defaults are Multi30k en->de (conf/data/)."""
    # {old key: key} of settings renamed: runs and configs written before still load
    # (`mtx.typecheck.renamed`)
    RENAMED: ClassVar[Dict[str, str]] = {}
    name: str = setting("multi30k", f"one of {', '.join(CORPORA)} (data=files for your own "
                                    f"parallel files)", choices=CORPORA)
    src_lang: Optional[str] = setting("en", "the source language's code (it ends the file "
                                            "names; data=files needs it)")
    tgt_lang: Optional[str] = setting("de", "the target language's code (it ends the file "
                                            "names; data=files needs it)")
    bleu_tokenize: Optional[str] = setting(None, "sacreBLEU's tokenizer for the target language "
                                                 "(13a, zh, char, ja-mecab, ...), or null: the "
                                                 "one sacreBLEU's command line takes for "
                                                 "data.tgt_lang (`mtx.decoding.bleu`)")
    raw_dir: Optional[str] = setting(None, "a local copy of Multi30k's task1/raw, or null: "
                                           "MTX_MULTI30K_DIR, else a download")
    vocab: str = setting("joint", "joint (one SentencePiece model for both sides) or separate "
                                  "(one a side; model.tie_embeddings then ties the target's "
                                  "embedding and the output only)", choices=VOCABS)
    vocab_size: int = setting(8000, "the SentencePiece vocabulary's size (each side's when "
                                    "separate), at least 16", low=16)
    spm_model: Union[str, List[str], None] = setting(
        None, "an existing SentencePiece model file to use instead of learning one (ids 0-3: "
              "<pad> <unk> <s> </s>; its size replaces data.vocab_size), [source, target] "
              "with data.vocab=separate, or null")
    byte_fallback: Optional[bool] = setting(None, "true: a character the vocabulary lacks "
                                                  "becomes its UTF-8 bytes, not <unk> (256 of "
                                                  "data.vocab_size); null: true where a side "
                                                  "is zh, ja or ko, else false")
    character_coverage: Optional[float] = setting(None, "the share of the characters the "
                                                        "vocabulary covers, in (0, 1], or null: "
                                                        "0.9995 where a side is zh, ja or ko, "
                                                        "else 1")
    user_symbols: List[str] = setting([], "pieces never split, e.g. tags ['<bt>','<2de>'] "
                                          "(no spaces)")
    max_pair_len: int = setting(128, "the most subwords on either side of a training pair, 1 or "
                                     "more (longer pairs are dropped and counted)", low=1,
                                key="max_len")
    subword_dropout: float = setting(0.0, "BPE-dropout of the training split, resampled every "
                                          "epoch: a probability in [0, 1), e.g. 0.1",
                                     low=0, below=1)
    subword_dropout_from: float = setting(0.0, "the fraction of the budget in [0, 1) from which "
                                               "BPE-dropout starts (e.g. 0.5: the second half)",
                                          low=0, below=1)
    distilled_target: Optional[str] = setting(None, "a teacher's translations of the training "
                                                    "sources (sequence-level distillation), or "
                                                    "null")
    distilled_with_references: bool = setting(False, "true: train on the teacher's "
                                                     "translations beside the references")
    lowercase_source: bool = setting(False, "true: the source lowercased in training and in "
                                            "every translator (the target keeps its case)")
    # data=files: file prefixes, each naming <prefix>.<lang> or <prefix>.<lang>.gz
    train: Union[str, List[str], None] = setting(None, "data=files: a prefix, or a list of them "
                                                       "(concatenated)")
    valid: Optional[str] = setting(None, "data=files: a prefix (validation: the best checkpoint, "
                                         "early stopping)")
    test: Union[str, List[str], None] = setting(None, "data=files: prefixes of test sets, each "
                                                      "scored under its last path component")
    train_weights: List[float] = setting([], "one sampling weight > 0 a data.train prefix of "
                                             "data=files, its share of every epoch (OpenNMT-py's "
                                             "corpus weights), or [] (each pair once an epoch)",
                                         above=0)
    train_tags: List[Optional[str]] = setting([], "one tag <name> (or null) a data.train prefix "
                                                  "of data=files, put before each of its sources "
                                                  "as one token, e.g. [null,<bt>]")
    tsv_columns: List[int] = setting([0, 1], "data=files, a prefix given as <prefix>.tsv: the "
                                             "source and target columns, from 0 (the others "
                                             "are ignored)", low=0)
    max_length_ratio: float = setting(9.0, "the longest ratio of a training pair's subword "
                                      "lengths to keep, at least 1 (9, as Moses' cleaning)", low=1.0)
    drop_duplicates: Optional[bool] = setting(None, "true: a training pair seen before (both "
                                                    "sides the same) is dropped and counted; "
                                                    "null: true for data=files, false for "
                                                    "Multi30k (its 29,000 pairs are the "
                                                    "benchmark's)")
    drop_copies: bool = setting(True, "true: a training pair whose target is its source "
                                      "(untranslated) is dropped and counted")
    prepared: Optional[str] = setting(None, "data=files: a corpus mtx-prepare made (a name in "
                                            "the data directory's prepared/, or a folder), "
                                            "trained from without reading data.train; null: "
                                            "prepare in the data directory's cache")
    verify: str = setting("quick", "quick (a training file of unchanged size and modification "
                                   "time keeps the SHA-256 taken once) or full (every start "
                                   "hashes the training files again)", choices=VERIFY)
    vocab_sample: int = setting(1_000_000, "how many training lines (source and target) "
                                "SentencePiece learns from, at least 1000", low=1000)
    task: str = setting("reverse", f"the toy task, one of {', '.join(TOY_TASKS)}",
                        choices=TOY_TASKS)
    num_symbols: int = setting(20, "the toy task's symbols, at least 2", low=2)
    min_len: int = setting(3, "the toy task's shortest sequence, 1 or more", low=1)
    max_toy_len: int = setting(12, "the toy task's longest sequence, at least data.min_len",
                               low=1)
    sizes: List[int] = setting([4000, 200, 200], "three positive sizes, [train, val, test]",
                               low=1)

    def __post_init__(self):
        for key in ("train", "test"):  # one prefix given alone is a list of one
            if isinstance(getattr(self, key), str):
                object.__setattr__(self, key, [getattr(self, key)])
        for key in ("train", "valid", "test", "spm_model"):  # absolute: data.json is read anywhere
            value = getattr(self, key)
            if value:
                object.__setattr__(self, key, _absolute(value))
        if self.prepared and "/" in self.prepared:  # a folder; a bare name is in the data dir
            object.__setattr__(self, "prepared", _absolute(self.prepared))
        check_settings(self, "data.")
        check_vocabulary_settings(self)
        check_corpus_mix(self)
        check_scoring_settings(self)
        if self.name == "files":
            check_files_settings(self)
        elif self.train or self.valid or self.test or self.prepared:
            raise ConfigError(f"data.train/valid/test/prepared are for data=files, not "
                              f"data.name={self.name}: add data=files to the command")
        if self.subword_dropout and self.name == "toy":
            raise ConfigError(f"data.subword_dropout={self.subword_dropout}: BPE-dropout is for "
                              f"a SentencePiece corpus (not toy)")
        if self.subword_dropout_from and not self.subword_dropout:
            raise ConfigError(f"data.subword_dropout_from={self.subword_dropout_from}: BPE-"
                              f"dropout starts late only with data.subword_dropout > 0")
        if self.lowercase_source and self.name == "toy":
            raise ConfigError("data.lowercase_source=true is for a corpus of files (Multi30k, "
                              "data=files); the toy task has no letter case")
        if self.distilled_target and self.name == "toy":
            raise ConfigError("data.distilled_target= is for a corpus of files (Multi30k, "
                              "data=files); the toy task has no training files to distil")
        if self.name == "toy" and (self.min_len > self.max_toy_len or len(self.sizes) != 3):
            raise ConfigError(f"data.min_len={self.min_len}, data.max_toy_len={self.max_toy_len}"
                              f", data.sizes={list(self.sizes)}: need min_len <= max_toy_len and "
                              f"three sizes, [train, val, test]")


def check_scoring_settings(cfg):
    """ConfigError (one line) for a sacreBLEU tokenizer it does not have, or TSV columns that
    cannot name a pair."""
    if cfg.bleu_tokenize is not None:
        from sacrebleu.metrics import BLEU
        if cfg.bleu_tokenize not in BLEU.TOKENIZERS:
            raise ConfigError(f"data.bleu_tokenize={cfg.bleu_tokenize}: give one of "
                              f"{', '.join(sorted(BLEU.TOKENIZERS))}, or null (the one "
                              f"sacreBLEU takes for data.tgt_lang)")
    if len(cfg.tsv_columns) != 2 or cfg.tsv_columns[0] == cfg.tsv_columns[1]:
        raise ConfigError(f"data.tsv_columns={list(cfg.tsv_columns)}: give two different "
                          f"columns of a <prefix>.tsv file, [source, target], counted from 0, "
                          f"e.g. [0,1]")


def check_vocabulary_settings(cfg):
    """ConfigError (one line) for models given that are not one (joint) or two (separate), a
    coverage outside (0, 1] or a user symbol that SentencePiece cannot keep whole (empty, with
    spaces, repeated)."""
    models = 1 if isinstance(cfg.spm_model, str) else len(cfg.spm_model or [])
    if models and models != (2 if cfg.vocab == "separate" else 1):
        raise ConfigError(f"data.spm_model={cfg.spm_model}: give one model file with data.vocab="
                          f"joint, [source model, target model] with data.vocab=separate")
    if cfg.vocab == "separate" and cfg.name == "toy":
        raise ConfigError("data.vocab=separate is for a SentencePiece corpus (not toy)")
    coverage = cfg.character_coverage
    if coverage is not None and not 0 < coverage <= 1:
        raise ConfigError(f"data.character_coverage={coverage}: give a share in (0, 1], e.g. "
                          f"0.9995, or null")
    for symbol in cfg.user_symbols:
        if not symbol or any(c.isspace() for c in symbol):  # a str: check_settings saw to it
            raise ConfigError(f"data.user_symbols: {symbol!r} cannot be one piece; give tags "
                              f"without spaces, e.g. ['<bt>']")
    if len(set(cfg.user_symbols)) != len(cfg.user_symbols):
        raise ConfigError(f"data.user_symbols={list(cfg.user_symbols)} names a symbol twice")


TAG = re.compile(r"<[^<>\s]+>")  # a corpus tag: <name>, no spaces (mtx.data.mix)


def check_corpus_mix(cfg):
    """ConfigError (one line) for weights or tags that are not one a data.train prefix of
    data=files, or a tag not written <name> without spaces."""
    for key in ("train_weights", "train_tags"):
        given = getattr(cfg, key)
        if given and (cfg.name != "files" or len(given) != len(cfg.train or [])
                      or cfg.distilled_target):
            raise ConfigError(f"data.{key}={list(given)}: give one a data.train prefix of "
                              f"data=files ({len(cfg.train or [])} given; not with "
                              f"data.distilled_target)")
    for tag in cfg.train_tags:
        if tag is not None and not TAG.fullmatch(tag):
            raise ConfigError(f"data.train_tags: {tag!r} is not a tag; write it <name> without "
                              f"spaces, e.g. <bt>, or null for none")


def _absolute(prefixes):
    if isinstance(prefixes, str):
        return os.path.abspath(os.path.expanduser(prefixes))
    return [_absolute(prefix) for prefix in prefixes]


def check_files_settings(cfg):
    """data=files: both languages named (they name the files) and the training prefixes (or a
    prepared corpus) given."""
    for key in ("src_lang", "tgt_lang"):
        lang = getattr(cfg, key)
        if lang is None:
            raise ConfigError(f"data=files needs data.{key}=<code>: the language code that ends "
                              f"the file names (<prefix>.<lang>), e.g. en")
        if not lang or "/" in lang or lang != lang.strip():
            raise ConfigError(f"data.{key}={lang!r}: give the language code that ends the file "
                              f"names (<prefix>.<lang>), e.g. en")
    if cfg.src_lang == cfg.tgt_lang:
        raise ConfigError(f"data.src_lang and data.tgt_lang are both {cfg.src_lang}")
    if not (cfg.train or cfg.prepared):
        raise ConfigError(f"data=files needs data.train=<prefix> (or a list; or data.prepared="
                          f"<what mtx-prepare made>) and {NEEDS_VALID}")


# what training on data=files needs besides (`mtx.data.sources.files_corpus`; mtx-prepare does not)
NEEDS_VALID = "data.valid=<prefix>: files <prefix>.<lang> or <prefix>.<lang>.gz"
