"""Failures a user can fix end as one line with the fix and exit 2, never as "internal error":
names too long, symbolic link loops, a failing disk, too many open files, out of memory, a
damaged gzip input, a run file that holds JSON of the wrong kind. What fails while a command
goes on (its log on a full disk) costs one warning; the report of a bug never fails itself.

Each failure is the real one: the command line that causes it, or, where a machine cannot be
made to fail that way on demand, the real failing call inside the commands' guard (in a child
process when it needs a limit on the process, or runs an MXNet operator that fails)."""
import gzip
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from mtx.commands.entry import run
from mtx.errors import BUG, USER_ERROR, CheckpointError
from mtx.runs.resume import check_identity
from mtx.runs.rundir import RunDir
from tests.conftest import ROOT, run_script
from tests.test_cli import assert_one_line

SMOKE = ["experiment=smoke", "train.max_epochs=1", "train.precision=float32"]


def guarded_child(code):
    """Run ``code`` (Python, which may set limits first) with ``guarded()``, the commands'
    guard, in a child process: the CompletedProcess."""
    prelude = "from mtx.commands.exits import one_line_errors as guarded\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, cwd=ROOT,
                          timeout=300)


# -- files: names too long, loops, a failing disk, too many open files ------------------------

@pytest.mark.slow
def test_a_run_directory_name_too_long_is_one_line(tmp_path):
    done = run_script("train", *SMOKE, f"hydra.run.dir={tmp_path / ('x' * 300)}")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert "File name too long; use shorter names: a shorter hydra.run.dir" in line


@pytest.mark.slow
def test_a_sweep_folder_named_after_long_overrides_is_one_line(tmp_path):
    """A sweep names each run's folder after its overrides (conf/hydra/default.yaml): Hydra's
    mkdir of that folder fails, and the guard around Hydra says what to shorten."""
    done = run_script("train", "-m", *SMOKE, f"hydra.sweep.dir={tmp_path / 'sweep'}",
                      f"data.src_lang={'x' * 300}")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert "File name too long" in line and "hydra.sweep.subdir=" in line


@pytest.mark.slow
def test_a_symbolic_link_loop_is_one_line(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    done = run_script("train", *SMOKE, f"hydra.run.dir={tmp_path / 'loop' / 'run'}")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert "Too many levels of symbolic links; the symbolic links in that path form a loop" in line


def test_a_failing_disk_is_one_line(capsys):
    def main():
        with open("/proc/self/mem", "rb") as memory:  # address 0 is not mapped: the kernel's EIO
            memory.read(1)
    with pytest.raises(SystemExit) as exit_:
        run(main)
    line = assert_one_line(capsys.readouterr().err, exit_.value.code, USER_ERROR)
    assert "Input/output error; the disk or network file system failed" in line


def test_too_many_open_files_is_one_line():
    done = guarded_child("import os, resource\n"
                         "resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))\n"
                         "with guarded():\n"
                         "    files = [open(os.devnull) for _ in range(64)]\n")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert line == (f"error: {os.devnull}: Too many open files; raise the limit of open files "
                    f"(ulimit -n 4096) and run again")


# -- out of memory ------------------------------------------------------------------------------

LIMIT_MEMORY = ("import resource\n"
                "size = [l for l in open('/proc/self/status') if l.startswith('VmSize')][0]\n"
                "room = int(size.split()[1]) * 1024 + (1 << 30)  # 1 GiB more than it has\n"
                "resource.setrlimit(resource.RLIMIT_AS, (room, resource.RLIM_INFINITY))\n")


@pytest.mark.parametrize("allocate, words", [
    ("from mxnet import np, npx\nnpx.set_np()\nbig = lambda: np.zeros((1 << 30,)).wait_to_read()",
     "out of memory (MXNetError: Failed to allocate CPU Memory)"),
    ("import numpy\nbig = lambda: numpy.ones(1 << 32)", "out of memory (MemoryError: Unable to "
                                                       "allocate 32.0 GiB")],
    ids=["mxnet", "python"])
def test_out_of_memory_is_one_line_naming_the_batch_sizes(allocate, words):
    """4 GiB (MXNet, the way a batch too large fails on a host) or 32 GiB (NumPy) in a process
    allowed 1 GiB more than it has."""
    done = guarded_child(f"{allocate}\n{LIMIT_MEMORY}with guarded():\n    big()\n")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert words in line
    assert line.endswith("use smaller batches: a smaller train.batch_tokens when training, a "
                         "smaller decode.batch_tokens (or decode.beam_size) when translating")


# -- damaged input and run files ---------------------------------------------------------------

def _damaged_gzip(kind):
    whole = gzip.compress(b"w1 w2 w3\n" * 2000)
    if kind == "cut-short":
        return whole[:len(whole) // 2]  # EOFError
    if kind == "bad-header":
        return whole[:2] + b"\x00" + whole[3:]  # gzip.BadGzipFile: not deflate
    return whole[:20] + bytes(b ^ 0xFF for b in whole[20:60]) + whole[60:]  # zlib.error


@pytest.mark.parametrize("kind", ["cut-short", "bad-header", "corrupted"])
def test_a_damaged_gzip_input_is_one_line(kind, toy_run, tmp_path):
    source = tmp_path / "input.txt.gz"
    source.write_bytes(_damaged_gzip(kind))
    done = run_script("translate", f"ckpt={toy_run}", f"input={source}",
                      f"output={tmp_path / 'out.txt'}")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert line.startswith(f"error: {source} is a damaged gzip file (")
    assert line.endswith("re-download or re-compress it")


@pytest.mark.parametrize("name", ["model.json", "report.json", "checkpoints/best.json"])
def test_a_run_file_holding_json_that_is_not_an_object_is_one_line(name, toy_run, tmp_path):
    run_dir = shutil.copytree(toy_run, tmp_path / "run")
    (run_dir / name).write_text("[1, 2]\n")
    checkpoint = ["checkpoint=best"] if name.startswith("checkpoints/") else []
    done = run_script("translate", f"ckpt={run_dir}", *checkpoint, stdin=b"w1 w2\n")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert line.startswith(f"error: {run_dir / name} is damaged (JSON list where the ")
    assert "is an object); restore it from a copy of the run, or retrain" in line


def test_a_run_json_that_is_not_an_object_is_refused_on_resume(tmp_path):
    (tmp_path / "run.json").write_text('"a string"\n')
    with pytest.raises(CheckpointError, match="run.json is damaged \\(JSON str where the run "
                                              "description is an object\\)"):
        check_identity(RunDir(tmp_path), {"model": {}})


# -- failures while a command goes on, and the report of a bug ---------------------------------

@pytest.mark.slow
def test_a_log_file_on_a_full_disk_is_one_warning_and_training_goes_on(tmp_path):
    """train.log on a full disk (/dev/full): logging prints no "--- Logging error ---" and
    traceback per record, but one warning; training finishes."""
    done = run_script("train", *SMOKE, f"hydra.run.dir={tmp_path / 'run'}",
                      "hydra.job_logging.handlers.file.filename=/dev/full")
    err = done.stderr.decode()
    assert done.returncode == 0, err[-3000:]
    assert "Logging error" not in err and "Traceback" not in err, err[-3000:]
    warnings = [line for line in err.splitlines() if line.startswith("warning: cannot write")]
    assert warnings == ["warning: cannot write the log to /dev/full (No space left on device); it "
                        "stops there"], err[-3000:]
    assert (tmp_path / "run" / "report.json").is_file()


def test_a_bug_report_that_cannot_be_written_is_still_one_line(capsys, monkeypatch, tmp_path):
    """No log file and no usable temporary directory (a full /tmp, or, here, a file in the way):
    the line says the traceback could not be written, and the exit code is still a bug's."""
    (tmp_path / "a_file").write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a_file" / "tmp"))

    def main():
        raise RuntimeError("boom")
    with pytest.raises(SystemExit) as exit_:
        run(main)
    line = assert_one_line(capsys.readouterr().err, exit_.value.code, BUG)
    assert line == ("error: internal error (RuntimeError: boom); this is a bug, please report it "
                    "with the log (the traceback could not be written: Not a directory)")
