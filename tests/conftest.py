"""Shared test setup: numpy mode, fixed seeds, and the model configurations tests build
(`model_config`)."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as onp
import pytest

from mtx.config import ModelConfig  # mtx first: it prepares numpy for MXNet (mtx.compat)
from mtx.typecheck import from_dict  # noqa: E402
import mxnet as mx  # noqa: E402
from mxnet import npx  # noqa: E402

npx.set_np()


@pytest.fixture(autouse=True)
def fixed_seeds():
    """Every test starts from the same random state (MXNet's generator and NumPy's)."""
    mx.random.seed(0)
    onp.random.seed(0)


# The model tests train and compare: width 16, 2 heads, FFN 32, one layer a side.
TEST_MODEL = {"num_hiddens": 16, "num_heads": 2, "ffn_num_hiddens": 32, "num_encoder_layers": 1,
              "num_decoder_layers": 1}


def model_config(base=TEST_MODEL, **keys):
    """The one way tests build a ModelConfig: ``base`` ({key: value}; `TEST_MODEL`, or {} for
    the declared defaults) with ``keys`` changed, under the keys users type (model.<key>) and
    through `mtx.typecheck.from_dict` as a command's config, so a renamed setting's old key
    (ModelConfig.RENAMED) still works here and no test names a field."""
    return from_dict(ModelConfig, {**base, **keys}, "model")


@pytest.fixture
def tiny_cfg():
    """2 layers each side, D=16, H=2, V=30, no dropout: small enough for exact comparisons."""
    return model_config(num_encoder_layers=2, num_decoder_layers=2, dropout=0.0,
                        attention_dropout=0.0, max_len=32, vocab_size=30)


ROOT = Path(__file__).resolve().parents[1]


def run_script(name, *overrides, stdin=None, cwd=None, env=None, timeout=600):
    """Run scripts/<name>.py as a user would; returns the CompletedProcess (bytes)."""
    full_env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    full_env.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "scripts" / f"{name}.py"), *overrides],
                          input=stdin, capture_output=True, cwd=cwd or ROOT, env=full_env,
                          timeout=timeout)


@pytest.fixture(scope="session")
def multi30k_dir():
    """The folder of Multi30k's training splits (en, de, fr), found where mtx finds them: a local
    copy (MTX_MULTI30K_DIR; the Makefile sets it to a copy beside the checkout), else the data
    directory's multi30k/ (`make data`), downloaded there when missing; every file checked
    against mtx's own SHA-256 table. Without the files and a network, one line says what to do."""
    from mtx.data.multi30k import training_folder
    from mtx.datadir import data_dir
    from mtx.errors import DataError
    try:
        return training_folder(os.environ.get("MTX_MULTI30K_DIR") or None, data_dir())
    except DataError as err:
        pytest.fail(f"the tests need Multi30k: {err}", pytrace=False)


def run_command(name, *overrides, stdin=None, cwd, env=None, timeout=600):
    """Run the installed command ``mtx-<name>`` (pyproject [project.scripts]) in ``cwd``."""
    full_env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    full_env.update(env or {})
    return subprocess.run([str(Path(sys.executable).parent / f"mtx-{name}"), *overrides],
                          input=stdin, capture_output=True, cwd=cwd, env=full_env,
                          timeout=timeout)


@pytest.fixture(scope="session")
def toy_run(tmp_path_factory):
    """A model trained on the toy reversal task by the command ``mtx-train``, run from a
    directory outside the checkout (about a minute), in float32: ``train.precision=auto`` could
    pick bfloat16 on another CPU and the tests that read its translations would then see other
    weights (auto is tested with a faked probe, tests/test_precision_auto.py).
    MTX_TEST_TOY_RUN=<dir> keeps it there between sessions (for development; CI trains anew)."""
    keep = os.environ.get("MTX_TEST_TOY_RUN")
    if keep and (Path(keep) / "report.json").is_file():
        return Path(keep)
    run_dir = Path(keep) if keep else tmp_path_factory.mktemp("toy") / "run"
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    done = run_command("train", "experiment=toy", "train.precision=float32",
                       f"hydra.run.dir={run_dir}", cwd=elsewhere,
                       env={"MTX_DATA_DIR": str(run_dir.parent / "data")})
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert not any(elsewhere.iterdir()), "mtx-train wrote into its working directory"
    return run_dir


def pytest_collection_modifyitems(items):
    """A test that uses the trained toy run is slow (the run trains for about a minute)."""
    for item in items:
        if "toy_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
