"""Learned head gates (`mtx.heads.gates`): the hard-concrete distribution, the exact final gates, and
gate training on the toy run: it reaches exact zeros and the cut model equals the gated one."""
import json

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

from mtx.heads import gates
from mtx.heads import importance as heads
from mtx.data.corpus import load_corpus
from mtx.errors import TrainingError
from mtx.runs.rundir import load_run
from tests.conftest import run_script
from tests.test_heads import _inputs


def test_hard_concrete_has_exact_zeros_and_ones_and_its_open_probability():
    mx.random.seed(0)
    log_alpha = np.array(onp.repeat([[-2.0, 0.0, 2.0]], 20000, axis=0))  # (20000, 3)
    z = gates.sample_gates(log_alpha).asnumpy()
    assert z.min() == 0.0 and z.max() == 1.0
    assert ((z > 0) & (z < 1)).any()  # and differentiable values between
    onp.testing.assert_allclose((z > 0).mean(axis=0),
                                gates.open_probability(onp.array([-2.0, 0.0, 2.0]), onp),
                                atol=0.015)


def test_final_gates_keep_the_target_and_one_head_per_layer():
    log_alpha = onp.array([[5.0, 4.0, 3.0], [-5.0, -6.0, -7.0], [1.0, 0.5, 9.0]])
    final = gates.final_gates(log_alpha, 4, [3, 3, 2])  # row 2 has 2 heads (h2 is padding)
    assert (final > 0).sum() == 4
    assert (final[1] > 0).tolist() == [True, False, False]  # the layer's best, though closed
    assert final[2, 2] == 0.0  # padding is never kept, whatever its log_alpha
    assert (final[0] > 0).tolist() == [True, True, False]  # then the largest of the rest
    assert (final[2] > 0).tolist() == [True, False, False] and final[0, 0] == 1.0
    with pytest.raises(ValueError, match="target_heads=9"):
        gates.final_gates(log_alpha, 9, [3, 3, 2])


@pytest.fixture(scope="module")
def toy(toy_run):
    model, tokenizer, data_cfg = load_run(toy_run, mx.cpu())
    corpus = load_corpus(data_cfg, toy_run / "cache", 1, tokenizer)
    return model, corpus


def test_gate_training_reaches_exact_zeros_and_the_cut_model_equals_the_gated_one(toy):
    model, corpus = toy
    model.hybridize(static_alloc=True)
    total = model.cfg.num_attention_layers * model.cfg.num_heads
    target = total // 4
    result = gates.train_gates(model, corpus.train_pairs(), mx.cpu(), target, minutes=0,
                               max_steps=120, gate_lr=0.1, seed=3)
    history = result["history"]
    assert len(history) == result["steps"] == 120
    assert history[-1]["expected_open"] < history[0]["expected_open"]  # the penalty closed gates
    final = result["gates"]
    assert (final == 0).sum() == total - target and (final > 0).sum() == target
    assert (final > 0).any(axis=1).all()
    src, src_len, tgt = _inputs(corpus)
    gated = model(src, src_len, tgt, np.array(final, dtype="float32")).asnumpy()
    cut = heads.prune(model, final, mx.cpu())
    assert sum(cut.cfg.heads_per_layer) == target
    onp.testing.assert_allclose(cut(src, src_len, tgt).asnumpy(), gated, atol=1e-4)


def test_non_finite_steps_are_skipped_and_too_many_in_a_row_stop_the_gates(toy_run, toy):
    """Gate training updates as training does: a step whose loss is not finite changes nothing
    (model or gates), and ``max_nonfinite_steps`` of them in a row are one error."""
    _, corpus = toy
    model, _, _ = load_run(toy_run, mx.cpu())
    params = model._collect_params_with_prefix()
    poisoned = next(name for name in params if name.endswith("gamma"))  # a LayerNorm's
    params[poisoned].set_data(params[poisoned].data() * onp.nan)
    before = {name: p.data().asnumpy() for name, p in params.items()}
    with pytest.raises(TrainingError, match="not finite for 3 steps in a row"):
        gates.train_gates(model, corpus.train_pairs(), mx.cpu(), 4, minutes=0, max_steps=10,
                          max_nonfinite_steps=3)
    for name, p in params.items():
        assert onp.array_equal(p.data().asnumpy(), before[name], equal_nan=True), name


def test_the_aim_falls_to_the_target_and_the_best_gates_are_left_alone():
    assert gates.open_aim(36, 9, 0.0, 0.6) == 36
    assert gates.open_aim(36, 9, 0.3, 0.6) == pytest.approx(22.5)
    assert gates.open_aim(36, 9, 0.6, 0.6) == gates.open_aim(36, 9, 1.0, 0.6) == 9
    assert gates.open_aim(36, 9, 0.0, 0.0) == 9  # no annealing: the target from the start
    log_alpha = onp.array([[5.0, 4.0, 3.0], [-1.0, -2.0, 9.0]])
    valid = onp.array([[True, True, True], [True, True, False]])  # layer 2 pruned to 2 heads
    # each layer's best first (5.0; -1.0, as 9.0 is padding), then the largest: 4.0
    assert gates.kept(log_alpha, 3, valid).tolist() == [[True, True, False],
                                                        [True, False, False]]
    assert gates.kept(log_alpha, 1, valid).sum(axis=1).tolist() == [1, 1]  # one per layer


def test_prune_folds_fractional_gates_into_w_o(toy):
    model, corpus = toy
    src, src_len, tgt = _inputs(corpus)
    shape = (model.cfg.num_attention_layers, model.cfg.num_heads)
    final = onp.random.RandomState(0).uniform(0.2, 1.0, shape)
    final[:, 0] = 0.0
    gated = model(src, src_len, tgt, np.array(final, dtype="float32")).asnumpy()
    onp.testing.assert_allclose(heads.prune(model, final, mx.cpu())(src, src_len, tgt).asnumpy(),
                                gated, atol=1e-4)


def test_heads_script_with_learned_gates(toy_run, tmp_path):
    done = run_script("heads", f"ckpt={toy_run}", "method=l0", "prune_fraction=0.75",
                      "l0.max_steps=40", "decode.beam_size=2", "timing_rounds=1",
                      f"out_dir={tmp_path}")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    learned = json.loads((tmp_path / "gates.json").read_text())
    final = onp.array(learned["gates"])
    assert learned["target_heads"] == 6 and (final > 0).sum() == 6 and learned["steps"] == 40
    snapshots = [r for r in learned["history"] if "open_probability" in r]
    assert [r["step"] for r in snapshots] == [1, 25, 40]  # the first, every 25th, the last
    assert onp.array(snapshots[-1]["open_probability"]).shape == final.shape
    assert (tmp_path / "gates_training.png").stat().st_size > 1000
    speed = json.loads((tmp_path / "speed.json").read_text())
    assert speed["method"] == "l0" and speed["removed_heads"] == 18
    assert sum(speed["kept_per_layer"]) == 6 and speed["l0"]["steps"] == 40
    assert (tmp_path / "gates.png").stat().st_size > 1000
    assert not (tmp_path / "pruning.json").exists()  # no importance curves with method=l0


@pytest.mark.parametrize("overrides, message", [
    (["method=l0"], "method=l0 needs exactly one of target_heads="),
    (["method=l0", "target_heads=3"], "target_heads=3 would keep 3 of the 24 heads"),
    (["method=random"], "method=random: give order (the importance orders"),
    (["method=l0", "prune_fraction=0.5", "l0.anneal=1.5"], "l0.anneal=1.5: give the part"),
    (["method=l0", "prune_fraction=0.5", "l0.minutes=0"], "l0.minutes=0, l0.max_steps=null: "
                                                          "the gates need minutes > 0"),
    (["method=l0", "prune_fraction=0.5", "l0.minutes=null"], "l0.minutes=null, l0.max_steps=null"),
    (["method=l0", "prune_fraction=0.5", "l0.minutes=-1"], "l0.minutes=-1: give the wall-clock budget"),
    (["method=l0", "target_heads=9.5"], "target_heads=9.5 has type float; expected int or "
                                                 "null (a whole number of heads to keep"),
    (["method=l0", "prune_fraction=0.5", "l0.max_steps=-1"], "l0.max_steps=-1: give a number of updates"),
    (["method=l0", "prune_fraction=0.5", "l0.minutes=inf"], "l0.minutes=inf: give the wall-clock budget"),
    (["method=l0", "prune_fraction=0.5", "l0.gate_lr=-0.05"], "l0.gate_lr=-0.05: give the gates'"),
    (["method=l0", "prune_fraction=0.5", "l0.batch_tokens=0"], "l0.batch_tokens=0: give 8 or"),
    # found only after the whole study before: the study's work would be lost
    (["max_bleu_loss=-1"], "max_bleu_loss=-1: give the val BLEU"),
    (["max_bleu_loss=nan"], "max_bleu_loss=nan: give the val BLEU"),
    (["finetune.minutes=nan"], "finetune.minutes=nan: give minutes of training"),
    (["finetune.lr=fast"], "finetune.lr='fast' has type str; expected float (the peak"),
    (["leave_one_out=no"], "leave_one_out='no' has type str; expected bool (true:"),
    (["prune_fraction=half"], "prune_fraction='half' has type str; expected float or null"),
])
def test_bad_gate_settings_are_one_line_errors(toy_run, overrides, message):
    done = run_script("heads", f"ckpt={toy_run}", *overrides)
    err = done.stderr.decode()
    assert done.returncode == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"error: {message}")
