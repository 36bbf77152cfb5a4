"""A prepared corpus at the size users outgrow: a start that reads no training file again (the
SHA-256 taken once, trusted by size and modification time; data.verify=full hashes again), keys
that depend on content and settings only (the same vocabulary bytes in any folder), and
duplicate pairs and copies dropped and counted."""
import errno
import logging
import os

import numpy as onp
import pytest

from mtx.config import ConfigError, DataConfig
from mtx.data import fingerprints, holds, prepare, vocabularies
from mtx.data.corpus import load_corpus
from mtx.data.filters import SeenPairs, drops_duplicates
from mtx.errors import FileWriteError
from tests.test_files_corpus import files_config, sentences, write_pairs


@pytest.fixture
def corpus_dir(tmp_path):
    src, tgt = sentences(300, 1, "en"), sentences(300, 1, "de")
    write_pairs(tmp_path / "train", "en", "de", src, tgt)
    write_pairs(tmp_path / "dev", "en", "de", sentences(20, 2, "en"), sentences(20, 2, "de"))
    return tmp_path


def _hashes_counted(monkeypatch):
    hashed = []
    real = fingerprints.sha256_of
    monkeypatch.setattr(fingerprints, "sha256_of", lambda path: hashed.append(path) or real(path))
    return hashed


def _never(*args, **kwargs):
    raise AssertionError("made again")


def test_a_second_start_reads_no_training_file(corpus_dir, monkeypatch):
    cfg = files_config(corpus_dir)
    hashed = _hashes_counted(monkeypatch)
    first = load_corpus(cfg, corpus_dir / "data", seed=0)
    assert len(hashed) == 2  # the source and target training files, once
    monkeypatch.setattr(vocabularies, "train_sentencepiece", _never)
    monkeypatch.setattr(vocabularies, "read_training_pairs", _never)
    monkeypatch.setattr(prepare, "encode_training", _never)
    monkeypatch.setattr(prepare, "read_training_pairs", _never)
    again = load_corpus(cfg, corpus_dir / "data", seed=0)
    assert len(hashed) == 2 and again.train_pairs() == first.train_pairs()
    os.utime(corpus_dir / "train.en")  # touched, not changed: hashed again, nothing made again
    load_corpus(cfg, corpus_dir / "data", seed=0)
    assert len(hashed) == 3
    load_corpus(files_config(corpus_dir, verify="full"), corpus_dir / "data", seed=0)
    assert len(hashed) == 5


def test_verify_full_finds_a_change_that_kept_size_and_time(corpus_dir, caplog):
    cfg = files_config(corpus_dir)
    first = load_corpus(cfg, corpus_dir / "data", seed=0)
    path = corpus_dir / "train.de"
    stat = path.stat()
    text = path.read_text()
    path.write_text(text.replace("de park", "de bark", 1))  # the same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    trusted = load_corpus(cfg, corpus_dir / "data", seed=0)
    assert trusted.train_pairs() == first.train_pairs()  # quick: size and time decide
    with caplog.at_level(logging.WARNING, logger="mtx.data.fingerprints"):
        checked = load_corpus(files_config(corpus_dir, verify="full"), corpus_dir / "data",
                              seed=0)
    assert "changed without a new size or modification time" in caplog.text
    assert checked.train_pairs() != first.train_pairs()


def test_a_bad_verify_setting_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^data.verify=sometimes: give quick \(.*\) or full"):
        files_config(tmp_path, verify="sometimes")


def test_the_same_vocabulary_learnt_in_two_folders_has_the_same_bytes(corpus_dir):
    cfg = files_config(corpus_dir)
    first = load_corpus(cfg, corpus_dir / "one", seed=0)
    other = load_corpus(cfg, corpus_dir / "two", seed=0)
    assert first.tokenizer.model_path != other.tokenizer.model_path
    with open(first.tokenizer.model_path, "rb") as a, open(other.tokenizer.model_path, "rb") as b:
        assert a.read() == b.read()
    prepared = [sorted(p.name for p in (corpus_dir / d / "prepared").iterdir() if p.is_dir())
                for d in ("one", "two")]
    assert prepared[0] == prepared[1] and len(prepared[0]) == 1


def test_duplicates_and_copies_are_dropped_by_default_and_counted(corpus_dir, caplog):
    src, tgt = sentences(300, 1, "en"), sentences(300, 1, "de")
    src[10:13], tgt[10:13] = ["same text"] * 3, ["same text", "Same Text", "other"]
    src[20], tgt[20] = src[21], tgt[21]                      # a pair repeated
    write_pairs(corpus_dir / "train", "en", "de", src, tgt)
    expected = len(set(zip(src, tgt))) - 1                   # "same text" twice is one copy
    cfg = files_config(corpus_dir, drop_duplicates=None)     # the default of data=files
    with caplog.at_level(logging.INFO, logger="mtx.data.prepare"):
        corpus = load_corpus(cfg, corpus_dir / "data", seed=0)
    assert len(corpus.training) == expected
    assert f"300 pairs read, {expected} kept (dropped: 0 empty, 0 too long, 0 length ratio, " \
           f"1 copy, {300 - expected - 1} duplicate" in caplog.text
    kept = load_corpus(files_config(corpus_dir, drop_duplicates=False, drop_copies=False),
                       corpus_dir / "data", seed=0)
    assert len(kept.training) == 300
    # lowercased, the source "same text" is a copy of the target "Same Text"
    lowercased = load_corpus(files_config(corpus_dir, lowercase_source=True,
                                          drop_duplicates=None), corpus_dir / "data", seed=0)
    assert len(lowercased.training) == expected - 1


def test_multi30k_keeps_its_repeated_pairs_and_files_drop_them():
    assert not drops_duplicates(DataConfig())  # the benchmark's 29,000 pairs stay whole
    assert drops_duplicates(DataConfig(name="files", src_lang="en", tgt_lang="de", train="t",
                                       valid="v"))
    assert drops_duplicates(DataConfig(drop_duplicates=True))


def test_seen_pairs_finds_repeats_within_and_across_chunks_and_merges(monkeypatch):
    monkeypatch.setattr(SeenPairs, "MERGE_AT", 50)
    rng = onp.random.RandomState(0)
    pairs = [(f"s{rng.randint(120)}", f"t{rng.randint(3)}") for _ in range(1000)]
    seen, flags = SeenPairs(), []
    for start in range(0, len(pairs), 64):
        flags += seen.repeated(pairs[start:start + 64]).tolist()
    earlier = set()
    expected = []
    for pair in pairs:
        expected.append(pair in earlier)
        earlier.add(pair)
    assert flags == expected and len(seen.merged) > 0 and sum(expected) > 500


def test_a_data_directory_that_cannot_be_written_still_serves_what_it_holds(corpus_dir,
                                                                           monkeypatch, caplog):
    """Prepared, then read-only (a shared cache): a start creates no lock file and keeps no
    hash, and trains from what is there (a warning says the files are hashed again)."""
    cfg = files_config(corpus_dir)
    first = load_corpus(cfg, corpus_dir / "data", seed=0)
    real_open = holds.os.open

    def read_only(path, flags, *mode):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *mode)
    monkeypatch.setattr(holds.os, "open", read_only)
    monkeypatch.setattr(fingerprints, "atomic_write_json", _read_only_write)
    os.utime(corpus_dir / "train.en")  # its recorded time no longer matches: hashed again
    with caplog.at_level(logging.WARNING, logger="mtx.data.fingerprints"):
        again = load_corpus(cfg, corpus_dir / "data", seed=0)
    assert again.train_pairs() == first.train_pairs()
    assert "the next start hashes it again" in caplog.text


def _read_only_write(path, *args, **kwargs):
    raise FileWriteError(f"cannot write {path} (Read-only file system)")
