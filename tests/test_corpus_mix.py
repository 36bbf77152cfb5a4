"""Several training corpora (data.train's prefixes) in one epoch: each one's sampling weight
(its share of every epoch) and tag (one token before each of its sources), counted in the log;
a tag the model never saw refused at translation; bad weights and tags refused in one line."""
import json
import logging

import numpy as onp
import pytest

from conftest import run_script
from mtx.data.corpus import DATA_FILE, TrainingPairs, load_corpus, load_tokenizer, save_tokenizer
from mtx.data.mix import CorpusMix
from mtx.errors import ConfigError, TokenizerError
from test_cli import assert_one_line
from test_files_corpus import files_config, sentences, write_pairs


@pytest.fixture
def two_corpora(tmp_path):
    """<tmp_path>/web (300 pairs), <tmp_path>/bt (100 pairs), <tmp_path>/dev (20)."""
    write_pairs(tmp_path / "web", "en", "de", sentences(300, 1, "en"), sentences(300, 1, "de"))
    write_pairs(tmp_path / "bt", "en", "de", sentences(100, 4, "en"), sentences(100, 4, "de"))
    write_pairs(tmp_path / "dev", "en", "de", sentences(20, 2, "en"), sentences(20, 2, "de"))
    return tmp_path


def mixed(folder, **settings):
    cfg = files_config(folder, train=[str(folder / "web"), str(folder / "bt")], **settings)
    return cfg, load_corpus(cfg, folder / "data", seed=0)


def corpus_counts(plan, starts):
    """How many of an epoch plan's rows fall in each corpus (``starts``: where each begins)."""
    rows = onp.concatenate(list(plan))
    return onp.bincount(onp.searchsorted(starts, rows, side="right") - 1).tolist(), rows


def test_weights_are_each_corpus_share_of_every_epoch(two_corpora, caplog):
    with caplog.at_level(logging.INFO):
        cfg, corpus = mixed(two_corpora, train_weights=[1, 3])
    pairs = TrainingPairs(corpus, cfg.max_pair_len)
    assert corpus.mix.per_epoch() == [100, 300]
    counts, rows = corpus_counts(pairs.plan(corpus.training, 256, seed=7), [0, 300])
    assert counts == [100, 300] and len(set(rows[rows < 300].tolist())) == 100  # drawn
    assert onp.bincount(rows[rows >= 300] - 300).tolist() == [3] * 100  # each bt pair 3 times
    again, _ = corpus_counts(pairs.plan(corpus.training, 256, seed=7), [0, 300])
    other = onp.concatenate(list(pairs.plan(corpus.training, 256, seed=8)))
    assert again == counts and set(other[other < 300]) != set(rows[rows < 300])  # per epoch
    assert "training corpus 2 (" in caplog.text and "bt, weight 3): 100 pairs kept, 300 an " \
        "epoch (3.00 times each)" in caplog.text
    _, plain = mixed(two_corpora)
    counts, rows = corpus_counts(TrainingPairs(plain, cfg.max_pair_len).plan(
        plain.training, 256, seed=7), [0, 300])
    assert counts == [300, 100] and sorted(rows.tolist()) == list(range(400))  # each once


def test_shares_round_to_the_epoch_size_by_largest_remainder():
    mix = CorpusMix(["a", "b", "c"], [10, 10, 10], [1, 1, 1])
    assert mix.per_epoch() == [10, 10, 10] and len(mix.members(0)) == 30
    assert CorpusMix(["a", "b"], [7, 4], [2, 1]).per_epoch() == [7, 4]
    assert CorpusMix(["a", "b"], [5, 5], [0.5, 2]).per_epoch() == [2, 8]


def test_a_tag_is_one_token_before_each_source_of_its_corpus(two_corpora):
    cfg, corpus = mixed(two_corpora, train_tags=[None, "<bt>"])
    tokenizer = corpus.tokenizer
    (tag,) = tokenizer.encode(["<bt>"])[0][-1:]
    assert tokenizer.pieces([tag]) == ["<bt>"]
    tagged = [corpus.training.src[i].tolist() for i in range(300, 400)]
    untagged = [corpus.training.src[i].tolist() for i in range(300)]
    assert all(ids.count(tag) == 1 and tag in ids[:2] for ids in tagged)
    assert not any(tag in ids for ids in untagged)
    assert corpus.training.tgt[300].tolist() == tokenizer.encode(sentences(1, 4, "de"))[0]


def test_a_tag_the_model_never_saw_is_refused_at_translation(two_corpora):
    cfg, corpus = mixed(two_corpora, train_tags=[None, "<bt>"])
    run = two_corpora / "run"
    run.mkdir()
    save_tokenizer(corpus.tokenizer, run)
    (run / DATA_FILE).write_text(json.dumps({"train_tags": [None, "<bt>"]}))
    tokenizer = load_tokenizer(run)
    assert tokenizer.encode_source(["<bt> a man runs"]) == corpus.tokenizer.encode(
        ["<bt> a man runs"])
    with pytest.raises(TokenizerError, match=r"^a source starts with the tag <2fr>, which the "
                                             r"model never saw in training \(its tags: <bt>\)"):
        tokenizer.encode_source(["a dog", "<2fr> a man runs"])


@pytest.mark.parametrize("settings, message", [
    ({"train_weights": [1, 0]}, r"^data\.train_weights=\[1, 0\]: give one sampling weight > 0"),
    ({"train_weights": [2, -1]}, r"^data\.train_weights=\[2, -1\]: give one sampling weight > 0"),
    ({"train_weights": [1]}, r"^data\.train_weights=\[1\]: give one a data\.train prefix of "
                             r"data=files \(2 given"),
    ({"train_tags": [None, "<b t>"]}, r"^data\.train_tags: '<b t>' is not a tag; write it <name> "
                                      r"without spaces"),
    ({"train_tags": ["bt", None]}, r"^data\.train_tags: 'bt' is not a tag"),
])
def test_bad_weights_and_tags_are_one_line(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        files_config(tmp_path, train=[str(tmp_path / "a"), str(tmp_path / "b")], **settings)


def test_a_tag_missing_from_a_given_vocabulary_is_one_line(two_corpora):
    _, plain = mixed(two_corpora)
    with pytest.raises(ConfigError, match=r"^data\.train_tags: <bt> is not a piece of the "
                                          r"vocabulary given"):
        mixed(two_corpora, train_tags=[None, "<bt>"], spm_model=plain.tokenizer.model_path)


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("data.train_weights=[1,0]", "error: data.train_weights=[1, 0]: give one sampling weight"),
    ("data.train_tags=[null,'<b t>']", "error: data.train_tags: '<b t>' is not a tag"),
])
def test_mtx_train_ends_bad_weights_and_tags_in_one_line_exit_2(two_corpora, override, message):
    done = run_script("train", "data=files", "data.src_lang=en", "data.tgt_lang=de",
                      f"data.train=[{two_corpora / 'web'},{two_corpora / 'bt'}]",
                      f"data.valid={two_corpora / 'dev'}", override,
                      f"hydra.run.dir={two_corpora / 'run'}", cwd=two_corpora)
    assert assert_one_line(done.stderr, done.returncode, 2).startswith(message)
    assert not (two_corpora / "run" / "checkpoints").exists()
