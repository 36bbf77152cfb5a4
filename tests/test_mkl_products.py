"""train.precision=bfloat16-mkl: oneMKL's bfloat16 products (``mtx_mkl_dense``) against NumPy on
the same bfloat16-rounded operands, forward and both gradients, imperative and hybridized; a
model in that precision against float32; without oneMKL, one line and float32's products.

Where oneMKL is not installed (``make install`` adds it on CPUs with AMX only; MKL=1 anywhere)
the tests of the products themselves are skipped with that reason; the fallback's are not."""
import json
import os
import subprocess
import sys

import numpy as onp
import pytest
import mxnet as mx
from mxnet import autograd, np

from mtx.errors import ConfigError
from mtx.kernels import mkl
from mtx.model.precision import MKL_BFLOAT16, Linear, fully_connected, set_precision
from mtx.model.transformer import Transformer
from mtx.training import precision
from tests.conftest import ROOT

needs_mkl = pytest.mark.skipif(mkl.unavailable() is not None,
                               reason=f"oneMKL's products cannot run here: {mkl.unavailable()}")


def bf16(a):
    """``a`` rounded to bfloat16 (to nearest, ties to even) and widened back, in float64."""
    bits = onp.asarray(a, dtype=onp.float32).view(onp.uint32).astype(onp.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(onp.uint32).view(onp.float32).astype(onp.float64)


@needs_mkl
@pytest.mark.parametrize("shape, n_out, with_bias", [((3, 7, 40), 24, True), ((50, 33), 17, False),
                                                       ((2, 5, 16), 8000, True)])
def test_products_and_both_gradients_are_numpys_on_bfloat16_operands(shape, n_out, with_bias):
    """y = bf16(x) bf16(w)^T + b, dx = bf16(dy) bf16(w), dw = bf16(dy)^T bf16(x), db = sum dy, to
    float32 accumulation: a product of truncated or unrounded operands is ~1e-3 off, not 1e-5."""
    rng = onp.random.RandomState(0)
    x, w, b = (rng.randn(*s).astype("float32") for s in (shape, (n_out, shape[-1]), (n_out,)))
    dy = rng.randn(*shape[:-1], n_out).astype("float32")
    args = [np.array(a) for a in (x, w) + ((b,) if with_bias else ())]
    for a in args:
        a.attach_grad()
    with autograd.record():
        y = fully_connected(mx.nd, args[0], args[1], args[2] if with_bias else None, n_out,
                            MKL_BFLOAT16)
    y.backward(np.array(dy))
    x2, dy2 = bf16(x).reshape(-1, shape[-1]), bf16(dy).reshape(-1, n_out)
    expected_y = x2 @ bf16(w).T + (b if with_bias else 0)
    scale = onp.abs(x2).max() * onp.abs(bf16(w)).max() * shape[-1]
    assert y.dtype == onp.float32 and y.shape == shape[:-1] + (n_out,)
    assert onp.abs(y.asnumpy().reshape(expected_y.shape) - expected_y).max() < 1e-6 * scale
    grads = {"x": (dy2 @ bf16(w)).reshape(shape), "w": dy2.T @ x2}
    for name, arg in zip(("x", "w"), args):
        assert onp.allclose(arg.grad.asnumpy(), grads[name], rtol=1e-5, atol=1e-5 * scale), name
    if with_bias:
        db = dy.astype(onp.float64).reshape(-1, n_out).sum(0)  # of dy as it is, not rounded
        assert onp.allclose(args[2].grad.asnumpy(), db, rtol=1e-5, atol=1e-4)


@needs_mkl
@pytest.mark.parametrize("hybridize", [False, True])
def test_a_model_in_bfloat16_mkl_computes_float32_s_logits_within_bfloat16(hybridize, tiny_cfg):
    """The tiny Transformer's logits with oneMKL's products against its own float32 ones: within
    bfloat16's rounding, float32 out (no cast for the loss), and the same weights' gradients."""
    model = Transformer(tiny_cfg)
    model.initialize(mx.init.Xavier())
    src = np.array(onp.random.RandomState(1).randint(3, 30, (2, 6)), dtype="int32")
    src_len = np.array([6, 4], dtype="int32")
    outputs = {}
    for name in ("float32", MKL_BFLOAT16):
        set_precision(model, name)
        if hybridize:
            model.hybridize(static_alloc=True)  # a new trace for each precision
        outputs[name] = model(src, src_len, src).asnumpy()
    assert outputs[MKL_BFLOAT16].dtype == onp.float32
    spread = onp.abs(outputs["float32"]).max()
    assert onp.abs(outputs[MKL_BFLOAT16] - outputs["float32"]).max() < 0.02 * spread
    assert not onp.array_equal(outputs[MKL_BFLOAT16], outputs["float32"])  # really bfloat16


def test_without_onemkl_its_precision_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(mkl, "_status", {})
    monkeypatch.setenv("MTX_MKL", "0")
    assert mkl.unavailable() == "MTX_MKL=0 is set"
    with pytest.raises(ConfigError) as refused:
        precision.check_device(MKL_BFLOAT16, [mx.cpu()])
    message = str(refused.value)
    assert "\n" not in message and message.startswith("train.precision=bfloat16-mkl cannot run "
                                                      "here: MTX_MKL=0 is set; use")
    with pytest.raises(ValueError, match="MTX_MKL=0 is set"):
        set_precision(Linear(4, in_units=4), MKL_BFLOAT16)
    monkeypatch.setattr(mkl, "library", lambda: None)
    monkeypatch.setattr(mkl, "_status", {})
    monkeypatch.delenv("MTX_MKL")
    assert mkl.unavailable() == f"oneMKL is not installed: {mkl.INSTALL_HINT}"


def test_without_onemkl_auto_times_mxnets_products_and_says_why_not_onemkls():
    """The real child probe with MTX_MKL=0: float32 and MXNet's bfloat16 timed, oneMKL's not,
    and the reason in the choice's line (a run goes on with MXNet's products)."""
    env = {**os.environ, "MTX_MKL": "0", "PYTHONPATH": str(ROOT)}
    code = ("import json; from mtx.training.precision import probe_choice; "
            "print(json.dumps(probe_choice()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300, check=True)
    choice = json.loads(done.stdout.strip().splitlines()[-1])
    assert choice["used"] in ("float32", "bfloat16")
    if "probe" in choice:  # bfloat16 runs here: both timed, oneMKL named as not timed
        assert choice["reason"].endswith("(bfloat16-mkl not timed: MTX_MKL=0 is set)")
        assert "bfloat16_mkl_gflop_s" not in choice["probe"]


@needs_mkl
def test_a_run_translates_with_onemkls_products_as_with_float32(toy_run):
    """decode.precision=bfloat16-mkl loads the run with oneMKL's products in every dense layer and
    the memorised toy task translates as in float32."""
    from mtx.config import DecodeConfig
    from mtx.decoding.search import Translator, load_decoder
    lines = ["w1 w2 w3", "w7 w3 w9 w4 w2", "w5"]
    outputs = {}
    for name in ("float32", MKL_BFLOAT16):
        model, tokenizer, _ = load_decoder(toy_run, mx.cpu(), precision=name)
        dtypes = {b.compute_dtype for b in _blocks(model) if hasattr(type(b), "compute_dtype")}
        assert dtypes == {name}
        outputs[name] = Translator(model, tokenizer, DecodeConfig(), mx.cpu()).translate(lines)
    assert outputs[MKL_BFLOAT16] == outputs["float32"] and all(outputs["float32"])


def _blocks(model):
    found = []
    model.apply(found.append)
    return found


def test_decode_precision_that_cannot_run_is_one_line_before_translating(toy_run):
    from tests.conftest import run_script
    done = run_script("translate", f"ckpt={toy_run}", "decode.precision=bfloat16-mkl",
                      stdin=b"w1 w2 w3\n", env={"MTX_MKL": "0"})
    from tests.test_cli import assert_one_line
    line = assert_one_line(done.stderr, done.returncode, 2)
    assert done.stdout == b"" and line == ("error: decode.precision=bfloat16-mkl cannot run here: "
                                           "MTX_MKL=0 is set; use decode.precision=float32")


def test_a_ctranslate2_export_refuses_onemkls_precision_in_one_line():
    from mtx.config import DecodeConfig
    from mtx.deploy.backend import translator_for
    with pytest.raises(ConfigError, match=r"^decode.precision=bfloat16-mkl is for mtx's own "
                                          r"decoder; CTranslate2 computes in"):
        translator_for("no-such-export", "auto", "cpu", DecodeConfig(precision=MKL_BFLOAT16))
