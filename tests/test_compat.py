"""mtx.compat: what MXNet 1.9.1 reads from older numpy is given back, and only that."""
import builtins
import subprocess
import sys
import types

import numpy
import pytest

from mtx.compat import IncompatibleEnvironment, restore_for_mxnet


def _numpy_like(version, **names):
    module = types.ModuleType("numpy")
    module.__version__ = version
    for name, value in names.items():
        setattr(module, name, value)
    return module


def test_missing_aliases_are_the_builtins_and_present_names_are_kept():
    own_int = object()
    fake = _numpy_like("1.26.4", int=own_int)
    restored = restore_for_mxnet(fake, version_info=(3, 11))
    assert restored == ["bool", "float", "complex", "object", "str"]
    assert fake.bool is bool and fake.float is float and fake.str is str
    assert fake.int is own_int


def test_numpy_2_is_refused_in_one_line_naming_the_fix():
    with pytest.raises(IncompatibleEnvironment) as refused:
        restore_for_mxnet(_numpy_like("2.1.3"), version_info=(3, 13))
    message = str(refused.value)
    assert "\n" not in message and "numpy < 2" in message and "numpy==1.26.4" in message


def test_a_python_without_distutils_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name: None if name == "distutils" else object())
    with pytest.raises(IncompatibleEnvironment, match="pip install 'setuptools=="):
        restore_for_mxnet(_numpy_like("1.26.4"), version_info=(3, 12))


def test_the_installed_numpy_has_what_mxnet_reads():
    for name in ("bool", "int", "float", "complex", "object", "str"):
        assert getattr(numpy, name) is getattr(builtins, name)


def test_mxnet_imports_first_in_a_fresh_process_through_mtx():
    """A process that imports mtx, then mxnet, runs MXNet's NumPy interface on this Python."""
    code = ("import mtx, mxnet; from mxnet import np, npx; npx.set_np(); "
            "x = np.array([[1., 2.], [3., 4.]]); "
            "print(float(npx.softmax(x, length=np.array([1, 2], dtype='int32'), axis=-1, "
            "use_length=True)[0, 1]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == 0.0  # the masked position of the row of length 1
