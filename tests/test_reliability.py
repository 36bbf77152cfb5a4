"""Never lose a run: kill -9 and resume reproduces the uninterrupted run; damaged checkpoints
are skipped or refused with one clear line."""
import random
import signal
import subprocess
import sys
import time

import numpy as onp
from mxnet import npx

from tests.conftest import ROOT

SMOKE = ["experiment=smoke", "train.max_epochs=4", "train.eval_bleu=false", "train.keep_last=4"]


def _train(run_dir, *extra):
    return subprocess.Popen([sys.executable, str(ROOT / "scripts" / "train.py"), *SMOKE,
                             f"hydra.run.dir={run_dir}", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)


def _params(path):
    return {k: v.asnumpy() for k, v in npx.load(str(path)).items()}


def test_kill_9_then_resume_gives_the_uninterrupted_parameters(tmp_path):
    full = _train(tmp_path / "full")
    assert full.wait(timeout=300) == 0, full.stderr.read().decode()[-2000:]

    killed = _train(tmp_path / "killed")
    first = tmp_path / "killed" / "checkpoints" / "epoch_001.params"
    deadline = time.time() + 240
    while not first.exists() and time.time() < deadline and killed.poll() is None:
        time.sleep(0.05)
    time.sleep(random.uniform(0.0, 1.0))
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL  # it was still training
    resumed = _train(tmp_path / "killed", "train.resume=true")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()[-2000:]

    expected = _params(tmp_path / "full" / "checkpoints" / "epoch_004.params")
    actual = _params(tmp_path / "killed" / "checkpoints" / "epoch_004.params")
    assert expected.keys() == actual.keys()
    for name in expected:
        assert onp.array_equal(expected[name], actual[name]), name
    epochs = [line for line in (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()]
    assert len(epochs) == 4  # a redone epoch is recorded once


def test_resume_skips_a_truncated_checkpoint(tmp_path):
    run = _train(tmp_path / "run", "train.max_epochs=2")
    assert run.wait(timeout=300) == 0
    last = tmp_path / "run" / "checkpoints" / "epoch_002.params"
    last.write_bytes(last.read_bytes()[:1000])
    resumed = _train(tmp_path / "run", "train.resume=true", "train.max_epochs=2")
    assert resumed.wait(timeout=300) == 0
    log = (tmp_path / "run" / "train.log").read_text()
    assert "skipping epoch_002.params" in log and "resumed from epoch_001.params" in log


def test_resume_with_another_config_is_refused(tmp_path):
    run = _train(tmp_path / "run", "train.max_epochs=1")
    assert run.wait(timeout=300) == 0
    other = _train(tmp_path / "run", "train.resume=true", "model.num_hiddens=64")
    assert other.wait(timeout=300) == 2
    err = other.stderr.read().decode().strip().splitlines()
    assert err[-1].startswith("error: ") and "no intact checkpoint matches" in err[-1]
