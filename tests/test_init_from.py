"""init_from=<run>: a new run that starts from another run's weights and tokenizer."""
import json

import pytest

from conftest import run_command
from tests.test_cli import assert_one_line


def _fine_tune(toy_run, run_dir, *overrides):
    return run_command("train", "experiment=toy", "train.precision=float32", "train.max_epochs=1",
                       f"init_from={toy_run}", f"hydra.run.dir={run_dir}", *overrides,
                       cwd=run_dir.parent, env={"MTX_DATA_DIR": str(run_dir.parent / "data")})


def test_a_run_started_from_another_begins_where_it_ended_and_says_so(toy_run, tmp_path):
    """One epoch from the trained toy run translates about as well as the run (one epoch from
    scratch cannot), with the run's tokenizer; run.json and report.json name where it started.
    It fine-tunes at a quarter of the toy's peak rate, as one fine-tunes: the optimizer starts
    anew, and its first 39 steps at the toy's own rate took 10-20 BLEU off the memorised task."""
    done = _fine_tune(toy_run, tmp_path / "tuned", "train.lr=0.0005")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads((tmp_path / "tuned" / "report.json").read_text())
    parent = json.loads((toy_run / "report.json").read_text())
    started = {"run": str(toy_run), "checkpoint": report["init_from"]["checkpoint"]}
    assert report["init_from"] == started and report["epochs"] == 1
    assert json.loads((tmp_path / "tuned" / "run.json").read_text())["init_from"] == started
    score = report["scores"]["test_2016_flickr"]["sacrebleu"]["score"]
    assert score > parent["scores"]["test_2016_flickr"]["sacrebleu"]["score"] - 5
    scratch_dir = tmp_path / "scratch"
    scratch = run_command("train", "experiment=toy", "train.precision=float32",
                          "train.max_epochs=1", f"hydra.run.dir={scratch_dir}", cwd=tmp_path,
                          env={"MTX_DATA_DIR": str(tmp_path / "data")})
    assert scratch.returncode == 0, scratch.stderr.decode()[-3000:]
    from_scratch = json.loads((scratch_dir / "report.json").read_text())
    assert from_scratch["init_from"] is None
    assert score > from_scratch["scores"]["test_2016_flickr"]["sacrebleu"]["score"] + 20


@pytest.mark.parametrize("overrides, message", [
    (["model.num_hiddens=32", "model.num_heads=4"],
     r"error: init_from=.* has model.num_hiddens=64 \(now 32\): a fine-tuning run keeps the model"),
    (["init_from=/nowhere/run"], r"error: init_from: /nowhere/run is not a directory"),
    (["data.tgt_lang=fr"], r"error: init_from=.* translates src->tgt, this run's data src->fr: "
                           r"a fine-tuning run keeps its parent's languages .*; give "
                           r"data.src_lang=src data.tgt_lang=tgt$"),
])
def test_a_start_that_cannot_be_is_one_line(toy_run, tmp_path, overrides, message):
    import re
    done = _fine_tune(toy_run, tmp_path / "run", *overrides)
    line = assert_one_line(done.stderr, done.returncode, 2)
    assert re.match(message, line), line
    assert not (tmp_path / "run" / "checkpoints").exists()
