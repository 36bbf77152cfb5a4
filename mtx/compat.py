"""What MXNet 1.9.1 needs from the Python and numpy it runs on, restored before it is imported.

MXNet 1.9.1 (and gluonnlp 0.10, d2l 1.0.3) were written against numpy < 1.24 and Python < 3.12.
On the newer ones mtx supports (Python 3.12 and 3.13 with numpy 1.26.4, see pyproject.toml):

- numpy 1.24 removed the aliases of the builtin types, ``np.bool``, ``np.int``, ``np.float``,
  ``np.complex``, ``np.object`` and ``np.str``; ``import mxnet`` reads them (apache/mxnet#21165,
  never fixed upstream). Each missing one is set back to the builtin it stood for, which is what
  numpy < 1.24 gave, so values and dtypes are those of the older numpy.
- Python 3.12 removed ``distutils``; MXNet imports ``distutils.version`` (version checks of numpy
  in ``numpy_dispatch_protocol`` and ``numpy_op_fallback``). setuptools provides the module, and
  is a dependency of mtx on those Pythons: without it, the import stops with one line saying so.

Only what is missing is touched: on numpy 1.23.5 (Python 3.9-3.11) this module changes nothing.
numpy 2 removed much more (constants, functions, changed promotion rules) and MXNet's metadata
asks for numpy < 2: it is refused here in one line instead of failing somewhere inside MXNet.

``import mtx`` runs this, so every process that imports mtx before mxnet (every command, script,
child process and the test suite) has it; it must not import mxnet itself.
"""
import builtins
import importlib.util
import sys

import numpy

_BUILTIN_ALIASES = ("bool", "int", "float", "complex", "object", "str")


class IncompatibleEnvironment(ImportError):
    """The installed numpy or Python cannot run MXNet 1.9.1; the message names the fix."""


def restore_for_mxnet(np_module=numpy, version_info=sys.version_info):
    """Give ``np_module`` back what MXNet 1.9.1 reads from it; returns the names restored."""
    if int(np_module.__version__.split(".")[0]) >= 2:
        raise IncompatibleEnvironment(
            f"error: numpy {np_module.__version__} is installed, but MXNet 1.9.1 needs numpy < 2: "
            f"pip install 'numpy==1.26.4' (or reinstall mtx, which pins it)")
    if version_info >= (3, 12) and importlib.util.find_spec("distutils") is None:
        raise IncompatibleEnvironment(
            "error: MXNet 1.9.1 imports distutils, which Python 3.12+ only has through "
            "setuptools: pip install 'setuptools==69.5.1' (or reinstall mtx, which depends on it)")
    restored = []
    for name in _BUILTIN_ALIASES:
        if name not in np_module.__dict__:
            setattr(np_module, name, getattr(builtins, name))
            restored.append(name)
    return restored


RESTORED = restore_for_mxnet()
