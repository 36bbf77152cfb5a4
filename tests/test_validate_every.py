"""Validation by updates (`train.validate_every`): validations, the best checkpoint, averaging,
patience and the metrics records counted in validations, whatever the epochs; resumes between
two validations of one epoch as if never stopped."""
import json
import signal

import numpy as onp
import pytest

from mtx.config import ConfigError, TrainConfig
from mtx.runs import faults
from mtx.training import choose_final
from tests.conftest import run_script
from tests.test_reliability import _finish, _train
from tests.test_rundir import _fit, _params, _stop_after


def _out_of_time_after(fit, steps):
    """The budget runs out at update ``steps`` (a clock that reads the steps, not the time)."""
    fit.clock.out_of_time = lambda minutes=None: fit.state.step >= steps


def _batches_an_epoch(tmp_path):
    fit = _fit(tmp_path / "count", max_epochs=1)
    fit.run()
    return fit.state.step


def test_validations_come_every_n_updates_and_at_the_end_across_epochs(tmp_path):
    per_epoch = _batches_an_epoch(tmp_path)
    fit = _fit(tmp_path, max_epochs=2, validate_every=4, keep_last=100)
    fit.run()
    total = 2 * per_epoch
    steps = [r["step"] for r in fit.run_dir.records.metrics()]
    expected = list(range(4, total + 1, 4)) + ([total] if total % 4 else [])
    assert steps == expected
    assert fit.run_dir.checkpoints.validated_names() == [f"step_{s:06d}" for s in expected]
    epochs = [r["epoch"] for r in fit.run_dir.records.metrics()]
    assert epochs == [1 if s <= per_epoch else 2 for s in expected]
    assert fit.state.validated_step == total and fit.state.epoch == 2


def test_a_run_that_never_ends_an_epoch_picks_its_best_validation_and_averages(tmp_path):
    per_epoch = _batches_an_epoch(tmp_path)
    assert per_epoch > 10, "the toy epoch must outlast the budget below"
    fit = _fit(tmp_path, max_epochs=5, validate_every=3, average_last=3, keep_last=3)
    _out_of_time_after(fit, 10)
    losses = iter([3.0, 2.0, 2.5, 2.6])  # validations at 3, 6, 9 and 10 (the end): 6 is best
    fit.evaluate = lambda split: (next(losses), None)
    fit.run()
    assert fit.state.epoch == 0 and fit.state.step == 10
    store = fit.run_dir.checkpoints
    assert store.validated_names() == ["step_000006", "step_000009", "step_000010"]
    assert store.verify("best")["state"]["step"] == 6
    scores = iter([-2.0, -1.0])  # best, then the average of the last 3: better
    fit.evaluate = lambda split: (-next(scores), None)
    choice = choose_final(fit)
    assert choice["checkpoint"] == "average" and choice["averaged"] == 3
    assert store.verify("average")["averaged"] == ["step_000006", "step_000009", "step_000010"]


def test_patience_counts_validations_inside_one_epoch(tmp_path):
    fit = _fit(tmp_path, max_epochs=5, validate_every=2, patience=2)
    losses = iter([3.0, 2.0, 2.5, 2.4, 1.0])  # improves twice, then two worse validations
    fit.evaluate = lambda split: (next(losses), None)
    fit.run()
    assert fit.state.step == 8 and fit.state.stale_validations == 2 and fit.state.epoch == 0
    assert [r["step"] for r in fit.run_dir.records.metrics()] == [2, 4, 6, 8]
    resumed = _fit(tmp_path, max_epochs=5, validate_every=2, patience=2, resume=True)
    resumed.evaluate = lambda split: pytest.fail("trained again after its early stop")
    assert resumed.restore() and resumed.run() is not None and resumed.state.step == 8


def _same_run(straight, resumed):
    assert resumed.state.step == straight.state.step
    for name, value in _params(straight.model).items():
        assert onp.array_equal(value, _params(resumed.model)[name]), name
    drop = ("wall_minutes", "train/tok_s")
    records = [[{k: v for k, v in r.items() if k not in drop} for r in run.run_dir.records.metrics()]
               for run in (straight, resumed)]
    assert records[0] == records[1] and len(records[0]) >= 3


SETTINGS = dict(max_epochs=1, validate_every=4, log_every=3, save_every_minutes=0)


def test_a_stop_between_two_validations_of_one_epoch_resumes_as_never_stopped(tmp_path):
    """Ctrl-C at update 6, between the validations at 4 and 8 of the first epoch: the resumed
    run reaches the straight run's parameters and validation records."""
    straight = _fit(tmp_path / "a", **SETTINGS)
    straight.run()
    first = _fit(tmp_path / "b", **SETTINGS)
    _stop_after(first, 6)
    with pytest.raises(KeyboardInterrupt):
        first.run()
    resumed = _fit(tmp_path / "b", resume=True, **SETTINGS)
    assert resumed.restore() and resumed.state.step == 6 and resumed.state.validated_step == 4
    resumed.run()
    _same_run(straight, resumed)


def test_a_crash_inside_a_validation_redoes_it_and_drops_its_record(tmp_path, monkeypatch):
    """A crash after the second validation's record and checkpoint, before `latest` names it
    (as kill -9 there): the resume starts from the log point before it, drops the record and
    validates again, as the straight run did."""
    straight = _fit(tmp_path / "a", **SETTINGS)
    straight.run()
    first = _fit(tmp_path / "b", **SETTINGS)
    monkeypatch.setattr(faults, "_arrivals", {})
    monkeypatch.setenv("MTX_KILL_AT", "validated:2:RAISE")
    with pytest.raises(faults.InjectedFault):
        first.run()
    monkeypatch.delenv("MTX_KILL_AT")
    assert [r["step"] for r in first.run_dir.records.metrics()] == [4, 8]
    resumed = _fit(tmp_path / "b", resume=True, **SETTINGS)
    assert resumed.restore() and resumed.state.step == 6
    assert [r["step"] for r in resumed.run_dir.records.metrics()] == [4]
    resumed.run()
    _same_run(straight, resumed)


@pytest.mark.parametrize("every", [0, -5])
def test_validate_every_below_one_is_one_line(every, tmp_path):
    with pytest.raises(ConfigError, match=r"^train.validate_every="):
        TrainConfig(validate_every=every)
    done = run_script("train", "experiment=smoke", f"train.validate_every={every}",
                      f"hydra.run.dir={tmp_path / 'run'}")
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: train.validate_every={every}: give the updates between")


def test_without_validate_every_the_epochs_validate_as_before(tmp_path):
    fit = _fit(tmp_path, max_epochs=2, log_every=4)
    fit.run()
    assert [r["epoch"] for r in fit.run_dir.records.metrics()] == [1, 2]
    assert fit.run_dir.checkpoints.validated_names() == ["epoch_001", "epoch_002"]


# The smoke run of the kill tests (tests/test_reliability.py), validating every 20 updates: at
# 20, 40, ..., 100 across its three epochs of 39 batches, and at the end (117).
EVERY = "train.validate_every=20"


def _outcome_by_updates(run_dir):
    """What must not depend on interruptions: the last validation's parameter and optimizer
    files, the validation records and the test translations."""
    manifest = json.loads((run_dir / "checkpoints" / "step_000117.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return (manifest["sha256"], [(m["step"], m["epoch"], m["train/loss"], m["valid/loss"])
                                 for m in metrics],
            (run_dir / "test_2016_flickr.hyp.tgt").read_text())


@pytest.fixture(scope="module")
def uninterrupted_by_updates(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full") / "run"
    _finish(_train(run_dir, EVERY))
    outcome = _outcome_by_updates(run_dir)
    assert [step for step, *_ in outcome[1]] == [20, 40, 60, 80, 100, 117]
    return outcome


@pytest.mark.slow
@pytest.mark.parametrize("kill_at, resumed_at", [("step:50", 49), ("validated:3", 59)])
def test_kill_9_between_two_validations_of_one_epoch_then_resume(kill_at, resumed_at,
                                                                 uninterrupted_by_updates,
                                                                 tmp_path):
    """kill -9 at update 50 (the second epoch, between its validations at 40 and 60), or inside
    the validation at 60 (its checkpoint and `best` written, `latest` not): the run resumes from
    the log point before (every 5 batches of the epoch) and ends as the uninterrupted one."""
    run_dir = tmp_path / "run"
    _finish(_train(run_dir, EVERY, kill_at=kill_at), -signal.SIGKILL)
    err = _finish(_train(run_dir, EVERY, "train.resume=true"))
    assert "Traceback" not in err
    assert (f"resumed from latest (epoch 1, batch {resumed_at - 39} of the next, step "
            f"{resumed_at})") in (run_dir / "train.log").read_text()
    assert _outcome_by_updates(run_dir) == uninterrupted_by_updates
