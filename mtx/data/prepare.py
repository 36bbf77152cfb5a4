"""What is made once per corpus and reused by the next run, a resume and every worker: the
training split encoded into subword ids on disk (`mtx.data.pairs`, memory-mapped), with the
pairs that cannot or should not be trained on dropped and counted (`mtx.data.filters`; the
vocabulary: `mtx.data.vocabularies`).

In the data directory (`mtx.datadir`):
    prepared/<key>/                 the encoded training split, keyed by the files' bytes, the
                                    tokenizer and the filters: meta.json, src.*, tgt.* (ids),
                                    src_text.*, tgt_text.* (the kept pairs' UTF-8 text, for
                                    BPE-dropout); written whole or not at all, by one process
                                    at a time (`mtx.data.holds`)
    prepared/<name>/                a corpus mtx-prepare made (`mtx.data.named`)
"""
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path

from tqdm import tqdm

from ..errors import DataError
from ..files import atomic_write_text, fsync_dir
from . import holds
from .filters import Filter, UnknownCount, drops_duplicates
from .lines import stream_pairs
from .pairs import PairIds, Side, SideWriter

log = logging.getLogger(__name__)

FORMAT = 2            # of prepared/<key>/: a new layout gets new keys
CHUNK_PAIRS = 20_000  # pairs read, encoded (both cores: SentencePiece's threads) and written at once


def read_training_pairs(file_pairs, lowercase_source, tags=None):
    """(corpus, source, target) of every line of the file pairs in order (corpus: the pair's
    index), the source lowercased when asked and, when not blank, after its corpus's tag
    (``tags``: one or None a pair); DataError (one line) for a missing, misaligned or non-UTF-8
    file."""
    for corpus, (src_path, tgt_path) in enumerate(file_pairs):
        tag = f"{tags[corpus]} " if tags and tags[corpus] else ""
        for _, src, tgt in stream_pairs(src_path, tgt_path):
            src = src.lower() if lowercase_source else src
            yield corpus, (tag + src if tag and src.strip() else src), tgt


def prepared_training(cfg, file_pairs, digests, tokenizer, tokenizer_digest, data_dir):
    """The training split as `PreparedTraining`: encoded once (`encode_training`), then mapped
    from ``<data_dir>/prepared/<key>``."""
    key = _key(digests, tokenizer_digest, cfg.max_pair_len, cfg.max_length_ratio,
               cfg.lowercase_source, FORMAT, cfg.drop_copies, drops_duplicates(cfg),
               *([cfg.train_tags] if any(cfg.train_tags) else []))
    folder = Path(data_dir) / "prepared" / key
    with holds.preparing(folder):  # another run preparing it: wait, then use theirs
        if not (folder / "meta.json").is_file():
            encode_training(cfg, file_pairs, tokenizer, folder)
            return PreparedTraining(folder)
    prepared = PreparedTraining(folder)
    meta = prepared.meta  # every run's log counts what the filters dropped, not the first's only
    log.info("training split: prepared before (%s): %d pairs read, %d kept (dropped: %s)",
             folder, meta["read"], meta["pairs"], ", ".join(
                 f"{n} {reason.replace('_', ' ')}" for reason, n in meta["dropped"].items()))
    if "unknown" in meta:
        log.info("training split: %s", UnknownCount(meta["unknown"]).described())
    return prepared


class PreparedTraining:
    """A prepared training split, memory-mapped: ``pairs`` (`PairIds`), ``text`` (the kept pairs'
    UTF-8 text as (source, target) `Side`s of bytes) and ``meta`` (counts, speed)."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.hold = holds.in_use(self.folder)  # a prune waits for this process to end
        self.meta = json.loads((self.folder / "meta.json").read_text())
        self.pairs = PairIds(Side.mapped(self.folder / "src"), Side.mapped(self.folder / "tgt"))
        self.text = tuple(Side.mapped(self.folder / f"{side}_text", "uint8")
                          for side in ("src", "tgt"))

    def lines(self, side, start, stop):
        """Pairs ``start``..``stop`` of ``side`` (0 source, 1 target) as str."""
        text = self.text[side]
        return [bytes(text[i]).decode("utf-8") for i in range(start, stop)]


def encode_training(cfg, file_pairs, tokenizer, folder, describe=None):
    """Read, filter and encode the training pairs a chunk at a time into ``folder`` (made in a
    temporary folder beside it, with what ``describe(tmp)`` adds, renamed when complete: a
    killed preparation leaves nothing that is used, and another worker's finished one is
    kept). DataError when no pair is left."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        meta = _encode_into(cfg, file_pairs, tokenizer, tmp)
        atomic_write_text(tmp / "meta.json", json.dumps(meta, indent=1))
        if describe is not None:
            describe(tmp)
        try:
            os.rename(tmp, folder)
        except OSError:  # another worker finished first: theirs is the same
            if not (folder / "meta.json").is_file():
                raise
        fsync_dir(folder.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _encode_into(cfg, file_pairs, tokenizer, tmp):
    writers = [SideWriter(tmp / name) for name in ("src", "tgt", "src_text", "tgt_text")]
    keep = Filter(cfg.max_pair_len, cfg.max_length_ratio, cfg.drop_copies,
                  drops_duplicates(cfg), cfg.lowercase_source)
    read, tic = 0, time.time()
    unknown, kept_by_corpus = UnknownCount(), [0] * len(file_pairs)
    with tqdm(desc="preparing the training split", unit=" pairs", unit_scale=True,
              mininterval=2, leave=False) as bar:
        for chunk in _chunked(read_training_pairs(file_pairs, cfg.lowercase_source,
                                                  cfg.train_tags)):
            pairs = [(src, tgt) for _, src, tgt in chunk]
            src_ids = tokenizer.source.encode([src for src, _ in pairs])
            tgt_ids = tokenizer.target.encode([tgt for _, tgt in pairs])
            rows = keep.kept_rows(pairs, src_ids, tgt_ids)
            for i in rows:
                kept_by_corpus[chunk[i][0]] += 1
            for writer, values, side in zip(writers, (src_ids, tgt_ids), (0, 1)):
                writer.write([values[i] for i in rows])
                unknown.add(("src", "tgt")[side], [values[i] for i in rows],
                            [pairs[i][side] for i in rows])
            for writer, side in zip(writers[2:], (0, 1)):
                writer.write([pairs[i][side].encode("utf-8") for i in rows])
            read += len(pairs)
            bar.update(len(pairs))
    for writer in writers:
        writer.close()
    kept = read - sum(keep.counts.values())
    seconds = time.time() - tic
    log.info("training split: %d pairs read, %d kept (dropped: %s; data.max_len=%d, "
             "data.max_length_ratio=%g) in %.1f s (%.0f pairs/s)", read, kept, keep.described(),
             cfg.max_pair_len, cfg.max_length_ratio, seconds, read / max(seconds, 1e-9))
    if not kept:
        raise DataError(f"no training pair is left after the filters ({keep.described()} of "
                        f"{read}): check the files, or raise data.max_len or "
                        f"data.max_length_ratio (data.drop_copies=false keeps copies)")
    log.info("training split: %s", unknown.described())
    return {"pairs": kept, "read": read, "dropped": keep.counts, "seconds": round(seconds, 1),
            "files": [[str(p) for p in pair] for pair in file_pairs], "unknown": unknown.counts,
            "corpora": kept_by_corpus}


def _chunked(pairs, size=CHUNK_PAIRS):
    chunk = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _key(*parts):
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]
