"""Training pieces: loss, schedule, checkpoints, determinism, and the toy task end to end."""
import dataclasses
import json
import math

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

from mtx import kernels
from mtx.config import DataConfig, RunConfig, TrainConfig
from mtx.errors import CheckpointError, ConfigError
from mtx.runs.rundir import RunDir, load_run
from mtx.data.corpus import load_corpus
from mtx.training.loss import label_smoothed_loss
from mtx.model.transformer import Transformer
from mtx.training.schedule import inverse_sqrt_warmup, learning_rate
from mtx.training import new_fit
from mtx.training.steps import train_step
from tests.conftest import model_config


def test_the_loss_of_a_uniform_guess_is_log_v_per_real_token():
    """Uniform logits over V = 7: every real target token costs log 7 (smoothed or not); the
    padding after each target's valid length costs nothing, whatever its logits and ids."""
    tgt_out = np.array([[1, 2, 3], [4, 5, 0]], dtype="int32")
    tgt_len = np.array([3, 2], dtype="int32")  # 5 real tokens
    uniform = onp.zeros((2, 3, 7), "float32")
    noisy_padding = uniform.copy()
    noisy_padding[1, 2] = onp.random.RandomState(0).normal(size=7) * 10
    for smoothing in (0.0, 0.1):
        loss_fn = label_smoothed_loss(7, smoothing, mx.cpu())
        for logits in (uniform, noisy_padding):
            loss, nll = loss_fn(np.array(logits), tgt_out, tgt_len)
            assert float(nll) == pytest.approx(5 * math.log(7), rel=1e-5)
            assert float(loss) == pytest.approx(5 * math.log(7), rel=1e-5)


def test_label_smoothing_penalises_overconfidence():
    """The more certain of the right token, the lower the nll; but the smoothed loss is lowest
    at a finite confidence, so a model trained on it does not push its logits without bound."""
    tgt_out, tgt_len = np.array([[1]], dtype="int32"), np.array([1], dtype="int32")
    plain, smoothed = label_smoothed_loss(5, 0.0, mx.cpu()), label_smoothed_loss(5, 0.1, mx.cpu())

    def losses(margin):  # the right token's logit ``margin`` above the other four
        logits = np.array([[[0.0, margin, 0.0, 0.0, 0.0]]])
        return float(plain(logits, tgt_out, tgt_len)[1]), float(smoothed(logits, tgt_out,
                                                                          tgt_len)[0])
    (nll_2, smooth_2), (nll_5, smooth_5), (nll_20, smooth_20) = map(losses, (2.0, 5.0, 20.0))
    assert nll_2 > nll_5 > nll_20 >= 0
    assert smooth_5 < smooth_2 and smooth_5 < smooth_20


def test_inverse_sqrt_warmup():
    assert inverse_sqrt_warmup(50, 1e-3, 100) == pytest.approx(5e-4)
    assert inverse_sqrt_warmup(100, 1e-3, 100) == pytest.approx(1e-3)
    assert inverse_sqrt_warmup(400, 1e-3, 100) == pytest.approx(5e-4)


def test_learning_rate_falls_to_zero_over_the_cooldown():
    cfg = TrainConfig(lr=1e-3, warmup_steps=100, cooldown=0.2)
    assert learning_rate(400, cfg, 0.5) == inverse_sqrt_warmup(400, 1e-3, 100)
    assert learning_rate(400, cfg, 0.9) == pytest.approx(inverse_sqrt_warmup(400, 1e-3, 100) / 2)
    assert learning_rate(400, cfg, 1.0) == 0.0
    assert learning_rate(400, TrainConfig(lr=1e-3, warmup_steps=100), 1.0) == pytest.approx(5e-4)


@pytest.mark.parametrize("cooldown", [-0.1, 1.5])
def test_a_cooldown_outside_0_1_is_a_config_error(cooldown):
    with pytest.raises(ConfigError, match="train.cooldown"):
        TrainConfig(cooldown=cooldown)


def _load_best(run):
    model = Transformer(run.model_config())
    run.checkpoints.load(run.checkpoints.verify("best"), model, mx.cpu())
    return model


def test_checkpoint_round_trip_and_bad_checkpoints(tiny_cfg, tmp_path):
    run = RunDir(tmp_path)
    model = Transformer(tiny_cfg)
    model.initialize(mx.init.Xavier())
    run.write_json("model.json", dataclasses.asdict(tiny_cfg))
    manifest = run.checkpoints.save("best", model, step=7)
    src = np.array([[5, 6, 3]], dtype="int32")
    args = (src, np.array([3], dtype="int32"), np.array([[2, 7]], dtype="int32"))
    assert onp.array_equal(_load_best(run)(*args).asnumpy(), model(*args).asnumpy())
    assert not list(tmp_path.rglob(".*.tmp")) and not list(tmp_path.rglob("staging-*"))

    params = run.checkpoints.folder / manifest["files"]["params"]
    params.write_bytes(params.read_bytes()[:-100])  # truncated
    with pytest.raises(CheckpointError, match="checksum mismatch with best.json"):
        _load_best(run)
    run.checkpoints.save("best", model, step=7)
    run.write_json("model.json", dataclasses.asdict(dataclasses.replace(tiny_cfg, num_heads=4)))
    with pytest.raises(CheckpointError, match="different model config"):
        _load_best(run)
    with pytest.raises(CheckpointError, match="is missing"):
        _load_best(RunDir(tmp_path / "nothing"))


def _short_fit(tmp_path, seed, **train_overrides):
    data_cfg = DataConfig(name="toy", sizes=[300, 20, 20], max_pair_len=64)
    corpus = load_corpus(data_cfg, tmp_path / "cache", seed)
    model_cfg = model_config(dropout=0.1, vocab_size=len(corpus.tokenizer))
    train_cfg = TrainConfig(batch_tokens=256, max_epochs=1, eval_bleu=False, warmup_steps=5,
                            **train_overrides)
    from mtx.hardware.devices import seed_everything
    seed_everything(seed)
    fit = new_fit(corpus, RunConfig(model=model_cfg, data=data_cfg, train=train_cfg, seed=seed),
                  tmp_path / f"run{seed}", [mx.cpu()])
    fit.run()
    return {k: p.data().asnumpy() for k, p in fit.model._collect_params_with_prefix().items()}, fit


def test_same_seed_gives_the_same_run(tmp_path):
    first, fit = _short_fit(tmp_path / "a", seed=5)
    second, _ = _short_fit(tmp_path / "b", seed=5)
    assert first.keys() == second.keys()
    for name in first:
        assert onp.array_equal(first[name], second[name]), name
    record = json.loads((fit.run_dir.path / "metrics.jsonl").read_text().splitlines()[0])
    assert set(record) == {"step", "epoch", "train/loss", "valid/loss", "valid/bleu",
                           "train/tok_s", "wall_minutes"}
    assert math.isfinite(record["train/loss"]) and record["step"] == fit.state.step > 0


def test_dynamic_loss_scaling_gives_the_unscaled_run(tmp_path):
    """The loss is multiplied by 1024 before backward and the gradients divided by it again: the
    same parameters as without scaling (float32, so nothing over- or underflows)."""
    plain, _ = _short_fit(tmp_path / "a", seed=5, loss_scale="off")
    scaled, fit = _short_fit(tmp_path / "b", seed=5, loss_scale="dynamic")
    assert fit.pieces.loss_scales[mx.cpu()].value.asscalar() == 2.0 ** 10  # no overflow, no growth yet
    for name in plain:
        onp.testing.assert_allclose(scaled[name], plain[name], rtol=1e-4, atol=1e-5,
                                    err_msg=name)


def test_an_overflowing_loss_scale_skips_the_step_and_halves(tmp_path):
    from mtx.data.batching import bucket_batches
    _, fit = _short_fit(tmp_path, seed=5, loss_scale="dynamic")
    before = {k: p.data().asnumpy() for k, p in fit.model.collect_params().items()}
    fit.pieces.loss_scales[mx.cpu()].value[:] = 3e38  # loss x scale overflows float32
    batch = bucket_batches(*fit.corpus.train_pairs(), 256, shuffle=False, seed=0)[0]
    _, finite, _ = train_step(fit.pieces, fit.parallel, batch, fit.state.step + 1, fit.cfg.train)
    assert float(finite) == 0.0
    assert fit.pieces.loss_scales[mx.cpu()].value.asscalar() == onp.float32(3e38) / 2
    for name, p in fit.model.collect_params().items():
        assert onp.array_equal(p.data().asnumpy(), before[name]), name


def test_dynamic_loss_scale_halves_on_overflow_and_grows_after_a_window():
    from mtx.training.optimizer import DynamicLossScale
    scale = DynamicLossScale(mx.cpu(), init=8.0, window=3)
    seen = []
    for finite in [0, 1, 1, 1, 1, 0, 1]:
        scale.update(mx.nd.array([finite]))
        seen.append(scale.value.asscalar())
    assert seen == [4.0, 4.0, 4.0, 8.0, 8.0, 4.0, 4.0]


def test_bfloat16_products_hand_the_loss_bfloat16_logits(tmp_path, monkeypatch):
    """With bfloat16 products the native loss reads the output layer's bfloat16 logits (the
    (rows, V) array is cast in neither direction): the same training as through float32 logits,
    to the rounding of the sums. R-Drop's and distillation's losses keep float32 logits."""
    from mtx.training import build
    from mtx.training.precision import bfloat16_unavailable
    bf16 = TrainConfig(precision="bfloat16")
    from mtx.training.regularisers import Teacher, terms_of
    assert build.loss_reads_bfloat16(bf16, terms_of(bf16)) == kernels.load()
    assert not build.loss_reads_bfloat16(TrainConfig(precision="float32"), [])
    rdrop = TrainConfig(precision="bfloat16", rdrop_alpha=5)
    assert not build.loss_reads_bfloat16(rdrop, terms_of(rdrop))
    assert not build.loss_reads_bfloat16(bf16, terms_of(bf16, Teacher(object(), 0.5)))
    if bfloat16_unavailable() or not kernels.load():
        pytest.skip("this CPU runs no bfloat16 products (tests/test_model.py checks the refusal)")
    direct, fit = _short_fit(tmp_path / "a", seed=5, precision="bfloat16")
    assert fit.model.logits_in_compute_dtype
    monkeypatch.setattr(build, "loss_reads_bfloat16", lambda train_cfg, terms: False)
    cast, fit = _short_fit(tmp_path / "b", seed=5, precision="bfloat16")
    assert not fit.model.logits_in_compute_dtype
    for name in direct:
        onp.testing.assert_allclose(direct[name], cast[name], rtol=0.02, atol=2e-3, err_msg=name)


def test_float16_on_a_cpu_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="float16 needs a GPU.*bfloat16"):
        _short_fit(tmp_path, seed=5, precision="float16")


def test_toy_task_is_learned_through_the_script(toy_run):
    """mtx-train experiment=toy (the `toy_run` fixture): near-perfect reversal, and a report
    that says what the run was."""
    report = json.loads((toy_run / "report.json").read_text())
    scores = report["scores"]["test_2016_flickr"]
    assert scores["exact_match"] >= 90.0, scores
    assert scores["sacrebleu"]["score"] >= 95.0 and "version:2." in scores["sacrebleu"]["signature"]
    model = load_run(toy_run, mx.cpu())[0]
    trainable = sum(int(p.data().size) for p in model.collect_params().values()
                    if p.grad_req != "null")  # the oracle of Transformer.count_parameters
    assert report["src_lang"] == "src" and report["parameters"] == trainable
    assert report["train_minutes"] > 0 and report["precision"]["requested"] == "float32"
    assert report["precision"]["used"] == "float32" and report["precision"]["reason"]
    assert report["native_kernels"]["native_layer_norm"] in (True, False)
    for name in ("model.json", "data.json", "run.json", "toy_symbols.json", "metrics.jsonl",
                 "precision.json",
                 "checkpoints/best.json", "checkpoints/latest.json", "config.yaml"):
        assert (toy_run / name).is_file(), name
    epochs = [json.loads(line) for line in (toy_run / "metrics.jsonl").read_text().splitlines()]
    assert len(epochs) == report["epochs"] and epochs[-1]["valid/bleu"] > epochs[0]["valid/bleu"]


def test_guarded_adam_matches_mxnet_adam():
    """The fused optimizer is MXNet's Adam when the scale is 1 / tokens (no clipping)."""
    from mxnet import autograd, gluon
    from mtx.training.optimizer import gradient_scale
    x = np.array(onp.random.RandomState(0).normal(size=(4, 8)).astype("float32"))
    weights = []
    for kind in ("adam", "guardedadam"):
        mx.random.seed(0)
        net = gluon.nn.HybridSequential()
        for _ in range(40):  # more parameters than one fused kernel takes (32)
            net.add(gluon.nn.Dense(8, in_units=8))
        net.initialize(mx.init.Xavier())
        params = list(net.collect_params().values())
        trainer = gluon.Trainer(net.collect_params(), kind, {"learning_rate": 1e-2, "beta2": 0.98,
                                                              "epsilon": 1e-9},
                                update_on_kvstore=False)
        for _ in range(5):
            with autograd.record():
                loss = (net(x) ** 2).sum()
            loss.backward()
            if kind == "adam":
                trainer.step(4)
            else:
                trainer.optimizer.scales[mx.cpu()] = gradient_scale(
                    [p.grad() for p in params], 0, 4)[0]
                trainer.update(1)
        weights.append([p.data().asnumpy() for p in params])
    for adam, guarded in zip(*weights):
        assert onp.allclose(adam, guarded, atol=1e-5, rtol=0)


def test_an_optimizer_state_saved_under_the_old_module_path_resumes(tiny_cfg, tmp_path,
                                                                     monkeypatch):
    """Runs saved before the optimizer moved to `mtx.training.optimizer` pickled it as
    `mtx.optimizer.GuardedAdam`: their resume point still loads, into the same optimizer."""
    import sys
    from mxnet import gluon
    from mtx.training import optimizer
    run = RunDir(tmp_path)
    model = Transformer(tiny_cfg)
    model.initialize(mx.init.Xavier())
    trainer = gluon.Trainer(model.collect_params(), "guardedadam", {"learning_rate": 1e-3},
                            update_on_kvstore=False)
    run.write_json("model.json", dataclasses.asdict(tiny_cfg))
    with monkeypatch.context() as old:  # the state as the old layout pickled it
        old.setitem(sys.modules, "mtx.optimizer", optimizer)
        old.setattr(optimizer.GuardedAdam, "__module__", "mtx.optimizer")
        run.checkpoints.save("latest", model, trainer, step=1)
    assert "mtx.optimizer" not in sys.modules
    states = next(run.checkpoints.folder.glob("states-*.states")).read_bytes()
    assert b"mtx.optimizer" in states and b"mtx.training.optimizer" not in states

    fresh = gluon.Trainer(model.collect_params(), "adam", update_on_kvstore=False)
    run.checkpoints.load(run.checkpoints.verify("latest"), model, mx.cpu(), trainer=fresh)
    assert type(fresh._updaters[0].optimizer) is optimizer.GuardedAdam
    assert "mtx.optimizer" not in sys.modules


def test_a_program_trains_through_mtx_training_train_alone(tmp_path):
    """README's Python API: `mtx.training.train(RunConfig, run_dir)` in a fresh process that
    has not switched MXNet's NumPy interface on (the commands do) trains and reports."""
    import subprocess
    import sys
    program = (
        "import mtx\n"
        "from mtx.config import DataConfig, ModelConfig, RunConfig, TrainConfig\n"
        "from mtx.training import train\n"
        "cfg = RunConfig(model=ModelConfig(num_hiddens=16, num_heads=2, ffn_num_hiddens=32,\n"
        "                                  num_encoder_layers=1, num_decoder_layers=1),\n"
        "                data=DataConfig(name='toy', sizes=[200, 20, 20], max_pair_len=64),\n"
        "                train=TrainConfig(batch_tokens=256, max_epochs=1, warmup_steps=5),\n"
        f"                device='cpu', data_dir={str(tmp_path / 'data')!r})\n"
        f"report = train(cfg, {str(tmp_path / 'run')!r})\n"
        "print(report['steps'], sorted(report['scores']))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    steps, names = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert int(steps) > 0 and "test" in names
    assert (tmp_path / "run" / "config.yaml").read_text().startswith("seed: 1\n")
