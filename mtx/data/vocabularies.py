"""The run's vocabulary: joint (one SentencePiece model for both sides, ``data.vocab=joint``, the
default) or separate (one a side, ``data.vocab=separate``), learnt once from a seeded sample of
the training files or given (``data.spm_model``: one file, or [source, target] for separate).

In the data directory (`mtx.datadir`):
    spm/spm<size>-<hash>.model      a learnt model, named by its training text (`train_sentencepiece`)
    spm/index/<key>                 which model(s) the training files and vocabulary settings made:
                                    one name a line (source, then target for separate)
A run directory keeps ``spm.model`` (joint) or ``spm.src.model`` and ``spm.tgt.model``.
"""
import hashlib
import json
import logging
import random
from pathlib import Path

from ..errors import DataError, TokenizerError
from ..files import atomic_copy, atomic_write_text, read_json, sha256_of
from .mix import run_tags
from .filters import is_blank
from .prepare import _key, read_training_pairs
from .vocab import (
    DEFAULT_OPTIONS,
    SentencePieceTokenizer,
    WordTokenizer,
    train_sentencepiece,
    vocabulary_options,
)

log = logging.getLogger(__name__)

VOCAB_SEED = 0  # the vocabulary sample's: the same files give the same vocabulary
SPM_SIDES = ("spm.src.model", "spm.tgt.model")  # a run's separate vocabularies


class SeparateTokenizer:
    """Separate vocabularies: ``source`` and ``target`` (`SentencePieceTokenizer` each).
    `encode_source` is the source's; what the model writes (``len``, `encode`, `decode`,
    `pieces`) is the target's."""

    def __init__(self, source, target):
        self.source, self.target = source, target

    def __len__(self):
        return len(self.target)

    def encode_source(self, lines):
        return self.source.encode_source(lines)

    def encode(self, lines):
        return self.target.encode(lines)

    def decode(self, ids_list):
        return self.target.decode(ids_list)

    def pieces(self, ids):
        return self.target.pieces(ids)

    @property
    def model_paths(self):
        return self.source.model_path, self.target.model_path

    def definition(self):
        """`SentencePieceTokenizer.definition` of each side."""
        return {"source": self.source.definition(), "target": self.target.definition()}


def source_vocab_size(tokenizer):
    """`mtx.config.ModelConfig.src_vocab_size` of ``tokenizer``: 0 for one joint vocabulary,
    else the source vocabulary's size."""
    return 0 if tokenizer.source is tokenizer else len(tokenizer.source)


def run_tokenizer(cfg, file_pairs, digests, data_dir, tags=()):
    """The tokenizer of `DataConfig` ``cfg`` (joint or separate, `vocabulary_models`), the
    source lowercased as ``cfg`` says and knowing the run's ``tags``."""
    models = vocabulary_models(cfg, file_pairs, digests, data_dir)
    if len(models) == 1:
        return SentencePieceTokenizer(models[0], cfg.lowercase_source, tags)
    return SeparateTokenizer(SentencePieceTokenizer(models[0], cfg.lowercase_source, tags),
                             SentencePieceTokenizer(models[1]))


def side_options(cfg):
    """SentencePiece's options of each model: one (both languages, every user symbol and tag)
    joint; separate, the source's (its language, the tags) and the target's (no tags)."""
    if cfg.vocab == "joint":
        return [vocabulary_options(cfg)]
    return [vocabulary_options(cfg, (cfg.src_lang,)),
            vocabulary_options(cfg, (cfg.tgt_lang,), with_tags=False)]


def vocabulary_models(cfg, file_pairs, digests, data_dir):
    """The SentencePiece model paths of the training files ``file_pairs`` (one joint, or source
    and target): `train_sentencepiece` on at most ``cfg.vocab_sample`` lines, half from each
    side, a seeded reservoir sample (all of them, in order, when there are no more); made once,
    then found by the files' ``digests``. ``data.spm_model``: that model (or the two), learnt
    nowhere (DataError when one is not a file)."""
    if cfg.spm_model:
        given = [cfg.spm_model] if isinstance(cfg.spm_model, str) else list(cfg.spm_model)
        for path in given:
            if not Path(path).is_file():
                raise DataError(f"data.spm_model={path} is not a file; give a SentencePiece "
                                f".model file, or null to learn the vocabulary")
        return [Path(path) for path in given]
    options = side_options(cfg)
    extra = (["separate", options] if len(options) > 1
             else [options[0]] if options[0] != DEFAULT_OPTIONS else [])
    key = _key(digests, cfg.vocab_size, cfg.vocab_sample, cfg.lowercase_source, *extra)
    spm_dir = Path(data_dir) / "spm"
    index = spm_dir / "index" / key
    if index.is_file():
        known = [spm_dir / name for name in index.read_text().split()]
        if len(known) == len(options) and all(path.is_file() for path in known):
            return known
    samples = sample_pairs(file_pairs, cfg.vocab_sample // 2, cfg.lowercase_source)
    texts = [samples[0] + samples[1]] if len(options) == 1 else samples
    models = [train_sentencepiece(text, cfg.vocab_size, spm_dir, side)
              for text, side in zip(texts, options)]
    index.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(index, "\n".join(model.name for model in models))
    return models


def sample_pairs(file_pairs, size, lowercase_source):
    """(sources, targets) of at most ``size`` pairs with text on both sides: a seeded reservoir
    sample, or all of them in order; DataError when there is none."""
    samples, rng, seen = ([], []), random.Random(VOCAB_SEED), 0
    for _, src, tgt in read_training_pairs(file_pairs, lowercase_source):
        if is_blank(src, tgt):
            continue
        seen += 1
        if seen <= size:
            samples[0].append(src)
            samples[1].append(tgt)
        else:  # reservoir sampling: every pair so far is in the sample with one probability
            slot = rng.randrange(seen)
            if slot < size:
                samples[0][slot], samples[1][slot] = src, tgt
    if not seen:
        raise DataError(f"the training files ({file_pairs[0][0]} ...) have no pair with text on "
                        f"both sides; give non-empty parallel files")
    if seen > size:
        log.info("vocabulary: learnt from a sample of %d of %d training pairs (data.vocab_sample)",
                 size, seen)
    return samples


# -- the tokenizer files of a run directory (or an export of one) ------------------------------

SPM_FILE, TOY_SYMBOLS_FILE = "spm.model", "toy_symbols.json"
# a run directory holds one of them (spm.src.model with spm.tgt.model beside it)
TOKENIZER_FILES = (SPM_FILE, SPM_SIDES[0], TOY_SYMBOLS_FILE)
DATA_FILE = "data.json"  # beside the tokenizer: the DataConfig it was trained with


def tokenizer_file(run_dir):
    """The path of the run's tokenizer (one of TOKENIZER_FILES), or None."""
    return next((Path(run_dir) / name for name in TOKENIZER_FILES
                 if (Path(run_dir) / name).is_file()), None)


def tokenizer_files(path):
    """The files of the tokenizer whose `tokenizer_file` is ``path``: it, and the target's
    model beside a source's."""
    path = Path(path)
    return [path] + ([path.parent / SPM_SIDES[1]] if path.name == SPM_SIDES[0] else [])


def tokenizer_sha256(tokenizer):
    """SHA-256 of what defines the tokenizer: the SentencePiece model file (each side's) or the
    symbol list."""
    if isinstance(tokenizer, SeparateTokenizer):
        sides = " ".join(sha256_of(path) for path in tokenizer.model_paths)
        return hashlib.sha256(sides.encode()).hexdigest()
    if isinstance(tokenizer, SentencePieceTokenizer):
        return sha256_of(tokenizer.model_path)
    return hashlib.sha256(json.dumps(tokenizer.symbols).encode()).hexdigest()


def vocabulary_sha256(tokenizer):
    """SHA-256 of what ``tokenizer`` does to text, for runs that must share a vocabulary (an
    ensemble): `SentencePieceTokenizer.definition` (each side's), not the model files' bytes, so
    that one vocabulary trained in two checkouts or on two machines is one; a word list's
    symbols."""
    if isinstance(tokenizer, WordTokenizer):
        return tokenizer_sha256(tokenizer)
    return hashlib.sha256(json.dumps(tokenizer.definition()).encode()).hexdigest()


def save_tokenizer(tokenizer, run_dir):
    """Keep the run's tokenizer next to its checkpoints (atomically)."""
    run_dir = Path(run_dir)
    if isinstance(tokenizer, SeparateTokenizer):
        for path, name in zip(tokenizer.model_paths, SPM_SIDES):
            atomic_copy(path, run_dir / name)
    elif isinstance(tokenizer, SentencePieceTokenizer):
        atomic_copy(tokenizer.model_path, run_dir / SPM_FILE)
    else:
        atomic_write_text(run_dir / TOY_SYMBOLS_FILE, json.dumps(tokenizer.symbols[4:]))


def load_tokenizer(run_dir):
    """The tokenizer kept in ``run_dir`` (`save_tokenizer`), with the source's case rule and
    tags from the data.json beside it."""
    path = tokenizer_file(run_dir)
    if path is None:
        raise TokenizerError(f"{run_dir} has no tokenizer ({' or '.join(TOKENIZER_FILES)}); "
                             f"is it a training run directory?")
    if path.name == TOY_SYMBOLS_FILE:
        return WordTokenizer(read_json(path, TokenizerError, "toy vocabulary", kind=list))
    settings = data_settings(run_dir)
    source = SentencePieceTokenizer(path, settings.get("lowercase_source", False) is True,
                                    run_tags(settings.get("train_tags") or [],
                                             settings.get("user_symbols") or []))
    if path.name == SPM_FILE:
        return source
    target = path.parent / SPM_SIDES[1]
    if not target.is_file():
        raise TokenizerError(f"{run_dir} has {path.name} but no {SPM_SIDES[1]} (separate "
                             f"vocabularies come in pairs); restore it from a copy of the run")
    return SeparateTokenizer(source, SentencePieceTokenizer(target))


def data_settings(directory):
    """The data settings beside the tokenizer in ``directory`` (a run, or an export of one):
    its data.json as a dict ({} when there is none)."""
    path = Path(directory) / DATA_FILE
    return read_json(path, TokenizerError, "data config") if path.is_file() else {}
