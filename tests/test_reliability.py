"""Never lose a run: kill -9 at any moment and resume reproduces the uninterrupted run; damaged
checkpoints are skipped or refused with one clear line; nothing a run did not write is loaded."""
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

# Three short epochs of the toy task, a resume point at every log point (5 steps): the kills
# below land inside epochs and resume mid-epoch. The precision is fixed: the runs compared are
# separate runs, and `auto` could choose differently in each on a machine near the threshold.
SMOKE = ["experiment=smoke", "train.max_epochs=3", "train.eval_bleu=false", "train.keep_last=3",
         "train.log_every=5", "train.save_every_minutes=0", "model.dropout=0.1",
         "model.attention_dropout=0.1", "train.precision=float32"]
STEPS = 3 * 39  # updates of the uninterrupted run (39 batches an epoch)


def _train(run_dir, *extra, kill_at=None):
    env = dict(os.environ)
    env.pop("MTX_KILL_AT", None)
    if kill_at:
        env["MTX_KILL_AT"] = kill_at
    return subprocess.Popen([sys.executable, str(ROOT / "scripts" / "train.py"), *SMOKE,
                             f"hydra.run.dir={run_dir}", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=env)


def _finish(process, code=0):
    err = process.stderr.read().decode()
    assert process.wait(timeout=600) == code, err[-3000:]
    return err


def _outcome(run_dir):
    """What must not depend on interruptions: the last epoch's parameter and optimizer files
    (content-addressed: their SHA-256), the test translations and the per-epoch records."""
    manifest = json.loads((run_dir / "checkpoints" / "epoch_003.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    hyps = (run_dir / "test_2016_flickr.hyp.tgt").read_text()
    return manifest["sha256"], [(m["epoch"], m["step"], m["train/loss"]) for m in metrics], hyps


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full") / "run"
    _finish(_train(run_dir))
    return _outcome(run_dir)


KILL_SEED = 20261130
_draw = random.Random(KILL_SEED)
KILLS = [f"step:{_draw.randint(1, STEPS)}",           # inside a step, anywhere in the run
         f"checkpoint:{_draw.randint(2, 20)}",        # data files written, manifest not yet
         f"evaluation:{_draw.randint(1, 3)}",         # the end-of-epoch validation
         f"validated:{_draw.randint(1, 3)}",          # epoch_NNN and best written, latest not
         "final_translation:1"]                       # translating the test split at the end


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", KILLS)
def test_kill_9_then_resume_gives_the_uninterrupted_run(kill_at, uninterrupted, tmp_path):
    """kill -9 at the moment ``kill_at`` (drawn with seed KILL_SEED), then `train.resume=true`:
    the same parameters, optimizer state, records and translations as never interrupted."""
    print(f"killing at {kill_at} (seed {KILL_SEED})")
    run_dir = tmp_path / "run"
    _finish(_train(run_dir, kill_at=kill_at), -signal.SIGKILL)
    err = _finish(_train(run_dir, "train.resume=true"))
    assert "Traceback" not in err
    assert _outcome(run_dir) == uninterrupted


@pytest.mark.slow
def test_a_killed_sweep_resumes_into_the_same_folders(tmp_path):
    """`make ablate` killed in its second run, then the same command with train.resume=true:
    the finished run is left as it was (not trained or evaluated again), the killed one resumes
    in its folder, the one never started starts fresh (with a warning), and no folder is added
    for the resume."""
    sweep = tmp_path / "sweep"
    command = [sys.executable, str(ROOT / "scripts" / "train.py"), "-m", *SMOKE,
               "train.max_epochs=1", "model.num_heads=1,2,4", f"hydra.sweep.dir={sweep}"]
    env = {k: v for k, v in os.environ.items() if k != "MTX_KILL_AT"}
    killed = subprocess.run(command, capture_output=True, cwd=ROOT,
                            env={**env, "MTX_KILL_AT": "step:50"}, timeout=600)  # 39 steps a run
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-3000:]
    first, second = sorted(p for p in sweep.iterdir() if p.is_dir())
    finished = (first / "report.json").stat().st_mtime_ns
    assert not (second / "report.json").exists()
    resumed = subprocess.run([*command, "train.resume=true"], capture_output=True, cwd=ROOT,
                             env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr.decode()[-3000:]
    runs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert runs[:2] == [first, second] and len(runs) == 3
    assert "model.num_heads=4" in runs[2].name and "resume" not in runs[2].name
    assert (first / "report.json").stat().st_mtime_ns == finished  # not evaluated again
    assert "had finished: nothing left to train" in (first / "train.log").read_text()
    assert "resumed from" in (second / "train.log").read_text()
    assert "a new run starts there" in (runs[2] / "train.log").read_text()
    for run in runs:
        epochs = [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").open()]
        assert epochs == [1] and (run / "report.json").is_file(), run


@pytest.mark.slow
def test_resume_skips_a_damaged_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    _finish(_train(run_dir, "train.max_epochs=2"))
    latest = json.loads((run_dir / "checkpoints" / "latest.json").read_text())
    params = run_dir / "checkpoints" / latest["files"]["params"]  # also epoch_002's
    params.write_bytes(params.read_bytes()[:1000])
    _finish(_train(run_dir, "train.resume=true", "train.max_epochs=2"))
    log = (run_dir / "train.log").read_text()
    assert "skipping latest: " in log and "skipping epoch_002: " in log
    assert "resumed from epoch_001" in log


@pytest.mark.slow
@pytest.mark.parametrize("override, named", [
    ("model.num_hiddens=64", "model.num_hiddens"),
    ("train.batch_tokens=512", "train.batch_tokens=1024 (now 512)")])
def test_resume_with_another_config_is_refused_before_anything_is_written(override, named,
                                                                           tmp_path):
    run_dir = tmp_path / "run"
    _finish(_train(run_dir, "train.max_epochs=1"))
    # not compared: train.log (Hydra appends the error line to the run's log) and .lock (it names
    # whichever process holds the run directory, here the refused one)
    def run_files():
        return {p: p.read_bytes() for p in run_dir.rglob("*")
                if p.is_file() and p.name not in ("train.log", ".lock")}
    before = run_files()
    err = _finish(_train(run_dir, "train.resume=true", override), 2)
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and named in last and "Traceback" not in err
    assert run_files() == before


@pytest.mark.slow
def test_a_new_run_into_a_used_directory_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    _finish(_train(run_dir, "train.max_epochs=1"))
    err = _finish(_train(run_dir, "train.max_epochs=1"), 2)
    assert "already holds a run" in err.strip().splitlines()[-1]
    killed_early = tmp_path / "killed_early"  # killed before its first checkpoint: run.json only
    killed_early.mkdir()
    (killed_early / "run.json").write_bytes((run_dir / "run.json").read_bytes())
    err = _finish(_train(killed_early, "train.max_epochs=1"), 2)
    assert "already holds a run" in err.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_tampered_optimizer_state_is_never_unpickled(tmp_path):
    """Resume verifies every `.states` file against its manifest before MXNet unpickles it: a
    pickle that would create a file when loaded is refused, and the file is never created."""
    run_dir = tmp_path / "run"
    _finish(_train(run_dir, "train.max_epochs=1"))
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    for states in (run_dir / "checkpoints").glob("*.states"):
        states.write_bytes(pickle.dumps(Payload()))
    err = _finish(_train(run_dir, "train.resume=true", "train.max_epochs=2"), 2)
    assert "checkpoints can be resumed (the newest: " in err.strip().splitlines()[-1]
    assert not marker.exists()


STOPS = [f"step:{_draw.randint(1, STEPS)}:SIGTERM",   # between two steps
         f"step:{_draw.randint(1, STEPS)}:SIGINT",    # Ctrl-C, likewise
         f"evaluation:{_draw.randint(1, 3)}:SIGUSR1", # Slurm's --signal, in an epoch's evaluation
         "evaluation:4:SIGTERM",                      # choosing the final checkpoint
         "final_translation:1:SIGTERM"]               # translating the test split at the end


@pytest.mark.slow
@pytest.mark.parametrize("stop_at", STOPS)
def test_a_stop_signal_then_resume_gives_the_uninterrupted_run(stop_at, uninterrupted, tmp_path):
    """A scheduler's SIGTERM or SIGUSR1, or Ctrl-C, at the moment ``stop_at`` (drawn with seed
    KILL_SEED): one line saying how to continue, exit 75 (Ctrl-C: ``interrupted``, 130); then
    `train.resume=true` ends as if never stopped, without redoing finished test sets."""
    print(f"stopping at {stop_at} (seed {KILL_SEED})")
    run_dir, signal_name = tmp_path / "run", stop_at.rsplit(":", 1)[1]
    code, line = (130, "interrupted") if signal_name == "SIGINT" else (
        75, f"stopped by {signal_name}: ")
    err = _finish(_train(run_dir, kill_at=stop_at), code)
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(line)
    assert "train.resume=true" in (run_dir / "train.log").read_text()
    _finish(_train(run_dir, "train.resume=true"))
    assert _outcome(run_dir) == uninterrupted
    if stop_at.startswith("final_translation"):
        assert ("the final report goes on after the checkpoint choice, test_2016_flickr"
                in (run_dir / "train.log").read_text())


@pytest.mark.slow
def test_sigterm_from_outside_saves_the_step_it_stopped_at(uninterrupted, tmp_path):
    """SIGTERM from another process (as Slurm or Kubernetes send it), after the first epoch:
    a resume point at the next step boundary, exit 75, and the resumed run as never stopped."""
    run_dir = tmp_path / "run"
    run = _train(run_dir)
    first = run_dir / "checkpoints" / "epoch_001.json"
    deadline = time.time() + 240
    while not first.exists() and time.time() < deadline and run.poll() is None:
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    err = _finish(run, 75)
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith(
        "stopped by SIGTERM: step ")
    _finish(_train(run_dir, "train.resume=true"))
    assert _outcome(run_dir) == uninterrupted


def test_full_disk_keeps_the_previous_checkpoint(tiny_cfg, tmp_path, monkeypatch):
    import dataclasses
    import errno
    import mxnet as mx
    from mtx.errors import FileWriteError
    from mtx.model.transformer import Transformer
    from mtx.runs.rundir import RunDir
    run = RunDir(tmp_path)
    model = Transformer(tiny_cfg)
    model.initialize()
    run.write_json("model.json", dataclasses.asdict(tiny_cfg))
    run.checkpoints.save("best", model, step=1)
    before = {p.name: p.read_bytes() for p in run.checkpoints.folder.iterdir()}

    def no_space(filename, *args, **kwargs):
        with open(filename, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(model, "save_parameters", no_space)
    with pytest.raises(FileWriteError, match="No space left on device.*previous file is kept"):
        run.checkpoints.save("best", model, step=2)
    assert {p.name: p.read_bytes() for p in run.checkpoints.folder.iterdir()} == before
    assert run.checkpoints.verify("best")["step"] == 1
    run.checkpoints.load(run.checkpoints.verify("best"), Transformer(tiny_cfg), mx.cpu())


def test_a_crash_between_files_and_manifest_keeps_the_old_unit(tiny_cfg, tmp_path, monkeypatch):
    """The manifest is the commit point: new data files without their manifest leave the
    previous checkpoint whole (never a new .params paired with an old description)."""
    import dataclasses
    from mtx.runs import faults
    from mtx.model.transformer import Transformer
    from mtx.runs.rundir import RunDir
    run = RunDir(tmp_path)
    model = Transformer(tiny_cfg)
    model.initialize()
    run.write_json("model.json", dataclasses.asdict(tiny_cfg))
    first = run.checkpoints.save("best", model, step=1)
    for p in model.collect_params().values():
        p.set_data(p.data() + 1)

    def crash(name):
        if name == "checkpoint":
            raise RuntimeError("power cut")
    monkeypatch.setattr(faults, "point", crash)
    with pytest.raises(RuntimeError):
        run.checkpoints.save("best", model, step=2)
    assert run.checkpoints.verify("best")["sha256"] == first["sha256"]
    run.checkpoints.collect_garbage()  # the orphaned new files go; the old unit stays
    assert sorted(p.name for p in run.checkpoints.folder.iterdir()) == sorted(
        ["best.json", first["files"]["params"]])


def test_non_finite_steps_are_skipped_whole_and_counted():
    import math
    import mxnet as mx
    import numpy as onp
    from mxnet import gluon, np
    from mtx.errors import TrainingError
    from mtx.training.optimizer import gradient_scale
    from mtx.training.state import TrainState
    from mtx.training.steps import LossMeter
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
    state = TrainState()
    meter = LossMeter(state, max_nonfinite=3)
    meter.add(np.array(2.0), np.array(True), 4)
    meter.add(np.array(math.nan), np.array(False), 4)
    meter.flush()
    assert (state.epoch_loss, state.epoch_skipped) == (0.5, 1)
    for _ in range(3):
        meter.add(np.array(math.inf), np.array(False), 4)
    with pytest.raises(TrainingError, match="not finite for 4 steps in a row"):
        meter.flush()
