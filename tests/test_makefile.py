"""The Makefile's Python guard: MXNet 1.9.1 runs on Python 3.9-3.11 only, so `make install`
stops with one line, before creating anything, when no such Python is given or found."""
import os
import subprocess

import pytest

from tests.conftest import ROOT

FAKE = "#!/bin/sh\nif [ \"$1\" = -c ]; then exit 1; fi\necho 'Python 3.12.1'\n"


def _fake_python3(tmp_path):
    """A directory holding only a `python3` that says it is 3.12 (and fails any -c check)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    return bin_dir


def _make(tmp_path, *args, path, dry_run=False):
    """`make install` (.venv in tmp_path) with only ``path`` on the PATH."""
    return subprocess.run(["/usr/bin/make", "-s", "-C", str(ROOT), *(["-n"] if dry_run else []),
                           "install", f"VENV={tmp_path / 'venv'}", *args],
                          capture_output=True, text=True, env={"PATH": path}, timeout=60)


@pytest.mark.parametrize("args, says", [((), "no Python 3.9-3.11 on the PATH"),
                                         (("PYTHON=python3",), "PYTHON=python3 is not Python")])
def test_no_usable_python_stops_before_anything_is_created(tmp_path, args, says):
    done = _make(tmp_path, *args, path=str(_fake_python3(tmp_path)))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 2 and says in lines[0] and "make PYTHON=" in lines[0]  # + make's own
    assert lines[1].startswith("make: ***")
    assert not (tmp_path / "venv").exists()


@pytest.mark.skipif(not os.access("/usr/bin/python3.11", os.X_OK), reason="no python3.11 here")
def test_the_guard_picks_python3_11_over_a_newer_python3(tmp_path):
    done = _make(tmp_path, path=f"{_fake_python3(tmp_path)}:/usr/bin:/bin", dry_run=True)
    assert done.returncode == 0, done.stderr
    assert "python3.11 -m venv" in done.stdout
