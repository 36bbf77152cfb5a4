"""The run directory and the loop's bookkeeping: averaging, the final choice, early stopping,
checkpoint rotation, the wall-clock budget, and damaged files named in one line."""
import dataclasses
import json
import signal
from pathlib import Path

import mxnet as mx
import numpy as onp
import pytest

from mtx.config import DataConfig, RunConfig, TrainConfig
from mtx.data.corpus import load_corpus, save_tokenizer
from mtx.errors import CheckpointError
from mtx.model.transformer import Transformer
from mtx.runs.checkpoints import save_average
from mtx.runs.resume import check_same_steps
from mtx.runs.rundir import RunDir, load_run, require_run
from mtx.typecheck import to_keys
from mtx.training import choose_final, new_fit
from tests.conftest import model_config


def _params(model):
    return {k: p.data().asnumpy() for k, p in model._collect_params_with_prefix().items()}


def _fit(tmp_path, **train_overrides):
    data_cfg = DataConfig(name="toy", sizes=[300, 20, 20], max_pair_len=64)
    corpus = load_corpus(data_cfg, tmp_path / "cache", 3)
    model_cfg = model_config(vocab_size=len(corpus.tokenizer))
    train_cfg = TrainConfig(**dict(dict(batch_tokens=256, max_epochs=1, eval_bleu=False,
                                        warmup_steps=5, average_last=0), **train_overrides))
    fit = new_fit(corpus, RunConfig(model=model_cfg, data=data_cfg, train=train_cfg, seed=3),
                  tmp_path / "run", [mx.cpu()])
    fit.run_dir.write_json("model.json", dataclasses.asdict(model_cfg))
    return fit


def test_average_is_the_mean_of_the_checkpoints(tiny_cfg, tmp_path):
    run = RunDir(tmp_path)
    run.write_json("model.json", dataclasses.asdict(tiny_cfg))
    model = Transformer(tiny_cfg)
    model.initialize(mx.init.Xavier())
    snapshots = []
    for i in range(3):
        for p in model.collect_params().values():
            p.set_data(p.data() * (i + 1) + i)
        run.checkpoints.save(f"epoch_{i + 1:03d}", model)
        snapshots.append(_params(model))
    manifest = save_average(run.checkpoints, model, ["epoch_002", "epoch_003"], mx.cpu())
    averaged = Transformer(tiny_cfg)
    run.checkpoints.load(run.checkpoints.verify("average"), averaged, mx.cpu())
    for name, value in _params(averaged).items():
        assert onp.allclose(value, (snapshots[1][name] + snapshots[2][name]) / 2, atol=1e-6), name
    assert manifest["averaged"] == ["epoch_002", "epoch_003"]


@pytest.mark.parametrize("average_wins", [True, False])
def test_choose_final_takes_the_average_only_when_it_scores_as_well(tmp_path, average_wins):
    fit = _fit(tmp_path, max_epochs=3, average_last=2, keep_last=2)
    fit.run()
    scores = iter([1.0, 1.0 if average_wins else 0.5, 1.0])  # best, average, best again

    fit.evaluate = lambda split: (0.0, {"score": next(scores)})
    choice = choose_final(fit)
    assert choice["checkpoint"] == ("average" if average_wins else "best")
    expected = fit.run_dir.checkpoints.verify(choice["checkpoint"])
    loaded = Transformer(fit.model.cfg)
    fit.run_dir.checkpoints.load(expected, loaded, mx.cpu())
    assert all(onp.array_equal(v, _params(loaded)[k]) for k, v in _params(fit.model).items())


def test_patience_stops_after_epochs_without_improvement(tmp_path):
    fit = _fit(tmp_path, max_epochs=10, patience=2)
    losses = iter([3.0, 2.0, 2.5, 2.4, 1.0, 1.0])  # improves twice, then two worse epochs
    fit.evaluate = lambda split: (next(losses), None)
    fit.run()
    assert fit.state.epoch == 4 and fit.state.stale_validations == 2
    assert [r["epoch"] for r in fit.run_dir.records.metrics()] == [1, 2, 3, 4]
    resumed = _fit(tmp_path, max_epochs=10, patience=2, resume=True)  # a resume of the stopped
    resumed.evaluate = lambda split: pytest.fail("trained again after its early stop")  # run
    assert resumed.restore() and resumed.run() is not None and resumed.state.epoch == 4


def test_keep_last_rotates_epoch_checkpoints_and_their_files(tmp_path):
    fit = _fit(tmp_path, max_epochs=4, keep_last=2)
    fit.run()
    run = fit.run_dir
    assert run.checkpoints.validated_names() == ["epoch_003", "epoch_004"]
    named = {json.loads(p.read_text())["files"][k] for p in run.checkpoints.manifests()
             for k in json.loads(p.read_text())["files"]}
    on_disk = {p.name for p in run.checkpoints.folder.iterdir()
               if p.suffix in (".params", ".states")}
    assert on_disk == named  # the files of dropped epochs are gone


def test_the_wall_clock_budget_stops_inside_an_epoch(tmp_path):
    fit = _fit(tmp_path, max_epochs=50, max_minutes=1e-9)
    fit.run()
    assert fit.state.epoch == 1 and fit.state.step == 1  # one step, then the epoch ends
    assert len(fit.run_dir.records.metrics()) == 1 and fit.run_dir.checkpoints.verify("latest")


def test_a_resumed_run_continues_in_the_middle_of_an_epoch(tmp_path):
    """Stopped by Ctrl-C between two log points, restored into a fresh Fit: it goes on from the
    step where it stopped, to the same parameters as training straight through."""
    straight = _fit(tmp_path / "a", max_epochs=1, log_every=3)
    straight.run()
    first = _fit(tmp_path / "b", max_epochs=1, log_every=3, save_every_minutes=0)
    _stop_after(first, 7)
    with pytest.raises(KeyboardInterrupt):
        first.run()
    resumed = _fit(tmp_path / "b", max_epochs=1, log_every=3, save_every_minutes=0)
    assert resumed.restore() and resumed.state.batch_in_epoch == 7 and resumed.state.epoch == 0
    resumed.run()
    assert resumed.state.step == straight.state.step
    for name, value in _params(straight.model).items():
        assert onp.array_equal(value, _params(resumed.model)[name]), name


def _stop_after(fit, steps, signum=signal.SIGINT):
    """A stop signal (default Ctrl-C) arrives during update ``steps`` of ``fit``."""
    requested = fit.stop_signals.requested

    def arrived(*args):
        if fit.state.step == steps and fit.stop_signals.received is None:
            fit.stop_signals.received = signal.Signals(signum)
        return requested(*args)
    fit.stop_signals.requested = arrived


@pytest.mark.parametrize("damaged", ["checkpoints/best.json", "model.json", "data.json",
                                     "report.json", "toy_symbols.json"])
def test_a_damaged_json_file_of_a_run_is_one_clear_error(tmp_path, damaged):
    fit = _fit(tmp_path)
    fit.run()
    save_tokenizer(fit.corpus.tokenizer, fit.run_dir.path)
    fit.run_dir.write_json("data.json", to_keys(DataConfig(name="toy")))
    fit.run_dir.write_json("report.json", {"final": {"checkpoint": "best"}})
    fit.run_dir.checkpoints.link("best", fit.run_dir.checkpoints.verify("latest"))
    load_run(fit.run_dir.path, mx.cpu())  # intact: loads
    (fit.run_dir.path / damaged).write_text('{"cut short')
    with pytest.raises(Exception, match=r"damaged") as info:
        load_run(fit.run_dir.path, mx.cpu())
    assert isinstance(info.value, (CheckpointError,)) or "TokenizerError" in type(info.value).__name__
    assert "\n" not in str(info.value)


def test_average_last_n_is_the_mean_of_the_last_epoch_checkpoints(toy_run):
    """load_run's average_last_N (mtx-evaluate/-translate checkpoint=average_last_N): the mean of
    the last N validated checkpoints, computed without writing into the run; N beyond what the run
    keeps is a one-line error."""
    run = RunDir(toy_run)
    names = run.checkpoints.validated_names()[-2:]
    before = sorted(p.name for p in run.checkpoints.folder.iterdir())
    averaged = _params(load_run(toy_run, mx.cpu(), "average_last_2")[0])
    each = [_params(load_run(toy_run, mx.cpu(), name)[0]) for name in names]
    for key, value in averaged.items():
        assert onp.allclose(value, (each[0][key] + each[1][key]) / 2, atol=1e-6), key
    assert sorted(p.name for p in run.checkpoints.folder.iterdir()) == before
    kept = len(run.checkpoints.validated_names())
    with pytest.raises(CheckpointError, match=f"keeps {kept} validated checkpoints"):
        load_run(toy_run, mx.cpu(), f"average_last_{kept + 1}")


def test_a_folder_that_is_not_a_run_names_the_runs_below_it(tmp_path):
    (tmp_path / "sweep" / "heads=1").mkdir(parents=True)
    (tmp_path / "sweep" / "heads=1" / "model.json").write_text("{}")
    with pytest.raises(CheckpointError, match=r"sweep is not a training run \(no model.json\); "
                                              r"pass one of the 1 runs below it, e.g. ckpt="):
        require_run(tmp_path / "sweep")
    (tmp_path / "nothing").mkdir()
    with pytest.raises(CheckpointError, match="pass a training run directory"):
        load_run(tmp_path / "nothing", mx.cpu())
    assert require_run(tmp_path / "sweep" / "heads=1").path == tmp_path / "sweep" / "heads=1"


def test_a_missing_checkpoint_names_the_ones_the_run_has(toy_run, tmp_path):
    with pytest.raises(CheckpointError, match=r"has no checkpoint epoch_999; choose checkpoint= "
                                              r"one of .*best"):
        load_run(toy_run, mx.cpu(), "epoch_999")
    young = tmp_path / "young"  # a run stopped before its first checkpoint
    young.mkdir()
    (young / "model.json").write_text((Path(toy_run) / "model.json").read_text())
    with pytest.raises(CheckpointError, match="no checkpoint yet .* train.resume=true"):
        load_run(young, mx.cpu(), "best")


def test_a_checkpoint_of_another_run_is_refused(toy_run, tmp_path):
    other = tmp_path / "other"  # the same model config: only the folder tells them apart
    other.mkdir()
    (other / "model.json").write_text((Path(toy_run) / "model.json").read_text())
    with pytest.raises(CheckpointError, match="is not in .*other/checkpoints: a checkpoint of "
                                              "another run"):
        load_run(other, mx.cpu(), str(Path(toy_run) / "checkpoints" / "best.json"))
    assert RunDir(toy_run).checkpoints.manifest_path(str(Path(toy_run) / "checkpoints"
                                                         / "best.json"))


def test_a_checkpoint_given_as_its_params_file_loads_its_manifest(toy_run):
    run = RunDir(toy_run)
    best = run.checkpoints.verify("best")
    params = best["paths"]["params"]  # checkpoints/params-<sha>.params: content-addressed
    named = json.loads(Path(run.checkpoints.manifest_of(params)).read_text())["files"]["params"]
    assert named == best["files"]["params"]
    model, _, _ = load_run(toy_run, mx.cpu(), str(params))
    expected, _, _ = load_run(toy_run, mx.cpu(), "best")
    assert all(onp.array_equal(v, _params(expected)[k]) for k, v in _params(model).items())
    with pytest.raises(CheckpointError, match="no checkpoint of .* names this file"):
        load_run(toy_run, mx.cpu(), str(run.checkpoints.folder / "params-0000.params"))


def test_a_resume_with_other_training_settings_is_refused(tmp_path):
    """The seed, train.* and data.* decide a run's steps: a resume with others is refused and
    named; how long it trains, how often it saves and where it reads the corpus may change; a
    key the run's config.yaml lacks (one mtx added later, with its default) is not compared."""
    run = RunDir(tmp_path)
    (tmp_path / "config.yaml").write_text(
        "seed: 1\ntrain:\n  batch_tokens: 2048\n  lr: 0.001\n  max_minutes: 60\n"
        "data:\n  max_len: 128\n  raw_dir: /a\n")
    same = ("seed: 1\ntrain:\n  batch_tokens: 2048\n  lr: 0.001\n  max_minutes: {minutes}\n"
            "  ema_decay: 0.5\ndata:\n  max_len: 128\n  raw_dir: {raw}\n")
    check_same_steps(run, same.format(minutes=90, raw="/b"))
    check_same_steps(run, None)  # a run built in code keeps no config.yaml to compare
    changed = same.format(minutes=60, raw="/a").replace("batch_tokens: 2048", "batch_tokens: 512")
    changed = changed.replace("seed: 1", "seed: 2").replace("max_len: 128", "max_len: 64")
    with pytest.raises(CheckpointError) as err:
        check_same_steps(run, changed)
    assert (f"{tmp_path} was trained with seed=1 (now 2), train.batch_tokens=2048 (now 512), "
            f"data.max_len=128 (now 64); a resumed run must take the same steps") in str(err.value)


def test_a_stop_before_the_first_log_point_leaves_a_resume_point(tmp_path):
    """SIGTERM three steps in, long before the first log point: the resume point is that
    step, and the message says how to continue."""
    from mtx.errors import Preempted
    fit = _fit(tmp_path, log_every=1000)
    _stop_after(fit, 3, signal.SIGTERM)
    with pytest.raises(Preempted, match=r"stopped by SIGTERM: step 3 is saved; "
                                        r"train.resume=true hydra.run.dir=.* continues the run"):
        fit.run()
    assert [p.stem for p in fit.run_dir.checkpoints.manifests()] == ["latest"]
    resumed = _fit(tmp_path, resume=True)
    assert resumed.restore() and resumed.state.step == 3


def test_epoch_checkpoints_sort_by_number(tmp_path):
    store = RunDir(tmp_path).checkpoints
    store.folder.mkdir()
    for epoch in (999, 1000, 998, 10):
        (store.folder / f"epoch_{epoch:03d}.json").write_text("{}")
    (store.folder / "latest.json").write_text("{}")
    assert store.validated_names() == ["epoch_010", "epoch_998", "epoch_999", "epoch_1000"]
    assert store.resume_points() == ["latest", "epoch_1000", "epoch_999", "epoch_998", "epoch_010"]


def test_a_checkpoint_in_the_first_manifest_format_is_refused_in_one_line(toy_run, tmp_path):
    """Manifests of format 1 (a .json beside each .params, no "files") are not read: the error
    says an older mtx wrote them."""
    old = tmp_path / "old"
    (old / "checkpoints").mkdir(parents=True)
    (old / "model.json").write_text((Path(toy_run) / "model.json").read_text())
    (old / "checkpoints" / "best.params").write_bytes(b"weights")
    (old / "checkpoints" / "best.json").write_text(json.dumps(
        {"step": 1, "sha256": "0" * 64, "config_digest": "0" * 16}))
    with pytest.raises(CheckpointError, match="format 1 .*written by an older mtx") as err:
        load_run(old, mx.cpu(), "best")
    assert "\n" not in str(err.value)
