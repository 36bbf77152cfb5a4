"""This CPU: its model name and instruction-set flags (/proc/cpuinfo), and the oneDNN cap a
process may run under.

oneDNN picks its kernels from the CPU at run time; ``DNNL_MAX_CPU_ISA`` (e.g. ``AVX2``) caps it
for one process, which is how an AVX-512 host runs as an AVX2-only one. The flags say what the
CPU has, not what oneDNN will use under such a cap, so whether an operator works is decided by
running it in a child process (`mtx.training.precision.bfloat16_unavailable`), never by flags alone.
"""
import os
import platform

CPUINFO = "/proc/cpuinfo"
# oneDNN 2.x builds bfloat16 products only from avx512_core (AVX512 F, BW, VL, DQ) up.
AVX512_CORE = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
ISA_CAP_VARIABLES = ("DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA")


def cpu_fields(path=CPUINFO):
    """{field: value} of the first processor in /proc/cpuinfo; {} where there is none."""
    fields = {}
    try:
        with open(path) as cpuinfo:
            for line in cpuinfo:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model(path=CPUINFO):
    """The CPU's model name, or "unknown"."""
    return cpu_fields(path).get("model name", "unknown")


def cpu_flags(path=CPUINFO):
    """The CPU's instruction-set flags as a set ("avx2", "avx512f", ...); empty off Linux."""
    return set(cpu_fields(path).get("flags", "").split())


def flags_line(path=CPUINFO):
    """Every flag in one string: what a build with -march=native depends on."""
    return " ".join(sorted(cpu_flags(path))) or platform.processor()


def isa_cap():
    """'DNNL_MAX_CPU_ISA=AVX2' when a oneDNN cap is set for this process, else None."""
    return next((f"{name}={os.environ[name]}" for name in ISA_CAP_VARIABLES
                 if os.environ.get(name)), None)

