"""Which files a corpus is made of: Multi30k's (downloaded and verified, `mtx.data.multi30k`) or
a user's own (data=files: ``<prefix>.<lang>`` or ``<prefix>.<lang>.gz``, or one
``<prefix>.tsv``), as file pairs that every later step reads the same way.

`CorpusFiles` holds (source path, target path) pairs:
    train   what training reads, concatenated in order (a teacher's translations included)
    vocab   what the vocabulary learns from (the references: a student shares its teacher's)
    splits  {name: pair} of the splits held in memory: "val", then the test sets
"""
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

from ..config.data import NEEDS_VALID
from ..errors import ConfigError, DataError
from .multi30k import TEST_SPLIT, file_name, multi30k_file, check_pair
from .tsv import tsv_file, tsv_pair

VALID = "val"  # the validation split's name, whatever the corpus calls its file
FilePair = Tuple[Path, Path]


@dataclass
class CorpusFiles:
    train: List[FilePair]
    vocab: List[FilePair]
    splits: Dict[str, FilePair]

    @property
    def test_names(self):
        return [name for name in self.splits if name != VALID]


def prefix_file(prefix, lang):
    """``<prefix>.<lang>``, else ``<prefix>.<lang>.gz``, else None."""
    plain = Path(f"{prefix}.{lang}").expanduser()
    return next((path.absolute() for path in (plain, Path(f"{plain}.gz")) if path.is_file()),
                None)


def prefix_pair(prefix, cfg, key, data_dir):
    """(source path, target path) of ``prefix``: ``<prefix>.<lang>`` files (plain or gzipped),
    else ``<prefix>.tsv`` split into ``data_dir`` (`mtx.data.tsv`); DataError names what is
    missing and ``key``."""
    pair = [prefix_file(prefix, lang) for lang in (cfg.src_lang, cfg.tgt_lang)]
    if all(pair):
        return tuple(pair)
    tsv = tsv_file(prefix) if not any(pair) else None
    if tsv is not None:
        return tsv_pair(tsv, cfg, data_dir)
    lang = cfg.tgt_lang if pair[0] else cfg.src_lang
    plain = Path(f"{prefix}.{lang}").expanduser()
    raise DataError(f"{key}={prefix}: neither {plain} nor {plain}.gz is a file; give the prefix "
                    f"of files named <prefix>.{lang} (plain or gzipped text), or of one "
                    f"<prefix>.tsv (or .tsv.gz) with both sides")


def held_prefixes(cfg):
    """{split name: prefix} of data=files' held splits: "val" (data.valid), then each test set
    (data.test) under its prefix's last path component; DataError when two share a name."""
    prefixes = {VALID: cfg.valid}
    for prefix in cfg.test or []:
        name = Path(prefix).name
        if name in prefixes:
            raise DataError(f"data.test: two sets are named {name} (a test set is named by its "
                            f"prefix's last path component, and {VALID} is the validation "
                            f"split's); rename one")
        prefixes[name] = prefix
    return prefixes


def files_corpus(cfg, data_dir):
    """`CorpusFiles` of data=files (`mtx.config.DataConfig.train`, ``valid``, ``test``), TSV
    files split into ``data_dir``; no training files with ``data.prepared`` (mtx-prepare read
    them)."""
    if not cfg.valid:
        raise ConfigError(f"data=files needs {NEEDS_VALID}")
    train = [prefix_pair(prefix, cfg, "data.train", data_dir)
             for prefix in ([] if cfg.prepared else cfg.train)]
    splits = {name: prefix_pair(prefix, cfg, "data.valid" if name == VALID else "data.test",
                                data_dir)
              for name, prefix in held_prefixes(cfg).items()}
    return train, splits


def multi30k_corpus(cfg, data_dir):
    """Multi30k's train, val and test_2016_flickr files of the language pair, verified."""
    check_pair(cfg.src_lang, cfg.tgt_lang)

    def pair(split):
        return tuple(multi30k_file(file_name(split, lang), cfg.raw_dir, data_dir)
                     for lang in (cfg.src_lang, cfg.tgt_lang))
    return [pair("train")], {VALID: pair("val"), TEST_SPLIT: pair(TEST_SPLIT)}


def corpus_files(cfg, data_dir):
    """The `CorpusFiles` of a Multi30k or data=files `DataConfig`; DataError for a missing file.
    With ``data.distilled_target`` training reads the sources with the teacher's translations
    (beside the references, with ``distilled_with_references``)."""
    train, splits = (files_corpus(cfg, data_dir) if cfg.name == "files"
                     else multi30k_corpus(cfg, data_dir))
    vocab = list(train)
    if cfg.distilled_target:
        teacher = Path(cfg.distilled_target).expanduser().absolute()
        if not teacher.is_file():
            raise DataError(f"data.distilled_target={cfg.distilled_target} is not a file; give "
                            f"the teacher's translation of every training source, in order "
                            f"(mtx-translate input=<train source file>)")
        if len(train) > 1:
            raise DataError("data.distilled_target is one file of translations: give one "
                            "data.train prefix with it (concatenate the files first)")
        distilled = [(train[0][0], teacher)]
        train = train + distilled if cfg.distilled_with_references else distilled
    return CorpusFiles(train, vocab, splits)

