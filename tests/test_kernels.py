"""mtx's native kernels (mtx.kernels) and the legacy-operator paths (mtx.ops): same numbers as
MXNet's own operators, forward and backward, imperative and hybridized."""
import shutil
import subprocess
import sys

import numpy as onp
import pytest
from mxnet import autograd, np
from mxnet.gluon import nn

from mtx import kernels, ops
from mtx.layers import LayerNorm

needs_compiler = pytest.mark.skipif(shutil.which("g++") is None,
                                    reason="the native kernels need a C++ compiler (g++)")


def _norm_and_grads(block, x, dy, hybridize):
    block.initialize()
    block.gamma.set_data(np.array(onp.linspace(0.5, 1.5, x.shape[-1]), dtype="float32"))
    block.beta.set_data(np.array(onp.linspace(-1, 1, x.shape[-1]), dtype="float32"))
    if hybridize:
        block.hybridize(static_alloc=True)
    x = x.copy()
    x.attach_grad()
    with autograd.record():
        y = block(x)
    y.backward(dy)
    return [a.asnumpy() for a in (y, x.grad, block.gamma.grad(), block.beta.grad())]


@needs_compiler
def test_native_kernels_build_and_load():
    assert kernels.load(), "the native kernels did not build although g++ is installed"
    assert kernels.library_path().exists()


@needs_compiler
@pytest.mark.parametrize("hybridize", [False, True])
def test_native_layer_norm_matches_mxnet(hybridize):
    assert kernels.load()
    x = np.array(onp.random.normal(2.0, 3.0, size=(4, 7, 48)), dtype="float32")
    dy = np.array(onp.random.normal(size=x.shape), dtype="float32")
    ours = _norm_and_grads(LayerNorm(in_channels=48), x, dy, hybridize)
    reference = _norm_and_grads(nn.LayerNorm(in_channels=48), x, dy, hybridize)
    for name, a, b in zip(["output", "d_input", "d_gamma", "d_beta"], ours, reference):
        onp.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=name)
    assert abs(ours[0].mean(axis=-1)).max() > 0.1  # beta shifted it: not a trivial output


def test_layer_norm_keeps_the_parameter_names_of_nn_layer_norm():
    """Checkpoints of models built with nn.LayerNorm load into models built with ours."""
    assert (sorted(LayerNorm(prefix="n_").collect_params())
            == sorted(nn.LayerNorm(prefix="n_").collect_params()))


def test_without_native_kernels_mtx_runs_mxnets_layer_norm():
    code = ("import mtx.kernels as k, mtx.layers as l, mxnet as mx; mx.npx.set_np(); "
            "n = l.LayerNorm(in_channels=4); n.initialize(); "
            "print(k.load(), float(n(mx.np.arange(8.).reshape(2, 4)).sum()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"MTX_NATIVE_KERNELS": "0", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    loaded, total = done.stdout.split()
    assert loaded == "False" and abs(float(total)) < 1e-4


@pytest.mark.parametrize("hybridize", [False, True])
def test_legacy_ops_match_the_numpy_interface(hybridize):
    class Block(nn.HybridBlock):
        def hybrid_forward(self, F, a, b):
            t = ops.transpose(F, a, (0, 2, 1, 3))
            return ops.add(F, ops.scale(F, t, 0.5), b)

    a = np.array(onp.random.normal(size=(2, 3, 4, 5)), dtype="float32")
    b = np.array(onp.random.normal(size=(2, 4, 3, 5)), dtype="float32")
    block = Block()
    if hybridize:
        block.hybridize()
    summed = block(a, b)
    assert isinstance(summed, np.ndarray)
    onp.testing.assert_allclose(summed.asnumpy(),
                                0.5 * a.asnumpy().transpose(0, 2, 1, 3) + b.asnumpy(), rtol=1e-6)
