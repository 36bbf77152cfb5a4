"""The Makefile's Python guard: mtx runs on Python 3.9-3.13, so `make install` takes the newest
such Python on the PATH that runs, and stops with one line, before creating anything, when no
such Python is given or found."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# A Python that answers the Makefile's version check (`-c ...`) as a Python of that version would.
FAKE_PYTHON = ("#!/bin/sh\nif [ \"$1\" = -c ]; then exec {real} -c \"import sys; "
               "sys.version_info = ({major}, {minor}, 0); exec(sys.argv[1])\" \"$2\"; fi\n"
               "echo 'Python {major}.{minor}.0'\n")
# pyenv's shim of a version that is installed but not active: found on the PATH, does not run.
PYENV_SHIM = ("#!/bin/sh\necho \"pyenv: $(basename $0): command not found\" >&2\n"
              "echo \"The '$(basename $0)' command exists in these Python versions:\" >&2\nexit 127\n")


def _bin_dir(tmp_path, **programs):
    """A directory holding only ``programs`` (name -> script text)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in programs.items():
        path = bin_dir / name.replace("_", ".")
        path.write_text(text)
        path.chmod(0o755)
    return str(bin_dir)


def _python(version):
    major, minor = version.split(".")
    return FAKE_PYTHON.format(real=sys.executable, major=major, minor=minor)


def _make(tmp_path, *args, path, dry_run=False):
    """`make install` (.venv in tmp_path) with only ``path`` on the PATH."""
    return subprocess.run(["/usr/bin/make", "-s", "-C", str(ROOT), *(["-n"] if dry_run else []),
                           "install", f"VENV={tmp_path / 'venv'}", *args],
                          capture_output=True, text=True, env={"PATH": path}, timeout=60)


@pytest.mark.parametrize("args, says", [((), "no Python 3.9-3.13 that runs on the PATH"),
                                         (("PYTHON=python3",), "PYTHON=python3 is not a Python")])
def test_no_usable_python_stops_before_anything_is_created(tmp_path, args, says):
    path = _bin_dir(tmp_path, python3=_python("3.14"), python3_14=_python("3.14"),
                    python3_8=_python("3.8"), python3_13=PYENV_SHIM)
    done = _make(tmp_path, *args, path=path)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 2 and says in lines[0] and "make install PYTHON=" in lines[0]  # + make's own
    assert lines[1].startswith("make: ***")
    assert not (tmp_path / "venv").exists()


def test_the_newest_python_that_runs_is_taken_past_a_shim_that_does_not(tmp_path):
    path = _bin_dir(tmp_path, python3_13=PYENV_SHIM, python3_12=_python("3.12"),
                    python3_11=_python("3.11"), python3=_python("3.14"))
    done = _make(tmp_path, path=path, dry_run=True)
    assert done.returncode == 0, done.stderr
    assert f"{path}/python3.12 -m venv" in done.stdout


@pytest.mark.parametrize("version", ["3.9", "3.13"])
def test_each_end_of_the_supported_range_is_taken(tmp_path, version):
    path = _bin_dir(tmp_path, **{f"python{version.replace('.', '_')}": _python(version)})
    done = _make(tmp_path, path=path, dry_run=True)
    assert done.returncode == 0, done.stderr
    assert f"{path}/python{version} -m venv" in done.stdout


@pytest.mark.parametrize("args, extra, says", [
    (("HAS_AMX=yes",), True, "oneMKL installed (mkl extra): this CPU has AMX"),
    (("HAS_AMX=",), False, "oneMKL not installed: no AMX on this CPU; make install MKL=1 adds"),
    (("HAS_AMX=", "MKL=1"), True, "oneMKL installed (mkl extra): MKL=1"),
    (("HAS_AMX=yes", "MKL=0"), False, "oneMKL not installed: MKL=0"),
])
def test_install_adds_onemkl_where_the_cpu_has_amx_and_says_so(tmp_path, args, extra, says):
    """HAS_AMX stands in for /proc/cpuinfo's amx_bf16 flag; MKL=1/0 overrides the CPU."""
    path = _bin_dir(tmp_path, python3_11=_python("3.11"))
    done = _make(tmp_path, *args, path=path, dry_run=True)
    assert done.returncode == 0, done.stderr
    installs = [line for line in done.stdout.splitlines() if "pip install -q -e" in line]
    assert len(installs) == 1 and (",mkl]" in installs[0]) == extra
    assert f'echo "{says}' in done.stdout
