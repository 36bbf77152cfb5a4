"""data=files: a user's own parallel files, read, filtered, prepared once and reused, batched
lazily; and Multi30k read the same way."""
import gzip
import json
import logging

import numpy as onp
import pytest

from mtx.config import DataConfig
from mtx.data import prepare, vocabularies
from mtx.data.batching import batch_plan, bucket_batches, prefetched
from mtx.data.corpus import load_corpus
from mtx.data.pairs import PairIds, Side
from mtx.errors import ConfigError, DataError

WORDS = "a man dog runs plays with the green ball on grass two women children park".split()


def write_pairs(prefix, src_lang, tgt_lang, src, tgt, gz=False):
    """<prefix>.<src_lang> and <prefix>.<tgt_lang> (gzipped with ``gz``), a line each."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for lang, lines in ((src_lang, src), (tgt_lang, tgt)):
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        path = prefix.parent / f"{prefix.name}.{lang}{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(data) if gz else data)


def sentences(n, seed, lang):
    rng = onp.random.RandomState(seed)
    return [f"{lang} " + " ".join(rng.choice(WORDS, rng.randint(2, 9))) for _ in range(n)]


def files_config(tmp_path, **settings):
    """A data=files config of <tmp_path>/train and <tmp_path>/dev, en -> de, keeping repeated
    pairs (`sentences` repeats short ones by chance; the tests of the filters drop them)."""
    values = dict(name="files", src_lang="en", tgt_lang="de", train=str(tmp_path / "train"),
                  valid=str(tmp_path / "dev"), vocab_size=60, drop_duplicates=False)
    values.update(settings)
    return DataConfig(**values)


@pytest.fixture
def corpus_dir(tmp_path):
    write_pairs(tmp_path / "train", "en", "de", sentences(300, 1, "en"), sentences(300, 1, "de"),
                gz=True)
    write_pairs(tmp_path / "dev", "en", "de", sentences(20, 2, "en"), sentences(20, 2, "de"))
    write_pairs(tmp_path / "sets" / "news", "en", "de", sentences(10, 3, "en"),
                sentences(10, 3, "de"))
    return tmp_path


def test_files_are_found_plain_or_gzipped_and_named_by_their_prefix(corpus_dir):
    cfg = files_config(corpus_dir, test=[str(corpus_dir / "sets" / "news")])
    corpus = load_corpus(cfg, corpus_dir / "data", seed=0)
    assert len(corpus.training) == 300 and corpus.test_names == ["news"]
    assert set(corpus.text) == {"val", "news"} and len(corpus.text["news"][0]) == 10
    assert corpus.tokenizer.decode(corpus.train_pairs()[0][:1]) == sentences(1, 1, "en")
    with pytest.raises(DataError, match=r"data.train=.*nowhere: neither .*nowhere.en nor "
                                        r".*nowhere.en.gz is a file"):
        load_corpus(files_config(corpus_dir, train=str(corpus_dir / "nowhere")),
                    corpus_dir / "data", seed=0)


def test_settings_of_files_are_checked_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match="data=files needs data.train=<prefix>"):
        DataConfig(name="files", src_lang="en", tgt_lang="xx", train=None, valid="dev")
    with pytest.raises(ConfigError, match="data.src_lang and data.tgt_lang are both en"):
        files_config(tmp_path, tgt_lang="en")
    with pytest.raises(ConfigError, match="data.train/valid/test/prepared are for data=files"):
        DataConfig(train="corpus/train")
    with pytest.raises(ConfigError, match="data.max_length_ratio=0.5: give"):
        files_config(tmp_path, max_length_ratio=0.5)
    cfg = files_config(tmp_path, train="rel/train", test="rel/test")
    assert cfg.train == [str(tmp_path.cwd() / "rel" / "train")] and len(cfg.test) == 1


@pytest.mark.parametrize("damage, message", [
    ("short", r"dev.de has 19 lines but .*dev.en has more: parallel files must align"),
    ("long", r"dev.en has 20 lines but .*dev.de has 21: parallel files must align"),
    ("utf8", r"dev.de:3: not valid UTF-8; fix or remove that line"),
])
def test_bad_files_are_one_line_naming_the_file(corpus_dir, damage, message):
    lines = sentences(20, 2, "de")
    path = corpus_dir / "dev.de"
    if damage == "short":
        path.write_text("\n".join(lines[:19]) + "\n", encoding="utf-8")
    elif damage == "long":
        path.write_text("\n".join(lines + ["extra"]) + "\n", encoding="utf-8")
    else:
        path.write_bytes("\n".join(lines).encode() .replace(lines[2].encode(), b"\xff\xfe bad"))
    with pytest.raises(DataError, match=message):
        load_corpus(files_config(corpus_dir), corpus_dir / "data", seed=0)


def test_pairs_that_cannot_be_trained_on_are_dropped_and_counted(corpus_dir, caplog):
    src, tgt = sentences(300, 1, "en"), sentences(300, 1, "de")
    src[3], tgt[5] = "", "   "                              # empty sides
    src[7] = " ".join(["dog"] * 60)                          # too long for max_len 40
    tgt[9] = "de " + " ".join(["park"] * 30)                 # 1 or 2 source subwords to 31
    src[9] = "en"
    write_pairs(corpus_dir / "train", "en", "de", src, tgt)
    with caplog.at_level(logging.INFO, logger="mtx.data.prepare"):
        corpus = load_corpus(files_config(corpus_dir, max_pair_len=40, max_length_ratio=9),
                             corpus_dir / "data", seed=0)
    assert len(corpus.training) == 296
    meta = json.loads(next((corpus_dir / "data" / "prepared").glob("*/meta.json")).read_text())
    assert meta["dropped"] == {"empty": 2, "too_long": 1, "length_ratio": 1, "copy": 0}
    assert ("300 pairs read, 296 kept (dropped: 2 empty, 1 too long, 1 length ratio, 0 copy"
            in caplog.text)
    write_pairs(corpus_dir / "train", "en", "de", ["", "x"], ["y", ""])
    with pytest.raises(DataError, match="have no pair with text on both sides"):
        load_corpus(files_config(corpus_dir), corpus_dir / "data", seed=0)


def test_the_vocabulary_and_the_encoded_split_are_made_once_and_reused(corpus_dir, monkeypatch):
    cfg = files_config(corpus_dir)
    first = load_corpus(cfg, corpus_dir / "data", seed=0)
    monkeypatch.setattr(vocabularies, "train_sentencepiece", _never)
    monkeypatch.setattr(prepare, "encode_training", _never)
    again = load_corpus(cfg, corpus_dir / "data", seed=0)  # nothing read but the held splits
    assert again.tokenizer.model_path == first.tokenizer.model_path
    assert again.train_pairs() == first.train_pairs()
    assert isinstance(again.training.src.ids, onp.memmap)  # mapped, not loaded
    write_pairs(corpus_dir / "train", "en", "de", sentences(300, 9, "en"), sentences(300, 9, "de"))
    with pytest.raises(AssertionError, match="made again"):
        load_corpus(cfg, corpus_dir / "data", seed=0)  # other files: another vocabulary
    assert not list((corpus_dir / "data" / "prepared").glob(".*tmp"))  # nothing half-made


def _never(*args, **kwargs):
    raise AssertionError("made again")


def test_a_large_corpus_teaches_the_vocabulary_from_a_seeded_sample(corpus_dir, caplog):
    cfg = files_config(corpus_dir, vocab_sample=1000)
    write_pairs(corpus_dir / "train", "en", "de", sentences(1500, 1, "en"),
                sentences(1500, 1, "de"))
    with caplog.at_level(logging.INFO, logger="mtx.data"):
        first = load_corpus(cfg, corpus_dir / "data", seed=0)
    assert "a sample of 500 of 1500 training pairs" in caplog.text
    other = load_corpus(cfg, corpus_dir / "other", seed=0)
    assert first.tokenizer.definition() == other.tokenizer.definition()
    assert len(first.training) == 1500


def test_multi30k_is_read_as_files_are(multi30k_dir, tmp_path):
    """Multi30k through the same pipeline: every training pair kept, in order, and encoded as
    the tokenizer encodes its lines."""
    from mtx.data.multi30k import load_split
    corpus = load_corpus(DataConfig(raw_dir=str(multi30k_dir)), tmp_path, seed=1)
    src, tgt = load_split("train", "en", "de", str(multi30k_dir), tmp_path)
    assert len(corpus.training) == 29000
    for i in (0, 1234, 28999):
        assert corpus.training.src[i].tolist() == corpus.tokenizer.encode([src[i]])[0]
        assert corpus.training.tgt[i].tolist() == corpus.tokenizer.encode([tgt[i]])[0]
    assert corpus.test_names == ["test_2016_flickr"] and len(corpus.text["val"][0]) == 1014


def test_lazy_batches_are_the_planned_ones_collated_as_needed():
    rng = onp.random.RandomState(0)
    src = [rng.randint(4, 30, rng.randint(1, 20)).tolist() for _ in range(500)]
    tgt = [rng.randint(4, 30, rng.randint(1, 20)).tolist() for _ in range(500)]
    eager = bucket_batches(src, tgt, 256, shuffle=True, seed=5)
    pairs = PairIds.from_lists(src, tgt)
    plan = batch_plan(pairs.bucket_lengths(), 256, shuffle=True, seed=5)
    lazy = list(prefetched(pairs, plan, depth=2))
    assert len(lazy) == len(eager) and sorted(i for b in lazy for i in b.ids) == list(range(500))
    for a, b in zip(lazy, eager):
        for name in ("src_tokens", "src_valid_len", "tgt_in", "tgt_out", "tgt_valid_len", "ids"):
            assert onp.array_equal(getattr(a, name), getattr(b, name)), name
    stopped = prefetched(pairs, plan, depth=2)
    next(stopped)
    stopped.close()  # a loop that breaks: the collating thread ends


def test_sides_concatenate_and_map_from_disk(tmp_path):
    from mtx.data.pairs import SideWriter
    writer = SideWriter(tmp_path / "side")
    writer.write([[4, 5], [], [6]])
    writer.write([[7, 8, 9]])
    writer.close()
    mapped = Side.mapped(tmp_path / "side")
    assert mapped.to_lists() == [[4, 5], [], [6], [7, 8, 9]]
    joined = Side.concatenate([mapped, Side.from_lists([[10], [11, 12]])])
    assert joined.to_lists() == [[4, 5], [], [6], [7, 8, 9], [10], [11, 12]]


def test_evaluate_reads_a_files_split_as_training_read_it(corpus_dir):
    """mtx-evaluate split=<test set> of a files run: the set whole, as report.json scored it (an
    empty source kept, to get an empty translation), and val without its empty pairs."""
    from types import SimpleNamespace
    from mtx.commands.evaluate import read_split
    src, tgt = sentences(10, 3, "en"), sentences(10, 3, "de")
    src[4] = ""
    write_pairs(corpus_dir / "sets" / "news", "en", "de", src, tgt)
    cfg = files_config(corpus_dir, test=[str(corpus_dir / "sets" / "news")])
    corpus = load_corpus(cfg, corpus_dir / "data", seed=0)
    def options(split):
        return SimpleNamespace(split=split, ckpt="run", data_dir=corpus_dir / "data")
    assert read_split(options("news"), cfg) == ("news", *corpus.text["news"])
    assert read_split(options(None), cfg)[1][4] == ""
    dev = sentences(20, 2, "en")
    dev[0] = " "
    write_pairs(corpus_dir / "dev", "en", "de", dev, sentences(20, 2, "de"))
    _, val_src, val_tgt = read_split(options("val"), cfg)
    assert val_src == dev[1:] and val_tgt == sentences(20, 2, "de")[1:]


def test_a_run_that_reuses_the_prepared_split_logs_what_the_filters_dropped(corpus_dir, caplog):
    src, tgt = sentences(300, 1, "en"), sentences(300, 1, "de")
    src[3], tgt[5] = "", " "
    write_pairs(corpus_dir / "train", "en", "de", src, tgt)
    load_corpus(files_config(corpus_dir), corpus_dir / "data", seed=0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mtx.data.prepare"):
        load_corpus(files_config(corpus_dir), corpus_dir / "data", seed=0)  # a second run
    assert "training split: prepared before" in caplog.text
    assert ("300 pairs read, 298 kept (dropped: 2 empty, 0 too long, 0 length ratio, 0 copy)"
            in caplog.text)


def write_tsv(path, rows, gz=False):
    data = "".join("\t".join(row) + "\n" for row in rows).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)


def test_a_tsv_corpus_reads_as_the_same_pairs_in_two_files(corpus_dir, tmp_path):
    """train.tsv.gz, dev.tsv and news.tsv with the target first and an attribution column
    (data.tsv_columns=[1,0]): the same training pairs, held splits and vocabulary as the files
    of the same text; split once into the data directory and reused."""
    tsv_dir = tmp_path / "tsv_corpus"
    for name, n, seed, gz in (("train", 300, 1, True), ("dev", 20, 2, False),
                              ("news", 10, 3, False)):
        rows = [(de, en, f"source {i}") for i, (en, de) in
                enumerate(zip(sentences(n, seed, "en"), sentences(n, seed, "de")))]
        write_tsv(tsv_dir / f"{name}.tsv{'.gz' if gz else ''}", rows, gz)
    from_files = load_corpus(files_config(corpus_dir, test=[str(corpus_dir / "sets" / "news")]),
                             corpus_dir / "data", seed=0)
    cfg = files_config(tsv_dir, test=[str(tsv_dir / "news")], tsv_columns=[1, 0])
    from_tsv = load_corpus(cfg, tsv_dir / "data", seed=0)
    assert from_tsv.text == from_files.text
    assert from_tsv.train_pairs() == from_files.train_pairs()
    split = sorted((tsv_dir / "data" / "tsv").iterdir())
    assert len(split) == 3 and all(p.name.endswith("-1-0") for p in split)
    assert load_corpus(cfg, tsv_dir / "data", seed=0).text == from_files.text  # reused
    assert sorted((tsv_dir / "data" / "tsv").iterdir()) == split


def test_a_tsv_row_with_too_few_columns_is_one_line_naming_it(tmp_path):
    write_tsv(tmp_path / "train.tsv", [("a man", "ein mann", "x")] * 5 + [("only one",)])
    write_tsv(tmp_path / "dev.tsv", [("a dog", "ein hund")] * 3)
    with pytest.raises(DataError, match=r"train\.tsv:6: 1 column\(s\), but "
                                        r"data\.tsv_columns=\[0,1\] needs 2; fix or remove"):
        load_corpus(files_config(tmp_path), tmp_path / "data", seed=0)
    with pytest.raises(DataError, match=r"train\.tsv:1: 3 column\(s\), but "
                                        r"data\.tsv_columns=\[0,3\] needs 4"):
        load_corpus(files_config(tmp_path, tsv_columns=[0, 3]), tmp_path / "data", seed=0)


@pytest.mark.parametrize("columns", [[0, 0], [1], [0, 1, 2]])
def test_tsv_columns_that_cannot_name_a_pair_are_refused_in_one_line(tmp_path, columns):
    with pytest.raises(ConfigError, match=r"^data\.tsv_columns=.*: give two different columns"):
        files_config(tmp_path, tsv_columns=columns)


def test_byte_fallback_turns_an_unseen_character_into_bytes_not_unk(corpus_dir):
    """A validation line with a character the training text never has: <unk> in the default
    vocabulary, its UTF-8 bytes (and back to the character) with data.byte_fallback=true."""
    from mtx.data.vocab import UNK
    write_pairs(corpus_dir / "dev", "en", "de", ["a man with a ☃ runs"] * 3, ["ein ☃"] * 3)
    plain = load_corpus(files_config(corpus_dir), corpus_dir / "data", seed=0)
    with_bytes = load_corpus(files_config(corpus_dir, byte_fallback=True, vocab_size=320),
                             corpus_dir / "data", seed=0)
    assert UNK in plain.ids["val"][0][0]
    ids = with_bytes.ids["val"][0][0]
    assert UNK not in ids and "<0xE2>" in with_bytes.tokenizer.pieces(ids)
    assert with_bytes.tokenizer.decode([ids]) == ["a man with a ☃ runs"]


def test_user_symbols_stay_whole_and_an_existing_model_is_used_as_it_is(corpus_dir, tmp_path):
    plain = load_corpus(files_config(corpus_dir), corpus_dir / "data", seed=0).tokenizer
    corpus = load_corpus(files_config(corpus_dir, user_symbols=["<bt>", "<2de>"]),
                         corpus_dir / "data", seed=0)
    assert "<bt>" not in plain.pieces(plain.encode(["<bt> a man runs"])[0])  # split into pieces
    assert "<bt>" in corpus.tokenizer.pieces(corpus.tokenizer.encode(["<bt> a man runs"])[0])
    model = corpus.tokenizer.model_path
    elsewhere = tmp_path / "other"
    write_pairs(elsewhere / "train", "en", "de", sentences(50, 9, "en"), sentences(50, 9, "de"))
    write_pairs(elsewhere / "dev", "en", "de", sentences(5, 8, "en"), sentences(5, 8, "de"))
    reused = load_corpus(files_config(elsewhere, spm_model=model, vocab_size=16),
                         elsewhere / "data", seed=0)
    assert reused.tokenizer.definition() == corpus.tokenizer.definition()
    assert not (elsewhere / "data" / "spm").exists()  # nothing learnt


@pytest.mark.parametrize("settings, message", [
    ({"user_symbols": ["<b t>"]}, r"^data\.user_symbols: '<b t>' cannot be one piece; give tags "
                                  r"without spaces"),
    ({"user_symbols": ["<bt>", "<bt>"]}, r"^data\.user_symbols=\['<bt>', '<bt>'\] names a "
                                         r"symbol twice$"),
    ({"character_coverage": 1.5}, r"^data\.character_coverage=1\.5: give a share in \(0, 1\]"),
])
def test_vocabulary_settings_that_cannot_work_are_one_line(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        files_config(tmp_path, **settings)


def test_a_missing_vocabulary_model_is_one_line_before_anything_is_learnt(corpus_dir):
    with pytest.raises(DataError, match=r"^data\.spm_model=.*nowhere\.model is not a file; give "
                                        r"a SentencePiece \.model file"):
        load_corpus(files_config(corpus_dir, spm_model=str(corpus_dir / "nowhere.model")),
                    corpus_dir / "data", seed=0)
    assert not (corpus_dir / "data" / "spm").exists()


def test_languages_of_many_characters_get_sentencepieces_recommended_coverage_and_bytes(tmp_path):
    from mtx.data.vocab import vocabulary_options

    def options(**changes):
        found = vocabulary_options(files_config(tmp_path, **changes))
        return found["character_coverage"], found["byte_fallback"]
    assert options() == (1.0, False)
    assert options(tgt_lang="ja") == (0.9995, True)
    assert options(src_lang="zh-Hant") == (0.9995, True)
    assert options(tgt_lang="ja", character_coverage=1.0, byte_fallback=False) == (1.0, False)
    assert options(byte_fallback=True) == (1.0, True)
