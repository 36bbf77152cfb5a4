"""A corpus ready for training: the training pairs (prepared once, mapped), the held splits'
text and ids, and the tokenizer (a run's tokenizer files: `mtx.data.vocabularies`)."""
import logging
from dataclasses import dataclass
from typing import Dict, List, Tuple

from ..config import DataConfig
from ..errors import ConfigError, DataError
from .batching import batch_plan
from .filters import Filter, UnknownCount, is_blank
from .fingerprints import content_sha256
from .lines import stream_pairs
from .mix import CorpusMix, check_tag_pieces, corpus_mix, run_tags
from .multi30k import TEST_SPLIT
from .named import open_named
from .pairs import PairIds
from .prepare import prepared_training
from .sources import VALID, corpus_files
from .toy import make_toy, toy_symbols
from .vocab import WordTokenizer
from .vocabularies import (  # noqa: F401 (where the rest of mtx finds them)
    DATA_FILE,
    SPM_FILE,
    TOKENIZER_FILES,
    TOY_SYMBOLS_FILE,
    load_tokenizer,
    run_tokenizer,
    save_tokenizer,
    tokenizer_file,
    tokenizer_sha256,
    vocabulary_sha256,
)

log = logging.getLogger(__name__)
RESEGMENT_CHUNK = 100_000  # training pairs segmented anew with BPE-dropout at once

@dataclass
class Corpus:
    """A corpus ready for training: ``training`` (`PairIds`, the kept training pairs, mapped from
    a prepared split or in memory), ``training_text`` (their text, for BPE-dropout: an object
    with ``lines(side, start, stop)``), the held splits (``text`` and ``ids``: "val" and the test
    sets, named in ``test_names``) and the tokenizer."""
    text: Dict[str, Tuple[List[str], List[str]]]       # split -> (source lines, target lines)
    ids: Dict[str, Tuple[List[List[int]], List[List[int]]]]
    tokenizer: object
    training: PairIds
    training_text: object
    test_names: List[str]
    mix: CorpusMix = None  # the training corpora (None: one, each pair once an epoch)

    def train_pairs(self):
        """The training pairs as (source id lists, target id lists) (for the head study)."""
        return self.training.to_lists()

    def resampled_training(self, max_pair_len, subword_dropout, seed):
        """`training` segmented anew with BPE-dropout (each merge skipped with probability
        ``subword_dropout``; the same ``seed`` gives the same segmentation), a chunk of pairs at
        a time. The pairs and their order are `training`'s; a pair whose new segmentation is
        too long keeps its usual one."""
        usual, parts = self.training, []
        for chunk, start in enumerate(range(0, len(usual), RESEGMENT_CHUNK)):
            stop = min(len(usual), start + RESEGMENT_CHUNK)
            chunk_seed = seed if chunk == 0 else (seed * 1_000_003 + chunk * 7_919) % 2 ** 31
            src = self.tokenizer.source.encode_sampled(self.training_text.lines(0, start, stop),
                                                subword_dropout, chunk_seed)
            tgt = self.tokenizer.target.encode_sampled(self.training_text.lines(1, start, stop),
                                                subword_dropout, chunk_seed + 1)
            for row in range(stop - start):
                if len(src[row]) >= max_pair_len or len(tgt[row]) >= max_pair_len:
                    src[row], tgt[row] = usual.src[start + row], usual.tgt[start + row]
            parts.append(PairIds.from_lists(src, tgt))
        return PairIds.concatenate(parts)


class ListText:
    """Text held in memory as (source lines, target lines), read as a `PreparedTraining` is."""

    def __init__(self, src, tgt):
        self.sides = (src, tgt)

    def lines(self, side, start, stop):
        return self.sides[side][start:stop]


class TrainingPairs:
    """The training pairs (`Corpus.training`) as each epoch sees them: the same segmentation
    every epoch, or with ``subword_dropout`` > 0 a new one from the epoch's seed in every epoch
    that starts at ``dropout_from`` (a fraction of the training budget) or later."""

    def __init__(self, corpus, max_pair_len, subword_dropout=0.0, dropout_from=0.0):
        self.corpus, self.max_pair_len = corpus, max_pair_len
        self.subword_dropout, self.dropout_from = subword_dropout, dropout_from

    def __len__(self):
        return len(self.corpus.training)

    def resegmented_at(self, budget_fraction):
        """Whether an epoch that starts with ``budget_fraction`` of the budget spent is cut anew."""
        return bool(self.subword_dropout) and budget_fraction >= self.dropout_from

    def plan(self, pairs, batch_tokens, seed):
        """The epoch of ``seed``'s `mtx.data.plan.EpochPlan` over ``pairs`` (`for_epoch`'s): the
        corpora's shares drawn by their weights (`CorpusMix.members`), bucketed and shuffled."""
        mix = self.corpus.mix
        members = mix.members(seed) if mix is not None else None
        lengths = pairs.bucket_lengths()
        return batch_plan(lengths if members is None else lengths[members], batch_tokens,
                          shuffle=True, seed=seed, members=members)

    def for_epoch(self, seed, resegmented=True):
        """Every pair (`PairIds`), in the same order every epoch: cut anew from ``seed`` when
        ``resegmented`` (and BPE-dropout is on), else the usual cut."""
        if not (self.subword_dropout and resegmented):
            return self.corpus.training
        return self.corpus.resampled_training(self.max_pair_len, self.subword_dropout, seed)


def load_corpus(cfg: DataConfig, data_dir, seed, tokenizer=None):
    """Every split of the corpus of ``cfg``. Without a ``tokenizer`` (a trained run's), one is
    built: the toy task's word list, or a joint SentencePiece model of the training files
    (`mtx.data.prepare`). The training split of files is prepared once and mapped; the files
    are known by their SHA-256, taken once (`mtx.data.fingerprints`, ``data.verify``)."""
    if cfg.name == "toy":
        return toy_corpus(cfg, seed, tokenizer)
    files = corpus_files(cfg, data_dir)
    if cfg.prepared:  # made by mtx-prepare: no training file is read
        tokenizer, prepared = open_named(cfg, data_dir, tokenizer)
    else:
        tokenizer, prepared = prepare_training(cfg, files, data_dir, tokenizer)
    mix = corpus_mix(cfg, files.train or prepared.meta["files"], prepared.meta["corpora"])
    text = {name: read_held(name, pair, cfg.lowercase_source)
            for name, pair in files.splits.items()}
    ids = {split: (tokenizer.source.encode(src), tokenizer.target.encode(tgt))
           for split, (src, tgt) in text.items()}
    for split, (src_ids, tgt_ids) in ids.items():
        unknown = UnknownCount()
        unknown.add("src", src_ids, text[split][0])
        unknown.add("tgt", tgt_ids, text[split][1])
        log.info("%s: %s", split, unknown.described())
    return Corpus(text, ids, tokenizer, prepared.pairs, prepared, files.test_names, mix)


def prepare_training(cfg, files, data_dir, tokenizer=None):
    """(tokenizer, `PreparedTraining`) of the training files of `CorpusFiles` ``files``: the
    vocabulary (unless ``tokenizer`` is given) and the split made once in the data directory."""
    sums = {path: content_sha256(path, data_dir, cfg.verify)
            for path in dict.fromkeys(p for pair in files.train + files.vocab for p in pair)}
    if tokenizer is None:  # of the references: a student shares its teacher's vocabulary
        tokenizer = run_tokenizer(cfg, files.vocab, [sums[p] for pair in files.vocab for p in pair],
                                  data_dir, run_tags(cfg.train_tags, cfg.user_symbols))
    check_tag_pieces(tokenizer, cfg.train_tags)
    return tokenizer, prepared_training(cfg, files.train,
                                        [sums[p] for pair in files.train for p in pair],
                                        tokenizer, tokenizer_sha256(tokenizer), data_dir)


def toy_corpus(cfg, seed, tokenizer=None):
    """The toy task, in memory, filtered as files are (`mtx.data.filters.Filter`: no copies or duplicates
    dropped, the copy task is made of copies)."""
    text = make_toy(cfg.task, cfg.num_symbols, cfg.min_len, cfg.max_toy_len, cfg.sizes, seed)
    tokenizer = tokenizer or WordTokenizer(toy_symbols(cfg.num_symbols))
    ids = {split: (tokenizer.encode(src), tokenizer.encode(tgt)) for split, (src, tgt) in text.items()}
    train_src, train_tgt = text.pop("train")
    src_ids, tgt_ids = ids.pop("train")
    keep = Filter(cfg.max_pair_len, cfg.max_length_ratio)
    rows = [i for i in range(len(src_ids)) if keep.keep(src_ids[i], tgt_ids[i])]
    if not rows:
        raise ConfigError(f"data.max_len={cfg.max_pair_len} leaves no training pair ("
                          f"{keep.described()}): raise data.max_len")
    training = PairIds.from_lists([src_ids[i] for i in rows], [tgt_ids[i] for i in rows])
    training_text = ListText([train_src[i] for i in rows], [train_tgt[i] for i in rows])
    return Corpus(text, ids, tokenizer, training, training_text, [TEST_SPLIT])


def read_held(name, pair, lowercase_source):
    """(source lines, target lines) of a held split: the validation split without pairs that
    have an empty side (counted in the log), a test set whole (an empty source gets an empty
    translation)."""
    src, tgt = [], []
    dropped = 0
    for _, src_line, tgt_line in stream_pairs(*pair):
        if name == VALID and is_blank(src_line, tgt_line):
            dropped += 1
            continue
        src.append(src_line.lower() if lowercase_source else src_line)
        tgt.append(tgt_line)
    if dropped:
        log.warning("%s: %d pairs with an empty side dropped from validation", pair[0], dropped)
    if not src:
        raise DataError(f"{pair[0]} and {pair[1]} have no pair to {'validate' if name == VALID else 'test'} "
                        f"on; give non-empty parallel files")
    return src, tgt
