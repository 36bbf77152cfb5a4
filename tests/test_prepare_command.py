"""mtx-prepare: a corpus prepared once into a folder the user names (a second preparer waits
for the first and makes nothing), trained from with data.prepared=<it> without reading the
training files, checked against the run's settings; --list and --prune, which refuses a folder
a run is using."""
import gc
import json
import re
import threading
import time

import pytest

from mtx.data import corpus as corpus_module
from mtx.data import named
from mtx.data.corpus import load_corpus
from mtx.errors import DataError
from tests.conftest import run_script
from tests.test_files_corpus import files_config, sentences, write_pairs


@pytest.fixture
def corpus_dir(tmp_path):
    write_pairs(tmp_path / "train", "en", "de", sentences(300, 1, "en"), sentences(300, 1, "de"))
    write_pairs(tmp_path / "dev", "en", "de", sentences(20, 2, "en"), sentences(20, 2, "de"))
    return tmp_path


def _prepare(corpus_dir, *extra):
    return run_script("prepare", "data.src_lang=en", "data.tgt_lang=de", "data.vocab_size=60",
                      f"data.train={corpus_dir / 'train'}", "output=enxx", *extra,
                      env={"MTX_DATA_DIR": str(corpus_dir / "data")})


def _manage(corpus_dir, *args):
    return run_script("prepare", *args, env={"MTX_DATA_DIR": str(corpus_dir / "data")})


def _on_prepared(corpus_dir, **settings):
    return files_config(corpus_dir, train=None, prepared="enxx", drop_duplicates=None,
                        **settings)


def test_a_prepared_folder_trains_without_reading_the_training_files(corpus_dir, monkeypatch):
    done = _prepare(corpus_dir)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "prepared/enxx: " in done.stdout.decode() and "data.prepared=enxx" in done.stdout.decode()
    direct = load_corpus(files_config(corpus_dir, drop_duplicates=None), corpus_dir / "other",
                         seed=0)
    monkeypatch.setattr(corpus_module, "content_sha256", _never)
    monkeypatch.setattr(corpus_module, "run_tokenizer", _never)
    prepared = load_corpus(_on_prepared(corpus_dir), corpus_dir / "data", seed=0)
    assert prepared.train_pairs() == direct.train_pairs()
    assert prepared.tokenizer.definition() == direct.tokenizer.definition()
    again = _prepare(corpus_dir)  # made with these settings: nothing is made again
    assert again.returncode == 0 and "preparing" not in again.stderr.decode()


def _never(*args, **kwargs):
    raise AssertionError("a training file was read")


def test_a_prepared_folder_of_other_settings_or_version_is_one_line(corpus_dir):
    assert _prepare(corpus_dir).returncode == 0
    with pytest.raises(DataError, match=r"was prepared with data.max_len=128 \(now 64\): give "):
        load_corpus(_on_prepared(corpus_dir, max_pair_len=64), corpus_dir / "data", seed=0)
    description = corpus_dir / "data" / "prepared" / "enxx" / "prepared.json"
    values = json.loads(description.read_text())
    description.write_text(json.dumps(dict(values, format=0)))
    with pytest.raises(DataError, match="was prepared by another version of mtx"):
        load_corpus(_on_prepared(corpus_dir), corpus_dir / "data", seed=0)
    with pytest.raises(DataError, match="is not a folder mtx-prepare made"):
        load_corpus(files_config(corpus_dir, train=None, prepared="nothing"), corpus_dir / "data",
                    seed=0)


def test_two_preparers_at_once_prepare_once(corpus_dir, monkeypatch):
    cfg = files_config(corpus_dir)
    folder = named.prepared_folder("twice", corpus_dir / "data")
    real, calls = named.encode_training, []

    def slow_encode(*args):
        calls.append(args)
        time.sleep(1)  # the second preparer arrives meanwhile
        return real(*args)
    monkeypatch.setattr(named, "encode_training", slow_encode)
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        named.prepare_named(cfg, folder, corpus_dir / "data"))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(calls) == 1 and len(results) == 2 and results[0]["data"] == results[1]["data"]


def test_list_shows_and_prune_removes_but_not_what_a_run_uses(corpus_dir):
    assert _prepare(corpus_dir).returncode == 0
    listed = _manage(corpus_dir, "--list")
    assert listed.returncode == 0, listed.stderr.decode()
    out = listed.stdout.decode()
    pairs = json.loads((corpus_dir / "data" / "prepared" / "enxx" / "meta.json").read_text())
    assert re.search(rf"prepared/enxx  named, {pairs['pairs']} pairs, [\d.]+ KB\n", out)
    assert "spm/  " in out and "hashes/  " in out
    using = load_corpus(_on_prepared(corpus_dir), corpus_dir / "data", seed=0)
    refused = _manage(corpus_dir, "--prune", "enxx")
    lines = refused.stderr.decode().strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1
    assert lines[0].startswith("error: ") and "is in use by a training run" in lines[0]
    assert (corpus_dir / "data" / "prepared" / "enxx" / "meta.json").is_file()
    del using
    gc.collect()  # the run has ended: its hold is gone
    pruned = _manage(corpus_dir, "--prune", "enxx")
    assert pruned.returncode == 0 and "removed " in pruned.stdout.decode()
    assert not (corpus_dir / "data" / "prepared" / "enxx").exists()
    missing = _manage(corpus_dir, "--prune", "enxx")
    assert missing.returncode == 2 and "is not a prepared corpus" in missing.stderr.decode()


def test_prepare_has_a_real_help(tmp_path):
    done = run_script("prepare", "--help", cwd=tmp_path)
    out = done.stdout.decode()
    assert done.returncode == 0 and out.startswith("mtx-prepare: ") and "--prune NAME" in out
    assert "data: files, multi30k_de_en" in out and "${" not in out
    assert not any(tmp_path.iterdir())
