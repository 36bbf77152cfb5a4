"""mtx's native kernels (mtx.kernels) and the legacy-operator paths (mtx.model.ops): same numbers as
MXNet's own operators, forward and backward, imperative and hybridized; the kernels' private
cache, its SHA-256 records and key, and the fallback to MXNet's LayerNorm with one warning.

Cache tests run a fresh Python with ``MTX_KERNEL_CACHE`` in a temporary directory (never the
user's cache) and a stand-in compiler: a script that fails, or one that "compiles" by copying
the library this process built, so only that one real compile happens."""
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as onp
import pytest
from mxnet import autograd, np
from mxnet import ndarray as mx_nd
from mxnet.gluon import nn

from mtx import kernels
from mtx.model import ops
from mtx.files import sha256_of
from mtx.model.layers import LayerNorm
from mtx.training.loss import LabelSmoothedCrossEntropy, SymmetricKL

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


def _loss_block(native, make, hybridize):
    """The loss block ``make()`` builds, with mtx's fused operator (``native``) or MXNet's."""
    from mtx.training import loss as loss_module
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loss_module.kernels, "load", lambda: native)
        block = make()
    block.initialize()
    if hybridize:
        block.hybridize(static_alloc=True)
    return block


def _loss_and_grads(native, logits, labels, lengths, eps, hybridize, nll_weight,
                    prepare=lambda logits: logits):
    """(smoothed loss sum, nll sum, d logits) of LabelSmoothedCrossEntropy, fused or composed,
    of ``prepare(logits)`` (recorded: its backward brings the gradient to ``logits``); backward
    from loss + nll_weight * nll (the trainer's backward is loss alone)."""
    loss_fn = _loss_block(native, lambda: LabelSmoothedCrossEntropy(logits.shape[-1], eps),
                          hybridize)
    logits = logits.copy()
    logits.attach_grad()
    with autograd.record():
        loss, nll = loss_fn(prepare(logits), labels, lengths)
        total = loss + nll_weight * nll
    total.backward()
    return float(loss), float(nll), logits.grad.asnumpy()


@needs_compiler
@pytest.mark.parametrize("hybridize,eps,label_dtype,nll_weight", [
    (False, 0.1, "int32", 0.0), (True, 0.1, "int32", 0.0), (True, 0.0, "float32", 0.5),
    (False, 0.3, "float32", 1.0)])
def test_fused_cross_entropy_matches_the_composed_one(hybridize, eps, label_dtype, nll_weight):
    """mtx_smoothed_ce against log_softmax + pick + the smoothing product: both sums and the
    logits' gradient, masked positions (gradient exactly zero there) included, with logits far
    from zero (the kernel's exp must hold over the whole range softmax meets)."""
    assert kernels.load()
    rng = onp.random.RandomState(0)
    B, T, V = 3, 5, 301
    logits = np.array(rng.normal(0, 8, size=(B, T, V)) + 50, dtype="float32")
    labels = np.array(rng.randint(0, V, size=(B, T)), dtype=label_dtype)
    lengths = np.array([5, 2, 0], dtype="int32")
    ours = _loss_and_grads(True, logits, labels, lengths, eps, hybridize, nll_weight)
    reference = _loss_and_grads(False, logits, labels, lengths, eps, hybridize, nll_weight)
    onp.testing.assert_allclose(ours[:2], reference[:2], rtol=1e-5)
    onp.testing.assert_allclose(ours[2], reference[2], rtol=1e-4, atol=1e-6)
    assert (ours[2][1, 2:] == 0).all() and (ours[2][2] == 0).all()  # masked: exact zeros
    assert abs(ours[2][0]).max() > 0.1  # not a trivial gradient


def _to_bfloat16(array):
    from mxnet.contrib.amp.amp import bfloat16
    return mx_nd.amp_cast(array.as_nd_ndarray(), dtype=bfloat16).as_np_ndarray()


def _to_float32(array):
    return mx_nd.amp_cast(array.as_nd_ndarray(), dtype="float32").as_np_ndarray()


@needs_compiler
@pytest.mark.parametrize("hybridize", [False, True])
def test_fused_cross_entropy_reads_bfloat16_logits_and_writes_a_bfloat16_gradient(hybridize):
    """bfloat16 logits (the output layer's product with bfloat16 products) give the loss of
    their float32 values, and a bfloat16 gradient that is the float32 gradient cast as MXNet
    casts it (to nearest, ties to even), within one rounding: no float32 copy of the logits.
    (MXNet's NumPy interface cannot copy a bfloat16 array: they are made inside the record.)"""
    assert kernels.load()
    rng = onp.random.RandomState(2)
    B, T, V = 3, 5, 301
    logits = np.array(rng.normal(0, 8, size=(B, T, V)) + 50, dtype="float32")
    labels = np.array(rng.randint(0, V, size=(B, T)), dtype="int32")
    lengths = np.array([5, 2, 0], dtype="int32")
    loss, nll, grad = _loss_and_grads(True, logits, labels, lengths, 0.1, hybridize, 0.5,
                                      prepare=_to_bfloat16)  # grad: bfloat16's, widened
    widened = _to_float32(_to_bfloat16(logits))
    reference = _loss_and_grads(True, widened, labels, lengths, 0.1, hybridize, 0.5)
    onp.testing.assert_allclose([loss, nll], reference[:2], rtol=1e-6)
    rounded = _to_float32(_to_bfloat16(np.array(reference[2]))).asnumpy()
    onp.testing.assert_allclose(grad, rounded, rtol=2 ** -7, atol=1e-9)
    assert (grad == rounded).mean() > 0.99  # the same rounding, not merely close
    assert (grad[1, 2:] == 0).all() and (grad[2] == 0).all() and abs(grad[0]).max() > 0.1


def _symmetric_kl_and_grad(native, logits, lengths, hybridize):
    """(SymmetricKL's sum, d logits), fused or composed."""
    kl_fn = _loss_block(native, SymmetricKL, hybridize)
    logits = logits.copy()
    logits.attach_grad()
    with autograd.record():
        total = kl_fn(logits, lengths)
    total.backward()
    return float(total), logits.grad.asnumpy()


@needs_compiler
@pytest.mark.parametrize("hybridize", [False, True])
def test_fused_symmetric_kl_matches_the_composed_one_and_the_formula(hybridize):
    """mtx_symmetric_kl against MXNet's composition and against numpy's sum over the valid
    positions of KL(p || q) + KL(q || p) (row b paired with row B + b); the logits' gradient of
    both passes, exactly zero at masked positions, on logits far from zero."""
    assert kernels.load()
    rng = onp.random.RandomState(1)
    B, T, V = 3, 4, 257
    z = rng.normal(0, 4, size=(2 * B, T, V)).astype("float32") + 30
    z[B:] += rng.normal(0, 1, size=(B, T, V)).astype("float32")  # the second pass differs
    lengths = np.array([4, 1, 0], dtype="int32")
    ours = _symmetric_kl_and_grad(True, np.array(z), lengths, hybridize)
    reference = _symmetric_kl_and_grad(False, np.array(z), lengths, hybridize)
    shifted = z.astype("float64") - z.max(-1, keepdims=True)
    log_p = shifted - onp.log(onp.exp(shifted).sum(-1, keepdims=True))  # (2B, T, V)
    both = ((onp.exp(log_p[:B]) - onp.exp(log_p[B:])) * (log_p[:B] - log_p[B:])).sum(-1)
    expected = both[0].sum() + both[1, 0]  # lengths 4, 1, 0
    assert ours[0] == pytest.approx(expected, rel=1e-4) and expected > 1.0
    assert reference[0] == pytest.approx(expected, rel=1e-4)
    onp.testing.assert_allclose(ours[1], reference[1], rtol=1e-3, atol=1e-6)
    for row in (1, 1 + B):
        assert (ours[1][row, 1:] == 0).all()
    assert (ours[1][2] == 0).all() and (ours[1][2 + B] == 0).all()
    assert abs(ours[1][0]).max() > 0.01 and abs(ours[1][B]).max() > 0.01


@needs_compiler
@pytest.mark.parametrize("k", [1, 5, 301])
def test_fused_top_log_probs_match_log_softmax_then_topk(k):
    """mtx_top_log_probs against MXNet's log_softmax + topk: the same ids in the same order and
    the same log-probabilities, on logits far from zero; of two equal logits the lower id comes
    first (MXNet's topk orders ties one way or the other)."""
    assert kernels.load()
    rng = onp.random.RandomState(0)
    logits = rng.normal(0, 8, size=(7, 301)).astype("float32") + 50
    logits[3, [10, 20]] = logits[3].max() + 1.0  # two best tokens of equal logits
    x = np.array(logits)
    ours = [a.asnumpy() for a in ops.top_log_probs(mx_nd, x, k, native=True)]
    theirs = [a.asnumpy() for a in ops.top_log_probs(mx_nd, x, k, native=False)]
    untied = [0, 1, 2, 4, 5, 6]
    onp.testing.assert_array_equal(ours[1][untied], theirs[1][untied])
    assert ours[1][3, 0] == 10 and (k == 1 or ours[1][3, 1] == 20)
    onp.testing.assert_array_equal(ours[1][3, 2:], theirs[1][3, 2:])
    onp.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)
    assert (onp.diff(ours[0], axis=1) <= 0).all()


@needs_compiler
@pytest.mark.parametrize("with_new", [False, True])
def test_cached_attention_matches_the_softmax_over_the_valid_keys(with_new):
    """mtx_cached_attention against the formula in NumPy: each query's softmax over the first
    lens keys (with_new: the new key and the first lens - 1 cached ones), garbage past them
    ignored, a group with no key all zeros; in a traced graph as imperatively."""
    assert kernels.load()
    rng = onp.random.RandomState(0)
    N, Q, L, Dh, scale = 6, 1 if with_new else 3, 9, 8, 0.35
    q, keys, values = (rng.normal(size=shape).astype("float32")
                       for shape in ((N, Q, Dh), (N, L, Dh), (N, L, Dh)))
    new_k, new_v = (rng.normal(size=(N, 1, Dh)).astype("float32") for _ in range(2))
    lens = onp.array([0, 1, 2, 5, L, L + int(with_new)], dtype="float32")
    want = onp.zeros((N, Q, Dh), dtype="float32")
    for n in range(N):
        cached = int(lens[n]) - int(with_new) if lens[n] else 0
        keys[n, cached:], values[n, cached:] = 1e3, -1e3  # past the group's keys: not read
        k = onp.concatenate([new_k[n], keys[n, :cached]]) if with_new else keys[n, :cached]
        v = onp.concatenate([new_v[n], values[n, :cached]]) if with_new else values[n, :cached]
        if len(k):
            w = onp.exp(scale * q[n] @ k.T - (scale * q[n] @ k.T).max(axis=-1, keepdims=True))
            want[n] = (w / w.sum(axis=-1, keepdims=True)) @ v
    arrays = [np.array(a) for a in (q, keys, values, lens, new_k, new_v)]
    new = (arrays[4], arrays[5]) if with_new else None
    got = ops.cached_attention(mx_nd, *arrays[:4], scale, new).asnumpy()
    onp.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert with_new or not got[0].any()  # no key at all: zeros

    class Attend(nn.HybridBlock):
        def hybrid_forward(self, F, *xs):
            return ops.cached_attention(F, *xs[:4], scale, xs[4:] if with_new else None)
    block = Attend()
    block.hybridize(static_alloc=True)
    traced = block(*arrays[:4], *(arrays[4:] if with_new else [])).asnumpy()
    onp.testing.assert_array_equal(traced, got)


def test_layer_norm_keeps_the_parameter_names_of_nn_layer_norm():
    """Checkpoints of models built with nn.LayerNorm load into models built with ours."""
    assert (sorted(LayerNorm(prefix="n_").collect_params())
            == sorted(nn.LayerNorm(prefix="n_").collect_params()))


def test_without_native_kernels_mtx_runs_mxnets_layer_norm():
    code = ("import mtx.kernels as k, mtx.model.layers as l, mxnet as mx; mx.npx.set_np(); "
            "n = l.LayerNorm(in_channels=4); n.initialize(); l.LayerNorm(in_channels=4); "
            "print(k.load(), float(n(mx.np.arange(8.).reshape(2, 4)).sum()))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={"MTX_NATIVE_KERNELS": "0", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    loaded, total = done.stdout.split()
    assert loaded == "False" and abs(float(total)) < 1e-4
    assert done.stderr.count("NativeKernelWarning:") == 1, done.stderr  # two layers, one warning
    assert "MTX_NATIVE_KERNELS=0" in done.stderr


# A tiny Transformer, hybridized, one forward pass; prints kernels.status() and whether the
# logits are finite.
MODEL_RUNS = """
import json
from mtx import kernels
from mtx.config import ModelConfig
from mxnet import np, npx
npx.set_np()
from mtx.model.transformer import Transformer
cfg = ModelConfig(num_hiddens=16, num_heads=2, ffn_num_hiddens=32, num_encoder_layers=1,
                  num_decoder_layers=1, dropout=0.0, attention_dropout=0.0, max_len=32,
                  vocab_size=30)
net = Transformer(cfg)
net.initialize()
net.hybridize()
tokens = np.array([[3, 4, 5]], dtype="int32")
logits = net(tokens, np.array([3], dtype="int32"), tokens)
print(json.dumps(dict(kernels.status(), finite=bool(np.isfinite(logits).all()))))
"""


def _run_model(cache, cwd=None, **env):
    """MODEL_RUNS in a fresh Python (in ``cwd``) whose kernel cache is ``cache``; (status dict,
    number of NativeKernelWarnings it printed)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("MTX_") and k not in ("CXX", "CXXFLAGS")}
    full_env.update(MTX_KERNEL_CACHE=str(cache), OMP_NUM_THREADS="1", **env)
    done = subprocess.run([sys.executable, "-c", MODEL_RUNS], capture_output=True, text=True,
                          env=full_env, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result.pop("finite"), "the model's logits are not finite"
    return result, done.stderr.count("NativeKernelWarning:")


def _script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def good_library():
    """The library this process built and loaded (skips without a compiler)."""
    if not kernels.load():
        pytest.skip(f"no native kernels here: {kernels.status()['reason']}")
    return Path(kernels.status()["library"])


@pytest.fixture
def copying_cxx(tmp_path, good_library):
    """A stand-in compiler: prints a version, and "compiles" by copying `good_library` to the
    ``-o`` path; each compile appends a line to the returned ``calls`` file."""
    calls = tmp_path / "calls"
    cxx = _script(tmp_path / "fake-c++", f"""
if [ "$1" = "--version" ]; then echo "fake-c++ 1.0"; exit 0; fi
echo compile >> {shlex.quote(str(calls))}
while [ "$#" -gt 1 ]; do
  if [ "$1" = "-o" ]; then cp {shlex.quote(str(good_library))} "$2"; exit 0; fi
  shift
done
exit 1
""")
    return cxx, calls


def test_a_kernel_that_does_not_compile_falls_back_with_one_warning(tmp_path):
    cxx = _script(tmp_path / "broken-c++", "echo 'broken-c++: error: no' >&2; exit 1\n")
    cache = tmp_path / "home" / "cache" / "kernels"
    status, warned = _run_model(cache, CXX=str(cxx))
    assert warned == 1
    assert status == {"native_layer_norm": False, "library": None,
                      "reason": "compiling the kernels failed (broken-c++: error: no)"}
    assert (cache.stat().st_mode & 0o777) == 0o700  # created private, with its parents
    assert not list(cache.glob("*.so"))


def test_the_cache_directory_is_created_private(tmp_path):
    made = kernels.private_dir(tmp_path / "a" / "b")
    assert made.is_dir() and (made.stat().st_mode & 0o777) == 0o700


def test_a_cache_directory_others_may_access_is_not_used(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o755)
    status, warned = _run_model(cache, CXX="/bin/false")
    assert warned == 1 and not status["native_layer_norm"]
    assert "not a private directory" in status["reason"]


@needs_compiler
def test_a_built_library_is_recorded_and_reused(tmp_path, copying_cxx):
    cxx, calls = copying_cxx
    cache = tmp_path / "cache"
    for _ in range(2):
        status, warned = _run_model(cache, CXX=str(cxx))
        assert status["native_layer_norm"] and status["reason"] == "loaded" and warned == 0
    library = Path(status["library"])
    assert library.parent == cache and library.name.startswith("libmtx_kernels-")
    assert kernels.record_path(library).read_text() == f"{sha256_of(library)}  {library.name}\n"
    assert calls.read_text().splitlines() == ["compile"]  # the second run reused it


@needs_compiler
def test_a_cache_given_as_the_working_directory_loads(tmp_path, copying_cxx):
    """MTX_KERNEL_CACHE=. names the library by a bare file name, which dlopen would look
    for on the system's library path, not here."""
    cxx, _ = copying_cxx
    here = kernels.private_dir(tmp_path / "here")
    status, warned = _run_model(".", cwd=here, CXX=str(cxx))
    assert status["native_layer_norm"] and status["reason"] == "loaded" and warned == 0
    assert (here / status["library"]).is_file()


@needs_compiler
def test_a_library_that_does_not_match_its_record_is_rebuilt_not_loaded(
        tmp_path, copying_cxx, good_library, monkeypatch):
    cxx, calls = copying_cxx
    cache = kernels.private_dir(tmp_path / "cache")
    monkeypatch.setenv("MTX_KERNEL_CACHE", str(cache))
    monkeypatch.setenv("CXX", str(cxx))
    monkeypatch.delenv("CXXFLAGS", raising=False)
    library = kernels.library_path()  # where the subprocess will look
    library.write_bytes(b"not the library that was built")
    kernels.record_path(library).write_text(f"{sha256_of(good_library)}  {library.name}\n")
    status, warned = _run_model(cache, CXX=str(cxx))
    assert warned == 1 and calls.read_text().splitlines() == ["compile"]
    assert status["native_layer_norm"] and status["library"] == str(library)
    assert library.read_bytes() == good_library.read_bytes()


def test_the_cache_key_changes_with_the_compiler_and_its_flags(tmp_path, monkeypatch):
    monkeypatch.delenv("CXXFLAGS", raising=False)
    keys = {}
    for version in ["1.0", "2.0"]:
        cxx = _script(tmp_path / f"c++-{version}", f"echo 'fake-c++ {version}'\n")
        monkeypatch.setenv("CXX", str(cxx))
        keys[version] = kernels.cache_key()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.setenv("CXX", str(shutil.copy(cxx, tmp_path / "elsewhere" / "c++-2.0")))
    keys["same version, other path"] = kernels.cache_key()
    monkeypatch.setenv("CXXFLAGS", "-DNDEBUG")
    keys["flags"] = kernels.cache_key()
    assert len(set(keys.values())) == 4, keys
    assert kernels.cache_key() == keys["flags"]  # and stable


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


def test_the_cache_key_changes_with_the_cpu_flags(monkeypatch):
    """A library built with -march=native on one CPU is never loaded on another kind."""
    monkeypatch.delenv("CXXFLAGS", raising=False)
    monkeypatch.setattr(kernels, "flags_line", lambda: "avx avx2 fma")
    avx2 = kernels.cache_key()
    monkeypatch.setattr(kernels, "flags_line", lambda: "avx avx2 avx512f avx512bw fma")
    assert kernels.cache_key() != avx2


LOAD_IN_A_FRESH_PYTHON = """
import json, sys
import mtx.compat
import mxnet as mx
from mtx.kernels.registry import load_library
layer_norm, sym_layer_norm = mx.nd.LayerNorm, mx.sym.LayerNorm
added = load_library(sys.argv[1])
print(json.dumps({
    "added": added,
    "untouched": mx.nd.LayerNorm is layer_norm and mx.sym.LayerNorm is sym_layer_norm,
    "nd": [n for n in added if callable(getattr(mx.nd, n, None)) and n in mx.nd.op.__all__],
    "sym": [n for n in added if callable(getattr(mx.sym, n, None)) and n in mx.sym.op.__all__],
    "internal": [n for n in added if hasattr(mx.nd._internal, n) and hasattr(mx.sym._internal, n)],
}))
"""


@needs_compiler
def test_loading_the_library_registers_its_operators_and_remakes_no_other():
    assert kernels.load()
    done = subprocess.run([sys.executable, "-c", LOAD_IN_A_FRESH_PYTHON,
                           kernels.status()["library"]], capture_output=True, text=True,
                          timeout=300, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    public = ["mtx_cached_attention", "mtx_layer_norm", "mtx_mkl_dense", "mtx_smoothed_ce",
              "mtx_symmetric_kl", "mtx_top_log_probs"]
    backward = ["_backward_mtx_layer_norm", "_backward_mtx_mkl_dense",
                "_backward_mtx_smoothed_ce", "_backward_mtx_symmetric_kl"]
    assert report["added"] == sorted(public + backward)
    assert report["untouched"], "MXNet's own operator functions were made again"
    assert report["nd"] == report["sym"] == public
    assert report["internal"] == backward
