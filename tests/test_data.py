"""Data: Multi30k verification and errors, parallel-file checks, bucketing, tokenizers."""
import gzip
import re
import shutil
from collections import Counter

import numpy as onp
import pytest

from mtx.data import multi30k, toy
from mtx.data.batching import bucket_batches, length_groups
from mtx.errors import ConfigError, DataError
from mtx.data.lines import read_parallel
from mtx.data.multi30k import load_multi30k
from mtx.data.vocab import BOS, EOS, PAD, SentencePieceTokenizer, TokenizerError, train_sentencepiece


def test_real_multi30k_counts(multi30k_dir, tmp_path):
    splits = load_multi30k("en", "de", str(multi30k_dir), tmp_path)
    assert {k: len(v[0]) for k, v in splits.items()} == {
        "train": 29000, "val": 1014, "test_2016_flickr": 1000}
    assert all(len(src) == len(tgt) for src, tgt in splits.values())
    assert splits["val"][0][0] == "A group of men are loading cotton onto a truck"
    fr = load_multi30k("fr", "en", str(multi30k_dir), tmp_path)
    assert fr["test_2016_flickr"][1] == splits["test_2016_flickr"][0]  # reverse direction


def _copy_multi30k(src_dir, dst_dir):
    dst_dir.mkdir()
    for name in multi30k.MULTI30K_SHA256:
        if (src_dir / name).is_file():
            shutil.copy(src_dir / name, dst_dir / name)
    return dst_dir


def test_corrupted_file_is_named(multi30k_dir, tmp_path):
    raw = _copy_multi30k(multi30k_dir, tmp_path / "raw")
    with open(raw / "val.de.gz", "ab") as f:
        f.write(b"x")
    with pytest.raises(DataError, match=r"val\.de\.gz has SHA256 .* corrupted or not Multi30k; "
                                        r"data\.raw_dir=.* must hold Multi30k's own files"):
        load_multi30k("en", "de", str(raw), tmp_path)  # (not "delete it": it may be a user's)


def test_missing_file_and_unreadable_dir(multi30k_dir, tmp_path):
    raw = _copy_multi30k(multi30k_dir, tmp_path / "raw")
    (raw / "train.en.gz").unlink()
    with pytest.raises(DataError, match=r"train\.en\.gz is missing"):
        load_multi30k("en", "de", str(raw), tmp_path)
    with pytest.raises(DataError, match="not a readable directory"):
        load_multi30k("en", "de", str(tmp_path / "nowhere"), tmp_path)


def test_no_network_is_one_clear_error_and_leaves_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(multi30k, "MULTI30K_URL", "http://127.0.0.1:9/")  # nothing listens there
    with pytest.raises(DataError, match="cannot download .* MTX_MULTI30K_DIR"):
        load_multi30k("en", "de", None, tmp_path)
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_download_goes_through_checksum_into_cache(multi30k_dir, monkeypatch, tmp_path):
    monkeypatch.setattr(multi30k, "MULTI30K_URL", multi30k_dir.as_uri() + "/")  # a file:// mirror
    splits = load_multi30k("en", "fr", None, tmp_path)
    assert len(splits["train"][0]) == 29000
    assert sorted(p.name for p in (tmp_path / "multi30k").iterdir()) == sorted(
        n for n in multi30k.MULTI30K_SHA256
        if n.split(".")[1] in ("en", "fr") and n.split(".")[0] in multi30k.SPLITS)


def test_a_download_cut_off_midway_is_one_clear_error(monkeypatch, tmp_path):
    import http.client

    class CutOff:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self):
            raise http.client.IncompleteRead(b"partial", 1000)

    monkeypatch.setattr(multi30k.urllib.request, "urlopen", lambda url, timeout: CutOff())
    with pytest.raises(DataError, match="cannot download .*IncompleteRead|cannot download .*"
                                        "bytes read"):
        multi30k.multi30k_file("val.en.gz", None, tmp_path)
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


@pytest.mark.parametrize("src_text, tgt_text, message", [
    (b"a\nb\nc\n", b"x\ny\n", r"has 3 lines but .* has 2"),
    (b"a\n\nc\n", b"x\ny\nz\n", r"src\.txt:2: empty line"),
    (b"a\nb\xff\xfe\nc\n", b"x\ny\nz\n", r"src\.txt:2: not valid UTF-8"),
])
def test_bad_parallel_files(tmp_path, src_text, tgt_text, message):
    (tmp_path / "src.txt").write_bytes(src_text)
    (tmp_path / "tgt.txt").write_bytes(gzip.compress(tgt_text))
    (tmp_path / "tgt.txt.gz").write_bytes(gzip.compress(tgt_text))
    with pytest.raises(DataError, match=message):
        read_parallel(tmp_path / "src.txt", tmp_path / "tgt.txt.gz")


def _random_pairs(n, seed=0):
    rng = onp.random.RandomState(seed)
    src = [list(rng.randint(4, 50, rng.randint(1, 30))) for _ in range(n)]
    tgt = [list(rng.randint(4, 50, rng.randint(1, 30))) for _ in range(n)]
    return src, tgt


def test_bucketing_keeps_every_pair_once_with_right_lengths():
    src, tgt = _random_pairs(700)
    batches = bucket_batches(src, tgt, batch_tokens=512, shuffle=True, seed=3)
    seen = Counter(int(i) for b in batches for i in b.ids)
    assert sorted(seen) == list(range(700)) and set(seen.values()) == {1}
    for b in batches:
        assert b.src_tokens.shape[0] * b.src_tokens.shape[1] <= 512 * 2
        for r, i in enumerate(b.ids):
            s, t = src[i], tgt[i]
            assert b.src_valid_len[r] == len(s) + 1 and b.tgt_valid_len[r] == len(t) + 1
            assert list(b.src_tokens[r, :len(s) + 1]) == s + [EOS]
            assert (b.src_tokens[r, len(s) + 1:] == PAD).all()
            assert list(b.tgt_in[r, :len(t) + 1]) == [BOS] + t
            assert list(b.tgt_out[r, :len(t) + 1]) == t + [EOS]


def test_bucketing_shuffle_is_seeded():
    src, tgt = _random_pairs(300)
    order = lambda seed: [tuple(b.ids) for b in bucket_batches(src, tgt, 256, True, seed)]
    assert order(1) == order(1)
    assert order(1) != order(2)
    assert sorted(order(1)) != order(1) or len(order(1)) == 1


def test_length_groups_respect_tokens_and_rows():
    lengths = [5, 9, 3, 9, 1, 7, 2]
    groups = length_groups(lengths, batch_tokens=20, max_rows=2)
    assert sorted(i for g in groups for i in g) == list(range(7))
    assert all(len(g) <= 2 and len(g) * max(lengths[i] for i in g) <= 20 for g in groups)
    assert groups[0] == [1, 3]  # longest first, ties in index order
    assert length_groups([50], batch_tokens=20) == [[0]]  # one sentence over budget: alone


def test_sentencepiece_is_cached_by_content(tmp_path):
    texts = [f"the {w} sat on the mat number {i}" for i, w in
             enumerate(["cat", "dog", "bird", "fish"] * 50)]
    model = train_sentencepiece(texts, 60, tmp_path)
    stamp = model.stat().st_mtime_ns
    assert train_sentencepiece(texts, 60, tmp_path) == model and model.stat().st_mtime_ns == stamp
    assert train_sentencepiece(texts + ["one more line"], 60, tmp_path) != model
    tok = SentencePieceTokenizer(model)
    ids = tok.encode(["the cat sat on the mat"])[0]
    assert tok.decode([ids]) == ["the cat sat on the mat"]
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


@pytest.mark.parametrize("size", [16, 5000])  # fewer pieces than characters; more than words make
def test_a_vocabulary_size_sentencepiece_cannot_build_is_a_config_error(tmp_path, size):
    texts = [f"the {w} sat on the mat number {i}" for i, w in
             enumerate(["cat", "dog", "bird", "fish"] * 50)]
    with pytest.raises(ConfigError, match=f"data.vocab_size={size}: SentencePiece cannot build "
                                          f"it .*; choose another size"):
        train_sentencepiece(texts, size, tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half-made left behind


def test_corrupted_sentencepiece_model_is_one_clear_error(tmp_path):
    bad = tmp_path / "spm.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match="not a readable SentencePiece model"):
        SentencePieceTokenizer(bad)


def test_toy_task_reverses():
    splits = toy.make_toy("reverse", 10, 2, 5, [50, 5, 5], seed=0)
    for src, tgt in zip(*splits["train"]):
        assert tgt.split() == src.split()[::-1]
    assert toy.make_toy("reverse", 10, 2, 5, [50, 5, 5], seed=0) == splits


# -- the later test sets: registry, lookup order, download, the final report -------------------
LATER = ("test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")


def _make_test_set(folder, split, langs, monkeypatch, lines=("a b", "c d")):
    """Small gzipped files standing in for a Multi30k test set, their sums patched into the
    registry (the real ones cannot be downloaded here)."""
    folder.mkdir(parents=True, exist_ok=True)
    for lang in langs:
        path = folder / f"{split}.{lang}.gz"
        path.write_bytes(gzip.compress("".join(f"{lang} {line}\n" for line in lines).encode(),
                                       mtime=0))
        monkeypatch.setitem(multi30k.MULTI30K_SHA256, path.name, multi30k.sha256_of(path))


def test_registry_knows_every_standard_test_set():
    for split in multi30k.ALL_SPLITS:
        for lang in multi30k.MULTI30K_LANGS:
            assert len(multi30k.MULTI30K_SHA256[f"{split}.{lang}.gz"]) == 64
    assert multi30k.TEST_SETS[1:] == LATER and len(multi30k.MULTI30K_SHA256) == 18


def test_a_test_set_with_a_wrong_checksum_is_rejected(tmp_path, monkeypatch):
    data = tmp_path / "data"
    _make_test_set(data / "multi30k", "test_2017_flickr", ("en", "de"), monkeypatch)
    src, tgt = multi30k.load_split("test_2017_flickr", "en", "de", None, data)
    assert src == ["en a b", "en c d"] and tgt == ["de a b", "de c d"]
    with gzip.open(data / "multi30k" / "test_2017_flickr.de.gz", "wt") as f:
        f.write("de a b\nde c e\n")  # one word changed
    with pytest.raises(DataError, match=r"test_2017_flickr\.de\.gz has SHA256 .* corrupted .*"
                                        r"delete it and fetch it again"):
        multi30k.load_split("test_2017_flickr", "en", "de", None, data)


def test_later_test_sets_come_from_raw_dir_then_data_dir_then_download(
        multi30k_dir, tmp_path, monkeypatch):
    raw, data, mirror = tmp_path / "raw", tmp_path / "data", tmp_path / "mirror"
    _make_test_set(raw, "test_2017_flickr", ("en", "de"), monkeypatch, lines=("raw",))
    _make_test_set(data / "multi30k", "test_2017_mscoco", ("en", "de"), monkeypatch,
                   lines=("cached",))
    _make_test_set(mirror, "test_2018_flickr", ("en", "de"), monkeypatch, lines=("mirror",))
    monkeypatch.setattr(multi30k, "MULTI30K_URL", mirror.as_uri() + "/")
    assert multi30k.load_split("test_2017_flickr", "en", "de", raw, data)[0] == ["en raw"]
    assert multi30k.load_split("test_2017_mscoco", "en", "de", raw, data)[0] == ["en cached"]
    with pytest.raises(DataError, match=r"test_2018_flickr\.en\.gz is not in the Multi30k folder .* "
                                        r"nor .*; `make data` downloads it"):
        multi30k.load_split("test_2018_flickr", "en", "de", raw, data, download=False)
    assert multi30k.load_split("test_2018_flickr", "en", "de", raw, data)[1] == ["de mirror"]
    assert (data / "multi30k" / "test_2018_flickr.de.gz").is_file()  # downloaded there
    with pytest.raises(DataError, match="split=test_2019: Multi30k task 1 has train, val, "):
        multi30k.load_split("test_2019", "en", "de", raw, data)


def test_fetch_all_verifies_the_corpus_and_reports_what_it_could_not_get(
        multi30k_dir, tmp_path, monkeypatch):
    _make_test_set(tmp_path / "mirror", "test_2017_flickr", multi30k.MULTI30K_LANGS, monkeypatch)
    monkeypatch.setattr(multi30k, "MULTI30K_URL", (tmp_path / "mirror").as_uri() + "/")
    results = multi30k.fetch_all(str(multi30k_dir), tmp_path / "data")
    got = {name: (path, problem) for name, path, problem in results}
    assert len(got) == 18
    assert all(got[f"{s}.{lang}.gz"][0].parent == multi30k_dir
               for s in multi30k.SPLITS for lang in multi30k.MULTI30K_LANGS)
    assert all(got[f"test_2017_flickr.{lang}.gz"][0].parent == tmp_path / "data" / "multi30k"
               for lang in multi30k.MULTI30K_LANGS)
    missing = [n for n, (path, problem) in got.items() if path is None]
    assert sorted(missing) == sorted(f"{s}.{lang}.gz" for s in LATER[1:]
                                     for lang in multi30k.MULTI30K_LANGS)
    assert all("cannot download" in got[n][1] for n in missing)


def test_the_final_report_scores_every_available_test_set(multi30k_dir, tmp_path, monkeypatch):
    from types import SimpleNamespace
    from mtx.config import DataConfig
    from mtx.training.final import test_sets
    raw = _copy_multi30k(multi30k_dir, tmp_path / "raw")
    _make_test_set(raw, "test_2017_flickr", ("en", "de"), monkeypatch)
    monkeypatch.setattr(multi30k, "MULTI30K_URL", "http://127.0.0.1:9/")  # never reached
    corpus = SimpleNamespace(text={"test_2016_flickr": (["x"], ["y"])}, test_names=["test_2016_flickr"])
    sets = test_sets(corpus, DataConfig(raw_dir=str(raw)), tmp_path / "data")
    assert [name for name, _, _ in sets] == list(multi30k.TEST_SETS)
    assert sets[0][1] == (["x"], ["y"]) and sets[1][1] == (["en a b", "en c d"], ["de a b", "de c d"])
    for name, text, skipped in sets[2:]:
        assert text is None and f"{name}.en.gz is not in the Multi30k folder " in skipped
    toy = test_sets(corpus, DataConfig(name="toy"), tmp_path / "data")
    assert [name for name, _, _ in toy] == ["test_2016_flickr"]


def _small_corpus(tmp_path):
    from mtx.data.corpus import Corpus, ListText
    from mtx.data.pairs import PairIds
    src = [f"the {w} dog runs fast across the green meadow" for w in ("black", "brown", "white")] * 20
    tgt = [f"der {w} Hund rennt schnell über die grüne Wiese" for w in ("schwarze", "braune", "weiße")] * 20
    tokenizer = SentencePieceTokenizer(train_sentencepiece(src + tgt, 60, tmp_path))
    training = PairIds.from_lists(tokenizer.encode(src), tokenizer.encode(tgt))
    return Corpus({}, {}, tokenizer, training, ListText(src, tgt), [])


def test_subword_dropout_resegments_the_same_pairs_by_seed(tmp_path):
    corpus = _small_corpus(tmp_path)
    usual_src, usual_tgt = corpus.train_pairs()
    first = corpus.resampled_training(128, 0.3, seed=7).to_lists()
    assert first == corpus.resampled_training(128, 0.3, seed=7).to_lists()  # a resumed epoch's
    second = corpus.resampled_training(128, 0.3, seed=8).to_lists()
    assert second != first
    for src, tgt in (first, second):   # the same sentences, in the same order, cut differently
        assert corpus.tokenizer.decode(src) == corpus.tokenizer.decode(usual_src)
        assert corpus.tokenizer.decode(tgt) == corpus.tokenizer.decode(usual_tgt)
        assert sum(map(len, src)) > sum(map(len, usual_src))
    assert corpus.train_pairs() == (usual_src, usual_tgt)           # validation's stays
    longest = max(len(s) for s in usual_src + usual_tgt) + 1
    capped_src, capped_tgt = corpus.resampled_training(longest, 0.5, seed=7).to_lists()
    assert max(len(s) for s in capped_src + capped_tgt) < longest      # too long: the usual cut


def test_subword_dropout_of_a_large_corpus_goes_chunk_by_chunk(tmp_path, monkeypatch):
    """Pairs past the first chunk are cut with seeds of their own, still a function of the
    epoch's seed; every pair keeps its place."""
    import mtx.data.corpus as corpus_module
    corpus = _small_corpus(tmp_path)
    whole = corpus.resampled_training(128, 0.3, seed=7).to_lists()
    monkeypatch.setattr(corpus_module, "RESEGMENT_CHUNK", 7)
    chunked = corpus.resampled_training(128, 0.3, seed=7)
    assert chunked.to_lists() == corpus.resampled_training(128, 0.3, seed=7).to_lists()
    assert chunked.to_lists()[0][:7] == whole[0][:7] and chunked.to_lists() != whole
    assert corpus.tokenizer.decode(chunked.to_lists()[1]) == corpus.tokenizer.decode(
        corpus.train_pairs()[1])


@pytest.mark.parametrize("settings, words", [
    ({"subword_dropout": 1.0}, "data.subword_dropout=1.0: give BPE-dropout of the training split"),
    ({"subword_dropout": -0.1}, "data.subword_dropout=-0.1: give BPE-dropout"),
    ({"subword_dropout": 0.1, "name": "toy"}, "data.subword_dropout=0.1: BPE-dropout is for a "
                                              "SentencePiece corpus (not toy)")])
def test_subword_dropout_outside_its_range_or_on_the_toy_task_is_refused(settings, words):
    from mtx.config import DataConfig
    with pytest.raises(ConfigError, match=re.escape(words)):
        DataConfig(**settings)


@pytest.mark.parametrize("settings, words", [
    ({"subword_dropout_from": 0.5}, "data.subword_dropout_from=0.5: BPE-dropout starts late only "
                                    "with data.subword_dropout > 0"),
    ({"subword_dropout": 0.1, "subword_dropout_from": 1.0}, "data.subword_dropout_from=1.0: give "
                                                            "the fraction of the budget in [0, 1)"),
    ({"subword_dropout": 0.1, "subword_dropout_from": -0.5}, "data.subword_dropout_from=-0.5: "
                                                             "give the fraction")])
def test_subword_dropout_from_outside_the_budget_or_without_dropout_is_refused(settings, words):
    from mtx.config import DataConfig
    with pytest.raises(ConfigError, match=re.escape(words)):
        DataConfig(**settings)


def test_subword_dropout_from_cuts_anew_only_epochs_that_start_late(tmp_path):
    from mtx.data.corpus import TrainingPairs
    corpus = _small_corpus(tmp_path)
    late = TrainingPairs(corpus, 128, subword_dropout=0.3, dropout_from=0.5)
    assert not late.resegmented_at(0.49) and late.resegmented_at(0.5)
    assert late.for_epoch(7, resegmented=False).to_lists() == corpus.train_pairs()
    assert (late.for_epoch(7, resegmented=True).to_lists()
            == corpus.resampled_training(128, 0.3, 7).to_lists())
    never = TrainingPairs(corpus, 128)
    assert not never.resegmented_at(1.0) and never.for_epoch(7).to_lists() == corpus.train_pairs()


def test_distilled_targets_replace_or_join_the_references_and_must_align(tmp_path):
    from mtx.config import DataConfig
    from mtx.data.corpus import load_corpus
    from tests.test_files_corpus import files_config, write_pairs
    sources, references = ["a man runs", "two dogs play"] * 10, ["ein Mann rennt", "zwei Hunde spielen"] * 10
    write_pairs(tmp_path / "train", "en", "de", sources, references)
    write_pairs(tmp_path / "dev", "en", "de", sources[:2], references[:2])
    teacher = tmp_path / "teacher.de"
    teacher.write_text("zwei Mann rennt\nein Hunde spielen\n" * 10, encoding="utf-8")
    cfg = files_config(tmp_path, vocab_size=40, distilled_target=str(teacher))
    corpus = load_corpus(cfg, tmp_path / "data", seed=0)
    assert corpus.tokenizer.decode(corpus.train_pairs()[1])[:2] == ["zwei Mann rennt",
                                                                     "ein Hunde spielen"]
    both = load_corpus(files_config(tmp_path, vocab_size=40, distilled_target=str(teacher),
                                    distilled_with_references=True), tmp_path / "data", seed=0)
    assert len(both.training) == 40 and both.tokenizer.decode(both.train_pairs()[1])[0] == (
        "ein Mann rennt")
    teacher.write_text("ein Mann .\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"teacher.de has 1 lines but .*train.en has more"):
        load_corpus(cfg, tmp_path / "data", seed=0)
    with pytest.raises(ConfigError, match="data.distilled_target= is for a corpus of files"):
        DataConfig(name="toy", distilled_target=str(teacher))


def test_lowercase_source_lowers_every_source_in_training_and_in_translation(tmp_path, monkeypatch):
    import json
    import mtx.data.corpus as corpus_module
    from mtx.config import DataConfig
    from tests.test_files_corpus import files_config, write_pairs
    src = [f"The {w} Dog runs across the Green meadow" for w in ("Black", "brown", "WHITE")] * 20
    tgt = [f"Der {w} Hund rennt über die grüne Wiese" for w in ("schwarze", "braune", "weiße")] * 20
    write_pairs(tmp_path / "train", "en", "de", src, tgt)
    write_pairs(tmp_path / "dev", "en", "de", src[:3], tgt[:3])
    corpus = corpus_module.load_corpus(files_config(tmp_path, vocab_size=60, lowercase_source=True),
                                       tmp_path / "data", seed=0)
    assert corpus.tokenizer.decode(corpus.train_pairs()[0])[:3] == [s.lower() for s in src[:3]]
    for sources, targets in corpus.text.values():
        assert sources == [line.lower() for line in src[:len(sources)]]
        assert targets == tgt[:len(targets)]  # the targets keep their case
    tokenizer = corpus.tokenizer
    assert tokenizer.encode_source(["The BLACK Dog"]) == tokenizer.encode(["the black dog"])
    assert tokenizer.encode(["The BLACK Dog"]) != tokenizer.encode(["the black dog"])
    run = tmp_path / "run"  # a run's tokenizer takes the rule from the data.json beside it
    run.mkdir()
    corpus_module.save_tokenizer(tokenizer, run)
    assert corpus_module.load_tokenizer(run).encode_source(["The Dog"]) == tokenizer.encode(
        ["The Dog"])  # no data.json: sources as given
    (run / "data.json").write_text(json.dumps({"lowercase_source": True}))
    assert corpus_module.load_tokenizer(run).encode_source(["The Dog"]) == tokenizer.encode(
        ["the dog"])
    with pytest.raises(ConfigError, match="data.lowercase_source=true is for a corpus of files"):
        DataConfig(name="toy", lowercase_source=True)


def test_one_vocabulary_trained_in_two_places_is_one_for_an_ensemble(tmp_path):
    """The same vocabulary trained in two places has the same bytes (SentencePiece learns from
    memory: no path in the model); `vocabulary_sha256` compares what the tokenizers do to text
    (a model learnt from a file records its path): equal for those two, different for another
    vocabulary or lowercased sources."""
    from mtx.data.corpus import tokenizer_sha256, vocabulary_sha256
    texts = [f"ein Hund läuft {i} mal über die Wiese" for i in range(200)] + ["A dog runs."] * 50
    here, there = (SentencePieceTokenizer(train_sentencepiece(texts, 60, tmp_path / d))
                   for d in ("a", "b"))
    assert here.model_path != there.model_path
    assert tokenizer_sha256(here) == tokenizer_sha256(there)  # the same bytes
    assert vocabulary_sha256(here) == vocabulary_sha256(there)
    other = SentencePieceTokenizer(train_sentencepiece(texts, 70, tmp_path / "c"))
    lowered = SentencePieceTokenizer(here.model_path, lowercase_source=True)
    assert len({vocabulary_sha256(t) for t in (here, other, lowered)}) == 3


def test_training_folder_is_the_local_copy_else_the_data_directory(multi30k_dir, tmp_path,
                                                                   monkeypatch):
    """Where the tests and `make data` find the training splits: a local copy as it is, else
    <data>/multi30k/ (downloaded there, checked by mtx's table; here from a file:// mirror)."""
    assert multi30k.training_folder(str(multi30k_dir), tmp_path / "unused") == multi30k_dir
    monkeypatch.setattr(multi30k, "MULTI30K_URL", multi30k_dir.as_uri() + "/")
    folder = multi30k.training_folder(None, tmp_path / "data", langs=("en", "de"))
    assert folder == tmp_path / "data" / "multi30k"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        multi30k.file_name(s, lang) for s in multi30k.SPLITS for lang in ("en", "de"))
