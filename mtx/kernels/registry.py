"""Loading a custom-operator library into MXNet 1.9.1 and giving its operators their Python
functions (``mx.nd.<name>``, ``mx.sym.<name>``), as `mx.library.load` does, for the library's
own operators only.

`mx.library.load` makes the Python function of every registered operator again, some 2,300 in
``mx.nd`` and as many in ``mx.sym``: about 0.4 s of every command's start-up on a 2-core host,
for five new operators. `load_library` asks MXNet which operators the library added and makes
only theirs, with MXNet's own function makers and module layout (``mxnet.base._init_op_module``:
names with a leading underscore go to ``_internal``, the others to ``op`` and the namespace).
"""
import ctypes
import os
import sys

from mxnet.base import _LIB, OpHandle, c_str, check_call, mx_uint, py_str
from mxnet.ndarray.register import _make_ndarray_function
from mxnet.symbol.register import _make_symbol_function

_MAKERS = {"ndarray": _make_ndarray_function, "symbol": _make_symbol_function}


def operator_names():
    """The names of every operator registered in this process (a set of str)."""
    names = ctypes.POINTER(ctypes.c_char_p)()
    size = ctypes.c_uint()
    check_call(_LIB.MXListAllOpNames(ctypes.byref(size), ctypes.byref(names)))
    return {py_str(names[i]) for i in range(size.value)}


def load_library(path):
    """Load the custom-operator library at ``path`` into MXNet and register its operators' Python
    functions; returns their names, sorted. MXNetError as MXNet raises it. The path is made
    absolute first: dlopen searches the library path for a bare file name."""
    before = operator_names()
    check_call(_LIB.MXLoadLib(c_str(os.path.abspath(path)), mx_uint(0)))
    added = sorted(operator_names() - before)
    for name in added:
        handle = OpHandle()
        check_call(_LIB.NNGetOpHandle(c_str(name), ctypes.byref(handle)))
        for module_name, make in _MAKERS.items():
            _register(f"mxnet.{module_name}", make(handle, name, name))
    return added


def _register(namespace, function):
    """Put an operator's function where `mx.library.load` leaves it: ``<namespace>._internal``
    for a name with a leading underscore, else ``<namespace>.op`` and ``<namespace>``."""
    name = function.__name__
    places = ["_internal"] if name.startswith("_") else ["op", None]
    function.__module__ = namespace
    for place in places:
        module = sys.modules[namespace if place is None else f"{namespace}.{place}"]
        setattr(module, name, function)
        if place is not None:
            module.__all__.append(name)
