"""The moving average of the weights (train.ema_decay): its arithmetic, where it is used
(validation, checkpoints, translation) and an exact resume."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import gluon, np

from mtx.config import TrainConfig
from mtx.errors import ConfigError
from mtx.model.transformer import Transformer
from mtx.training.ema import WeightAverage
from test_rundir import _fit, _params, _stop_after


def _shadow(fit):
    """The average, by the model's parameter names."""
    names = {id(p): k for k, p in fit.model._collect_params_with_prefix().items()}
    return {names[id(p)]: s.asnumpy() for p, s in zip(fit.pieces.ema.params, fit.pieces.ema.shadow)}


def _average_of(values, decay, start=0.0):
    """The average after weights ``values`` (one per update, from step 1), from ``start``."""
    param = gluon.Parameter("w", shape=(1,))
    param.initialize(mx.init.Constant(start), ctx=mx.cpu())
    ema, averages = WeightAverage([param], mx.cpu(), decay), []
    for step, value in enumerate(values, 1):
        param.set_data(np.full((1,), value))
        ema.update(step)
        averages.append(float(ema.shadow[0].asnumpy()[0]))
    return averages


def test_the_average_of_constant_weights_is_those_weights():
    assert _average_of([3.0] * 20, 0.999, start=3.0) == pytest.approx([3.0] * 20)


def test_the_average_leaves_the_initialisation_quickly_and_then_moves_slowly():
    """Weights that move from 0 (the initialisation) to 1: the average moves most of the way in
    the first steps, so it does not keep the random start for long. Later, when the weights
    jump, it follows by 1 - decay of the remaining way per step, and never overshoots."""
    early = _average_of([1.0] * 20, 0.9)
    assert early[0] > 0.5 and early[9] > 0.99
    late = _average_of([0.0] * 200 + [1.0] * 100, 0.9)[199:]  # the jump at step 201
    assert late[0] == 0.0
    steps = [(b - a) / (1 - a) for a, b in zip(late[:20], late[1:21])]
    assert steps == pytest.approx([0.1] * 20, rel=1e-3)
    assert all(a <= b <= 1 for a, b in zip(late, late[1:])) and late[-1] > 0.9999


def test_the_average_smooths_weights_that_swing():
    """Weights alternating between -1 and +1 average to nearly 0 (a tenth of the swing at
    decay 0.9), and more smoothing (a larger decay) swings less."""
    swings = {decay: max(abs(a) for a in _average_of([(-1.0) ** k for k in range(400)],
                                                     decay)[-50:])
              for decay in (0.9, 0.99)}
    assert swings[0.9] < 0.1 and swings[0.99] < swings[0.9]


def test_applied_lends_the_average_and_keeps_what_is_loaded():
    param = gluon.Parameter("w", shape=(2,))
    param.initialize(mx.init.Constant(3.0), ctx=mx.cpu())
    ema = WeightAverage([param], mx.cpu(), 0.5)
    ema.shadow[0] = np.array([7.0, 8.0])
    with ema.applied():
        assert param.data().asnumpy().tolist() == [7.0, 8.0]
        param.set_data(np.array([1.0, 2.0]))  # as loading a checkpoint's ema file does
    assert param.data().asnumpy().tolist() == [3.0, 3.0]
    assert ema.shadow[0].asnumpy().tolist() == [1.0, 2.0]


def test_a_run_validates_checkpoints_and_translates_the_average(tmp_path):
    fit = _fit(tmp_path, max_epochs=2, ema_decay=0.9)
    validated = []
    evaluate = fit.evaluate
    fit.evaluate = lambda split: (validated.append(_params(fit.model)), evaluate(split))[1]
    fit.run()
    run, shadow, raw = fit.run_dir, _shadow(fit), _params(fit.model)
    assert all(onp.array_equal(validated[-1][k], v) for k, v in shadow.items())  # validated
    assert any(not onp.allclose(raw[k], v) for k, v in shadow.items())  # and not the raw weights
    manifest = run.checkpoints.verify("latest")
    assert set(manifest["files"]) == {"params", "states", "ema"}
    for name in ("latest", "epoch_002"):  # translation loads the average ...
        model = Transformer(fit.model.cfg)
        run.checkpoints.load(run.checkpoints.verify(name), model, mx.cpu())
        loaded = _params(model)
        assert all(onp.array_equal(loaded[k], v) for k, v in shadow.items())
    resumed = _fit(tmp_path, max_epochs=2, ema_decay=0.9)  # ... a resume both
    assert resumed.restore()
    assert all(onp.array_equal(v, raw[k]) for k, v in _params(resumed.model).items())
    assert all(onp.array_equal(v, shadow[k]) for k, v in _shadow(resumed).items())


def test_a_resumed_run_continues_the_average_exactly(tmp_path):
    straight = _fit(tmp_path / "a", max_epochs=1, log_every=3, ema_decay=0.9)
    straight.run()
    first = _fit(tmp_path / "b", max_epochs=1, log_every=3, save_every_minutes=0, ema_decay=0.9)
    _stop_after(first, 7)
    with pytest.raises(KeyboardInterrupt):
        first.run()
    resumed = _fit(tmp_path / "b", max_epochs=1, log_every=3, save_every_minutes=0, ema_decay=0.9)
    assert resumed.restore() and resumed.state.batch_in_epoch == 7
    resumed.run()
    for name, value in _shadow(straight).items():
        assert onp.array_equal(value, _shadow(resumed)[name]), name


@pytest.mark.parametrize("decay", [-0.1, 1.0, 1.5])
def test_a_decay_outside_0_1_is_a_config_error(decay):
    with pytest.raises(ConfigError, match="train.ema_decay"):
        TrainConfig(ema_decay=decay)
