"""A corpus ready for training: the text of every split, the tokenizer, and subword ids."""
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

from ..config import DataConfig
from ..errors import ConfigError, DataError
from ..files import atomic_copy, atomic_write_text, read_json, sha256_of
from .lines import read_lines
from .multi30k import load_multi30k
from .toy import make_toy, toy_symbols
from .vocab import SentencePieceTokenizer, TokenizerError, WordTokenizer, train_sentencepiece

SPM_FILE, TOY_SYMBOLS_FILE = "spm.model", "toy_symbols.json"
TOKENIZER_FILES = (SPM_FILE, TOY_SYMBOLS_FILE)  # a run directory holds one of them
DATA_FILE = "data.json"  # beside the tokenizer: the DataConfig it was trained with


def tokenizer_file(run_dir):
    """The path of the run's tokenizer (one of TOKENIZER_FILES), or None."""
    return next((Path(run_dir) / name for name in TOKENIZER_FILES
                 if (Path(run_dir) / name).is_file()), None)


@dataclass
class Corpus:
    text: Dict[str, Tuple[List[str], List[str]]]       # split -> (source lines, target lines)
    ids: Dict[str, Tuple[List[List[int]], List[List[int]]]]
    tokenizer: object

    def train_pairs(self, max_pair_len):
        """Training ids without pairs longer than ``max_pair_len`` subwords on either side (with
        their EOS); ConfigError when that leaves none."""
        src, tgt = self.ids["train"]
        keep = self._kept_pairs(max_pair_len)
        return [src[i] for i in keep], [tgt[i] for i in keep]

    def resampled_train_pairs(self, max_pair_len, subword_dropout, seed):
        """`train_pairs` segmented anew with BPE-dropout (each merge skipped with probability
        ``subword_dropout``; the same ``seed`` gives the same segmentation). The pairs and their
        order are `train_pairs`'; a pair whose new segmentation is too long keeps its usual one."""
        keep = self._kept_pairs(max_pair_len)
        text_src, text_tgt = self.text["train"]
        src = self.tokenizer.encode_sampled([text_src[i] for i in keep], subword_dropout, seed)
        tgt = self.tokenizer.encode_sampled([text_tgt[i] for i in keep], subword_dropout, seed + 1)
        usual_src, usual_tgt = self.ids["train"]
        for row, i in enumerate(keep):
            if len(src[row]) >= max_pair_len or len(tgt[row]) >= max_pair_len:
                src[row], tgt[row] = usual_src[i], usual_tgt[i]
        return src, tgt

    def _kept_pairs(self, max_pair_len):
        src, tgt = self.ids["train"]
        keep = [i for i in range(len(src))
                if len(src[i]) < max_pair_len and len(tgt[i]) < max_pair_len]
        if not keep:
            shortest = min(max(len(s), len(t)) for s, t in zip(src, tgt)) + 1
            raise ConfigError(f"data.max_len={max_pair_len} leaves no training pair (the "
                              f"shortest pair needs {shortest}): raise data.max_len")
        return keep


class TrainingPairs:
    """The training pairs (`Corpus.train_pairs`) as each epoch sees them: the same segmentation
    every epoch, or with ``subword_dropout`` > 0 a new one from the epoch's seed in every epoch
    that starts at ``dropout_from`` (a fraction of the training budget) or later."""

    def __init__(self, corpus, max_pair_len, subword_dropout=0.0, dropout_from=0.0):
        self.corpus, self.max_pair_len = corpus, max_pair_len
        self.subword_dropout, self.dropout_from = subword_dropout, dropout_from
        self.src, self.tgt = corpus.train_pairs(max_pair_len)

    def __len__(self):
        return len(self.src)

    def resegmented_at(self, budget_fraction):
        """Whether an epoch that starts with ``budget_fraction`` of the budget spent is cut anew."""
        return bool(self.subword_dropout) and budget_fraction >= self.dropout_from

    def for_epoch(self, seed, resegmented=True):
        """(source ids, target ids) of every pair, in the same order every epoch: cut anew from
        ``seed`` when ``resegmented`` (and BPE-dropout is on), else the usual cut."""
        if not (self.subword_dropout and resegmented):
            return self.src, self.tgt
        return self.corpus.resampled_train_pairs(self.max_pair_len, self.subword_dropout, seed)


def load_corpus(cfg: DataConfig, data_dir, seed, tokenizer=None):
    """Text and ids of every split. Without a ``tokenizer`` (a trained run's), one is built:
    the toy task's word list, or a joint SentencePiece model of the training split."""
    if cfg.name == "toy":
        text = make_toy(cfg.task, cfg.num_symbols, cfg.min_len, cfg.max_toy_len, cfg.sizes, seed)
        tokenizer = tokenizer or WordTokenizer(toy_symbols(cfg.num_symbols))
    else:
        text = load_multi30k(cfg.src_lang, cfg.tgt_lang, cfg.raw_dir, data_dir)
        if cfg.lowercase_source:  # the targets keep their case: sacreBLEU scores them cased
            text = {split: ([line.lower() for line in src], tgt)
                    for split, (src, tgt) in text.items()}
        if tokenizer is None:  # of the references: a student shares its teacher's vocabulary
            train_src, train_tgt = text["train"]
            tokenizer = SentencePieceTokenizer(train_sentencepiece(
                train_src + train_tgt, cfg.vocab_size, Path(data_dir) / "spm"),
                cfg.lowercase_source)
        if cfg.distilled_target:
            text["train"] = distilled_pairs(text["train"], cfg.distilled_target,
                                            cfg.distilled_with_references)
    ids = {split: (tokenizer.encode(src), tokenizer.encode(tgt)) for split, (src, tgt) in text.items()}
    return Corpus(text, ids, tokenizer)


def distilled_pairs(pairs, path, with_references):
    """Sequence-level distillation (Kim and Rush 2016): the training sources with a teacher's
    translations of them (``path``: one line per source line, in order) as targets, alone or
    beside the references (``with_references``: every source twice). DataError when the file
    does not align with the sources or has an empty line."""
    sources, references = pairs
    try:
        teacher = read_parallel_with(sources, path)
    except DataError as err:
        raise DataError(f"data.distilled_target: {err}") from None
    if with_references:
        return sources + sources, references + teacher
    return list(sources), teacher


def read_parallel_with(sources, path):
    """The lines of ``path``, one per line of ``sources``, none empty."""
    lines = read_lines(path)
    if len(lines) != len(sources):
        raise DataError(f"{path} has {len(lines)} lines but the training split has "
                        f"{len(sources)} sources: give the teacher's translation of every "
                        f"training source, in order (mtx-translate input=<train source file>)")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            raise DataError(f"{path}:{number}: empty translation; a teacher's output needs one "
                            f"for every source")
    return lines


def tokenizer_sha256(tokenizer):
    """SHA-256 of what defines the tokenizer: the SentencePiece model file or the symbol list."""
    if isinstance(tokenizer, SentencePieceTokenizer):
        return sha256_of(tokenizer.model_path)
    return hashlib.sha256(json.dumps(tokenizer.symbols).encode()).hexdigest()


def vocabulary_sha256(tokenizer):
    """SHA-256 of what ``tokenizer`` does to text, for runs that must share a vocabulary (an
    ensemble): `SentencePieceTokenizer.definition`, not the model file's bytes, so that one
    vocabulary trained in two checkouts or on two machines is one; a word list's symbols."""
    if not isinstance(tokenizer, SentencePieceTokenizer):
        return tokenizer_sha256(tokenizer)
    return hashlib.sha256(json.dumps(tokenizer.definition()).encode()).hexdigest()


def save_tokenizer(tokenizer, run_dir):
    """Keep the run's tokenizer next to its checkpoints (atomically)."""
    run_dir = Path(run_dir)
    if isinstance(tokenizer, SentencePieceTokenizer):
        atomic_copy(tokenizer.model_path, run_dir / SPM_FILE)
    else:
        atomic_write_text(run_dir / TOY_SYMBOLS_FILE, json.dumps(tokenizer.symbols[4:]))


def load_tokenizer(run_dir):
    path = tokenizer_file(run_dir)
    if path is None:
        raise TokenizerError(f"{run_dir} has no tokenizer ({' or '.join(TOKENIZER_FILES)}); "
                             f"is it a training run directory?")
    if path.name == SPM_FILE:
        return SentencePieceTokenizer(path, source_lowercased(run_dir))
    return WordTokenizer(read_json(path, TokenizerError, "toy vocabulary", kind=list))


def source_lowercased(directory):
    """Whether the tokenizer in ``directory`` (a run, or an export of one) was trained on
    lowercased sources (``data.lowercase_source`` in the data.json beside it; none: no)."""
    path = Path(directory) / DATA_FILE
    if not path.is_file():
        return False
    return read_json(path, TokenizerError, "data config").get("lowercase_source", False) is True

