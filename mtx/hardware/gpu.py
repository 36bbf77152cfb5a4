"""GPUs: how many this MXNet sees, what each one is, and whether MXNet 1.9.1 has kernels for it.

MXNet 1.9.1's CUDA wheels (mxnet-cu110 ... mxnet-cu117, `make install CUDA=...`) hold machine
code for compute capability 5.0-8.6 and no PTX, so the driver cannot compile kernels for a GPU
they do not cover. Machine code runs on later minor versions of its own major version, so Ada
(8.9) runs the 8.6 code; Hopper (9.0) and later are a new major version and get no kernels.

MXNet is imported by the functions that use it (the module docstring of `devices` says why).
"""
import ctypes

# Compute capability as MXNet writes it, major * 10 + minor (8.6 -> 86).
KERNELS_FROM, KERNELS_TO = 50, 86  # Maxwell to Ampere: the wheels' own machine code
# Ada: a later minor of major 8, runs the 8.6 code. 8.7 (Jetson Orin) is left out: it is an
# aarch64 board, for which there is no MXNet 1.9.1 wheel at all.
RUNS_ON_OLDER_CODE = (89,)
CUDA_BUILDS = tuple(range(110, 118))  # mxnet-cu110 ... mxnet-cu117 on PyPI (the Makefile's CUDA=)
INSTALL_CUDA = "make install CUDA=117 (CUDA=110 ... 116 for an older CUDA 11; README: GPUs)"
# What works on a GPU MXNet cannot use: the CPU, or the CTranslate2 export for translation.
INSTEAD = ("use device=cpu, or for translation on this GPU export the run to CTranslate2 "
           "(mtx-export ckpt=<run> output=<dir>, then mtx-translate ckpt=<dir> device=gpu)")
NO_CUDA = "this MXNet has no CUDA"  # why the CPU wheel sees no GPU
# CUDA driver API (cuda.h): CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR
_MAJOR, _MINOR = 75, 76


def mxnet_has_cuda():
    """Whether this MXNet was built with CUDA (mxnet-cuXXX), not the CPU wheel."""
    import mxnet as mx
    return mx.runtime.Features().is_enabled("CUDA")


def gpus_seen():
    """(number of GPUs MXNet sees, why it sees none or None): MXNet's CPU build sees none, and a
    CUDA build may see none (no device, CUDA_VISIBLE_DEVICES, a driver too old)."""
    import mxnet as mx
    try:
        count = mx.context.num_gpus()
    except mx.base.MXNetError as err:  # a CUDA error: its last line is CUDA's own message
        return 0, f"CUDA failed: {last_line(err)}"
    if count:
        return count, None
    return 0, "no GPU visible" if mxnet_has_cuda() else NO_CUDA


def last_line(err):
    """An MXNet error's message is a C++ trace; its last non-empty line says what failed."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


def cuda_device(index):
    """(name, compute capability as major * 10 + minor) of CUDA device ``index`` from the
    driver, or (None, None) when the driver cannot be asked. MXNet's own
    `mx.util.get_cuda_compute_capability` loads only ``libcuda.so``, which a machine with the
    driver but not the CUDA toolkit (most containers) lacks, and gives no name."""
    cuda = _libcuda()
    if cuda is None:
        return None, None
    device, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    name = ctypes.create_string_buffer(256)
    failed = (cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), index)
              or cuda.cuDeviceGetAttribute(ctypes.byref(major), _MAJOR, device)
              or cuda.cuDeviceGetAttribute(ctypes.byref(minor), _MINOR, device))
    if failed:  # a CUresult other than CUDA_SUCCESS (0)
        return None, None
    if cuda.cuDeviceGetName(name, len(name), device):
        name.value = b""
    return name.value.decode(errors="replace") or None, major.value * 10 + minor.value


def _libcuda():
    """The CUDA driver library, or None where there is none."""
    for libname in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(libname)
        except OSError:
            continue
    return None


def capability_text(capability):
    """86 -> '8.6'."""
    return f"{capability // 10}.{capability % 10}"


def about(name, capability):
    """'NVIDIA A100-SXM4-40GB, compute capability 8.0', for logs and errors."""
    return ", ".join([name or "name unknown",
                      f"compute capability {capability_text(capability)}" if capability else
                      "compute capability unknown"])


def describe(index, name, capability):
    """'gpu:0 (NVIDIA A100-SXM4-40GB, compute capability 8.0)'."""
    return f"gpu:{index} ({about(name, capability)})"


def kernels_missing(capability):
    """Why MXNet 1.9.1 cannot run on a GPU of ``capability``, or None when it can (also when
    the capability is unknown: MXNet sees the GPU, so let it try)."""
    if capability is None or KERNELS_FROM <= capability <= KERNELS_TO:
        return None
    if capability in RUNS_ON_OLDER_CODE:
        return None
    side = "below" if capability < KERNELS_FROM else "beyond"
    return (f"MXNet 1.9.1's CUDA builds have no kernels for it (they cover compute capability "
            f"{capability_text(KERNELS_FROM)}-{capability_text(KERNELS_TO)} and Ada's 8.9; "
            f"{capability_text(capability)} is {side} them)")
