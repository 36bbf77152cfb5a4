"""Never lose a run: kill -9 and resume reproduces the uninterrupted run; damaged checkpoints
are skipped or refused with one clear line."""
import random
import signal
import subprocess
import sys
import time

import numpy as onp
from mxnet import npx

from mtx.errors import FileWriteError
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


def test_ctrl_c_saves_and_exits_cleanly(tmp_path):
    run = _train(tmp_path / "run", "train.max_epochs=50")
    first = tmp_path / "run" / "checkpoints" / "epoch_001.params"
    deadline = time.time() + 240
    while not first.exists() and time.time() < deadline and run.poll() is None:
        time.sleep(0.05)
    run.send_signal(signal.SIGINT)
    assert run.wait(timeout=60) == 130
    err = run.stderr.read().decode()
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted"
    assert (tmp_path / "run" / "checkpoints" / "interrupted.params").is_file()


def test_full_disk_keeps_the_previous_checkpoint(tiny_cfg, tmp_path, monkeypatch):
    import errno
    import pytest
    from mtx import checkpoint as ckpt
    from mtx.model import Transformer
    model = Transformer(tiny_cfg)
    model.initialize()
    path = tmp_path / "best.params"
    ckpt.save_params(model, path, step=1)
    before = path.read_bytes()

    def no_space(filename, *args, **kwargs):
        with open(filename, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(model, "save_parameters", no_space)
    with pytest.raises(FileWriteError, match="No space left on device.*previous file is kept"):
        ckpt.save_params(model, path, step=2)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.json", "best.params"]


def test_non_finite_steps_are_skipped_whole_and_counted():
    import math
    import mxnet as mx
    import pytest
    from mxnet import gluon, np
    from mtx.optimizer import gradient_scale
    from mtx.errors import TrainingError
    from mtx.trainer import LossMeter
    param = mx.gluon.Parameter("w", shape=(3,))
    param.initialize()
    param.grad()[:] = np.array([3.0, 4.0, 0.0])
    scale, finite = gradient_scale([param.grad()], 1.0, 1)
    assert finite.asscalar() == 1.0 and abs(scale.asscalar() - 0.2) < 1e-5  # norm 5 clipped to 1
    scale, _ = gradient_scale([param.grad()], 10.0, 2)   # per-token norm 2.5: no clipping
    assert abs(scale.asscalar() - 0.5) < 1e-6
    trainer = gluon.Trainer([param], "guardedadam", {"learning_rate": 0.1}, update_on_kvstore=False)
    trainer.optimizer.scales[mx.cpu()] = scale
    param.data()._fresh_grad = True                      # as if backward had written the gradient
    trainer.update(1)                                    # a finite step moves weights and moments
    moved = param.data().asnumpy().copy()
    moments = [m.asnumpy().copy() for m in trainer._updaters[0].states[0]]
    assert (moments[0] != 0).any()
    param.grad()[:] = np.array([1.0, math.nan, 2.0])
    scale, finite = gradient_scale([param.grad()], 1.0, 1)
    assert finite.asscalar() == 0.0 and scale.asscalar() == 0.0
    trainer.optimizer.scales[mx.cpu()] = scale
    param.data()._fresh_grad = True
    trainer.update(1)                                    # the non-finite step changes nothing
    assert onp.array_equal(param.data().asnumpy(), moved)
    for before, after in zip(moments, trainer._updaters[0].states[0]):
        assert onp.array_equal(before, after.asnumpy())
    meter = LossMeter(max_nonfinite=3)
    meter.add(np.array(2.0), np.array(True), 4)
    meter.add(np.array(math.nan), np.array(False), 4)
    meter.flush()
    assert (meter.mean, meter.skipped) == (0.5, 1)
    for _ in range(3):
        meter.add(np.array(math.inf), np.array(False), 4)
    with pytest.raises(TrainingError, match="not finite for 4 steps in a row"):
        meter.flush()
