"""Per-step records (steps.jsonl) and the TensorBoard event files of a run: what they hold, that
they agree with metrics.jsonl, and that a resume neither duplicates nor loses a point."""
import logging
import math
import struct
import sys

import mxnet as mx
import pytest
import tensorboardX  # a dependency of mtx (pyproject.toml): missing, the suite fails
from mxnet import np

import mtx.runs.tensorboard
from mtx.runs import faults
from mtx.config import DataConfig, DecodeConfig, RunConfig, TrainConfig
from mtx.data.corpus import load_corpus
from mtx.runs.rundir import RunDir
from mtx.training.schedule import inverse_sqrt_warmup
from mtx.training import new_fit
from mtx.training.state import TrainState
from mtx.training.steps import LossMeter
from tests.conftest import model_config

LOG_EVERY = 3
STEP_TAGS = {"train/loss", "train/lr", "train/tok_s"}
EPOCH_TAGS = {"train/epoch_loss", "train/epoch_tok_s", "valid/loss", "valid/bleu"}


def read_events(run_dir):
    """({tag: [(step, value)]}, steps of the session starts) of the run directory's one event
    file, read record by record: 8-byte length, its 4-byte CRC, an Event, the Event's CRC."""
    from tensorboardX.proto.event_pb2 import Event, SessionLog
    files = sorted(run_dir.glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    data, pos, scalars, starts = files[0].read_bytes(), 0, {}, []
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        event = Event.FromString(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
        if event.HasField("session_log") and event.session_log.status == SessionLog.START:
            starts.append(event.step)
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    assert pos == len(data)  # no record cut off: the file was flushed and closed
    return scalars, starts


def _record(step, loss, epoch=1):
    return {"step": step, "epoch": epoch, "train/loss": loss, "tokens": 10,
            "train/lr": step / 1000, "train/tok_s": 100.0, "wall_minutes": 0.1}


# -- the record of a window of steps ----------------------------------------------------------
def test_a_step_record_is_the_token_weighted_loss_of_its_window():
    state = TrainState(step=7, epoch=2, epoch_job_tokens=50, epoch_seconds=2.0)
    meter = LossMeter(state, max_nonfinite=3)
    assert meter.record(0.5, 1.0) is None  # no step since the last record
    for nll, finite, tokens in ((6.0, True, 4), (math.nan, False, 5), (2.0, True, 4)):
        state.step += 1
        state.epoch_job_tokens += tokens
        meter.add(np.array(nll), np.array(finite), tokens)
    meter.flush()
    state.epoch_seconds += 0.5
    record = meter.record(0.25, 3.14159)
    assert record == {"step": 10, "epoch": 3, "train/loss": 1.0, "tokens": 8, "train/lr": 0.25,
                      "train/tok_s": 26.0, "wall_minutes": 3.14}
    assert (state.epoch_loss, state.epoch_skipped) == (1.0, 1)
    state.step += 1
    meter.add(np.array(math.inf), np.array(False), 4)
    meter.flush()
    assert meter.record(0.25, 4.0)["train/loss"] is None  # every step skipped: no loss
    assert meter.record(0.25, 4.0) is None


def test_metric_keys_become_tags_and_epoch_records_keep_theirs_apart():
    step = dict(mtx.runs.tensorboard.scalars(_record(6, 2.5)))
    assert step == {"train/loss": 2.5, "train/lr": 0.006, "train/tok_s": 100.0}
    epoch = {"step": 6, "epoch": 1, "train/loss": 2.4, "valid/loss": 2.0, "valid/bleu": None,
             "train/tok_s": 90.0, "wall_minutes": 0.2}
    assert dict(mtx.runs.tensorboard.scalars(epoch, epoch=True)) == {
        "train/epoch_loss": 2.4, "valid/loss": 2.0, "train/epoch_tok_s": 90.0}


# -- the run directory's records and events, without training --------------------------------
def test_events_mirror_the_records_and_a_resume_starts_them_anew(tmp_path):
    run = RunDir(tmp_path)
    for step, loss in ((3, 4.0), (6, 3.0)):
        run.records.append_step(_record(step, loss))
    run.records.append_metrics({"step": 6, "epoch": 1, "train/loss": 3.5, "valid/loss": 3.2,
                        "valid/bleu": 1.5, "train/tok_s": 99.0, "wall_minutes": 0.2})
    run.records.append_step(_record(9, 2.0, epoch=2))
    run.records.append_step(_record(12, 1.0, epoch=2))
    run.records.close()
    scalars, starts = read_events(tmp_path)
    assert scalars["train/loss"] == [(3, 4.0), (6, 3.0), (9, 2.0), (12, 1.0)]
    assert scalars["valid/bleu"] == [(6, 1.5)] and starts == [0]
    run.records.keep_until(9, lambda r: r["epoch"] <= 1)  # resumed at step 9: 12 is redone
    run.records.append_step(_record(12, 1.5, epoch=2))
    run.records.close()
    assert [(r["step"], r["train/loss"]) for r in run.records.steps()] == [
        (3, 4.0), (6, 3.0), (9, 2.0), (12, 1.5)]
    scalars, starts = read_events(tmp_path)  # one file: the old one is gone
    assert scalars["train/loss"] == [(3, 4.0), (6, 3.0), (9, 2.0), (12, 1.5)]
    assert scalars["train/lr"] == [(s, pytest.approx(s / 1000)) for s in (3, 6, 9, 12)]
    assert scalars["valid/loss"] == [(6, pytest.approx(3.2))] and starts == [0]
    assert {"epoch", "step", "tokens", "wall_minutes"}.isdisjoint(scalars)


def test_without_tensorboardX_the_records_go_on_after_one_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import tensorboardX fails
    monkeypatch.setattr(mtx.runs.tensorboard, "_missing_reported", [])
    run = RunDir(tmp_path)
    with caplog.at_level(logging.WARNING):
        run.records.append_step(_record(3, 4.0))
        run.records.close()
        run.records.append_step(_record(6, 3.0))
        RunDir(tmp_path).records.keep_until(6, lambda r: r["epoch"] <= 0)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "tensorboardX is not installed" in warnings[0].getMessage()
    assert [r["step"] for r in RunDir(tmp_path).records.steps()] == [3, 6]
    assert not list(tmp_path.glob("events.out.tfevents.*"))


@pytest.mark.parametrize("flush_seconds", [0, mtx.runs.tensorboard.FLUSH_SECONDS])
def test_an_event_file_on_a_full_disk_costs_one_warning_and_no_record(flush_seconds, tmp_path,
                                                                      monkeypatch, caplog, capfd):
    """The event file on a full disk (/dev/full), found at a flush after a record (0 s) or when
    the file is closed: one warning, no traceback from any thread, every record kept; more
    records than tensorboardX's queue holds (10) do not block."""
    monkeypatch.setattr(tensorboardX.record_writer, "open_file",
                        lambda path: open("/dev/full", "wb"))
    monkeypatch.setattr(mtx.runs.tensorboard, "FLUSH_SECONDS", flush_seconds)
    run = RunDir(tmp_path)
    steps = list(range(3, 3 * 30, 3))
    with caplog.at_level(logging.WARNING):
        for step in steps:
            run.records.append_step(_record(step, 1.0))
        run.records.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()
    assert [r["step"] for r in run.records.steps()] == steps
    assert "Traceback" not in capfd.readouterr().err


# -- training ---------------------------------------------------------------------------------
class Crash(Exception):
    """A process dying at a chosen moment (as MTX_KILL_AT does, but inside this process)."""


def _fit(run_dir, corpus, data_cfg, **train_settings):
    model_cfg = model_config(dropout=0.1, vocab_size=len(corpus.tokenizer))
    # save_every_minutes=0: a resume point at every log point
    train_cfg = TrainConfig(batch_tokens=256, max_epochs=2, warmup_steps=5, log_every=LOG_EVERY,
                            save_every_minutes=0, average_last=0, **train_settings)
    return new_fit(corpus, RunConfig(model=model_cfg, data=data_cfg, train=train_cfg, seed=5,
                                     decode=DecodeConfig(beam_size=1)), run_dir, [mx.cpu()])


@pytest.fixture(scope="module")
def toy_data(tmp_path_factory):
    data_cfg = DataConfig(name="toy", sizes=[300, 10, 10], max_pair_len=64)
    return load_corpus(data_cfg, tmp_path_factory.mktemp("cache"), 5), data_cfg


@pytest.fixture(scope="module")
def uninterrupted(toy_data, tmp_path_factory):
    """Two epochs of a tiny model on the toy task, log points every 3 steps (a few seconds)."""
    run_dir = tmp_path_factory.mktemp("full") / "run"
    _fit(run_dir, *toy_data).run()
    return run_dir


def _same_records(records):
    return [(r["step"], r["epoch"], r["tokens"], r["train/lr"], r["train/loss"]) for r in records]


def test_a_cooldown_brings_the_learning_rate_down_linearly_to_the_budgets_end(toy_data, tmp_path):
    """train.cooldown=1 over max_epochs=2: each step's lr is the warm-up schedule's times 1 -
    the budget spent at the last log point (or the epoch's start) before it."""
    fit = _fit(tmp_path / "run", *toy_data, cooldown=1.0)
    fit.run()
    run = RunDir(tmp_path / "run")
    steps, epochs = run.records.steps(), run.records.metrics()
    per_epoch = epochs[0]["step"]
    for r in steps:
        in_epoch = r["step"] - (r["epoch"] - 1) * per_epoch
        read_at = (in_epoch - 1) // LOG_EVERY * LOG_EVERY  # the last read before this step
        spent = (r["epoch"] - 1 + read_at / per_epoch) / 2
        assert r["train/lr"] == pytest.approx(inverse_sqrt_warmup(r["step"], fit.cfg.train.lr, 5)
                                              * (1 - spent))
    assert steps[0]["train/lr"] == inverse_sqrt_warmup(steps[0]["step"], fit.cfg.train.lr, 5)
    assert steps[-1]["train/lr"] < 0.1 * inverse_sqrt_warmup(steps[-1]["step"], fit.cfg.train.lr, 5)
    assert fit.pieces.trainer.learning_rate == pytest.approx(steps[-1]["train/lr"])


@pytest.mark.slow
def test_steps_jsonl_has_every_log_point_and_adds_up_to_the_epochs(uninterrupted):
    run = RunDir(uninterrupted)
    steps, epochs = run.records.steps(), run.records.metrics()
    assert [m["epoch"] for m in epochs] == [1, 2]
    expected, start = [], 0  # every log point inside an epoch, and the epoch's last step
    for epoch in epochs:
        inside = range(start + LOG_EVERY, epoch["step"], LOG_EVERY)
        expected += [(s, epoch["epoch"]) for s in inside]
        expected.append((epoch["step"], epoch["epoch"]))
        start = epoch["step"]
    assert [(r["step"], r["epoch"]) for r in steps] == expected and len(expected) >= 6
    train_cfg = TrainConfig(warmup_steps=5)
    for r in steps:
        assert math.isfinite(r["train/loss"]) and r["tokens"] > 0 and r["train/tok_s"] > 0
        assert r["train/lr"] == inverse_sqrt_warmup(r["step"], train_cfg.lr, 5)
    minutes = [r["wall_minutes"] for r in steps]
    assert minutes[0] >= 0 and minutes == sorted(minutes)  # the clock of one run, never back
    for epoch in epochs:
        window = [r for r in steps if r["epoch"] == epoch["epoch"]]
        mean = sum(r["train/loss"] * r["tokens"] for r in window) / sum(r["tokens"] for r in window)
        assert mean == pytest.approx(epoch["train/loss"], abs=2e-4)
    scalars, starts = read_events(uninterrupted)
    assert set(scalars) == STEP_TAGS | EPOCH_TAGS and starts == [0]
    for tag in STEP_TAGS:
        assert scalars[tag] == [(r["step"], pytest.approx(r[tag], rel=1e-6)) for r in steps], tag
    for tag, key in (("valid/loss", "valid/loss"), ("valid/bleu", "valid/bleu"),
                     ("train/epoch_loss", "train/loss")):
        assert scalars[tag] == [(m["step"], pytest.approx(m[key], rel=1e-6)) for m in epochs], tag


@pytest.mark.slow
def test_a_resume_from_a_mid_epoch_checkpoint_redoes_its_records_once(uninterrupted, toy_data,
                                                                      tmp_path, monkeypatch):
    """Die in epoch 2 at a log point after its step record, before its checkpoint (the record
    is then ahead of the resume point), resume: the records and events of the uninterrupted run,
    each step once."""
    full = RunDir(uninterrupted).records.steps()
    checkpoints_before = sum(r["epoch"] == 1 for r in full) + 2  # epoch 1's, then 2 in epoch 2
    epoch_2 = [r["step"] for r in full if r["epoch"] == 2]
    assert len(epoch_2) >= 3  # two log points inside epoch 2, then its end
    crash_step = epoch_2[1]
    arrivals = []

    def die_at_checkpoint(name):
        arrivals.append(name)
        if arrivals.count("checkpoint") == checkpoints_before:
            raise Crash(name)

    run_dir = tmp_path / "run"
    monkeypatch.setattr(faults, "point", die_at_checkpoint)
    with pytest.raises(Crash):
        _fit(run_dir, *toy_data).run()
    monkeypatch.undo()
    assert RunDir(run_dir).records.steps()[-1]["step"] == crash_step
    scalars, _ = read_events(run_dir)  # closed on the way out: flushed up to the crash
    assert scalars["train/loss"][-1][0] == crash_step
    fit = _fit(run_dir, *toy_data)
    assert fit.restore() and fit.state.step == crash_step - LOG_EVERY
    assert RunDir(run_dir).records.steps()[-1]["step"] == crash_step - LOG_EVERY  # redone
    fit.run()
    run = RunDir(run_dir)
    assert [m["epoch"] for m in run.records.metrics()] == [1, 2]
    steps = run.records.steps()
    assert [r["step"] for r in steps] == [r["step"] for r in full]  # no step twice
    for resumed, uninterrupted_record in zip(_same_records(steps), _same_records(full)):
        assert resumed[:4] == uninterrupted_record[:4]
        assert resumed[4] == pytest.approx(uninterrupted_record[4], abs=2e-4)
    scalars, starts = read_events(run_dir)
    assert starts == [0]
    for tag in STEP_TAGS:
        assert [s for s, _ in scalars[tag]] == [r["step"] for r in steps], tag
    for tag in EPOCH_TAGS:
        assert [s for s, _ in scalars[tag]] == [m["step"] for m in run.records.metrics()], tag
