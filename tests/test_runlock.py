"""One writer per run directory (mtx.runs.runlock): a second holder is refused with the first's name;
a lock whose process died never blocks."""
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mtx.errors import PREEMPTED, USER_ERROR
from mtx.runs.rundir import RunDir
from mtx.runs.runlock import RunInUse, RunLock
from tests.conftest import ROOT, run_script

HOLD = textwrap.dedent("""
    import sys, time
    from mtx.runs.runlock import RunLock
    with RunLock(sys.argv[1], *sys.argv[2:]):
        print("held", flush=True)
        time.sleep(60)
""")


def hold_in_child(run_dir, *name):
    """A child process that holds the lock of ``run_dir`` (its lock file ``name``) until
    killed."""
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir), *name],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_second_writer_is_refused_with_the_holders_process_id(tmp_path):
    child = hold_in_child(tmp_path)
    try:
        with pytest.raises(RunInUse) as caught:
            RunLock(tmp_path).acquire()
        message = str(caught.value)
        assert f"process {child.pid}" in message and str(tmp_path) in message
        assert "\n" not in message
    finally:
        child.kill()
        child.wait()


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path):
    child = hold_in_child(tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert (tmp_path / ".lock").exists()
    with RunLock(tmp_path) as lock:
        assert lock.path.read_text().startswith("process ")
    with RunLock(tmp_path):  # released on exit: taken again
        pass


def test_taking_the_lock_twice_through_one_holder_is_harmless(tmp_path):
    lock = RunLock(tmp_path / "new" / "run")
    lock.acquire()
    lock.acquire()
    lock.release()
    lock.release()
    assert (tmp_path / "new" / "run" / ".lock").exists()


@pytest.mark.slow
def test_two_trainings_into_one_directory_one_trains_the_other_is_refused(tmp_path):
    """The second `mtx-train` into a directory in use exits 2 with one line naming the first;
    the first trains on until stopped (SIGTERM, exit 75) and its checkpoints hold its own
    weights (they verify)."""
    run_dir = tmp_path / "run"
    train = [sys.executable, str(ROOT / "scripts" / "train.py"), "experiment=smoke"]
    first = subprocess.Popen([*train, "train.max_epochs=1000", f"hydra.run.dir={run_dir}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / ".lock").is_file() or not (run_dir / ".lock").read_text():
            assert first.poll() is None and time.monotonic() < deadline, "the first never started"
            time.sleep(0.2)
        second = run_script("train", "experiment=smoke", f"hydra.run.dir={run_dir}", cwd=tmp_path)
        errors = second.stderr.decode().strip().splitlines()
        assert second.returncode == USER_ERROR
        assert len(errors) == 1 and f"process {first.pid}" in errors[0], errors
        while not (run_dir / "checkpoints" / "epoch_001.json").is_file():  # it trains on
            assert first.poll() is None and time.monotonic() < deadline, "the first stopped"
            time.sleep(0.2)
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=600) == PREEMPTED, first.stderr.read().decode()[-2000:]
    store = RunDir(run_dir).checkpoints
    for name in ["latest", *store.validated_names()]:
        store.verify(name)


@pytest.mark.parametrize("command", ["evaluate", "heads", "export"])
def test_evaluate_heads_and_export_refuse_an_output_another_process_writes(toy_run, tmp_path,
                                                                             command):
    """evaluate and heads hold their out_dir, export its output= (a lock beside it): a second
    writer is one line naming the holder, exit 2, and nothing of it is written."""
    (tmp_path / "src.txt").write_text("a b c\n")
    args = {"evaluate": [f"source={tmp_path / 'src.txt'}", f"reference={tmp_path / 'src.txt'}",
                         f"out_dir={tmp_path / 'out'}"],
            "heads": [f"out_dir={tmp_path / 'out'}"],
            "export": [f"output={tmp_path / 'out'}"]}[command]
    held = (tmp_path,  ".out.lock") if command == "export" else (tmp_path / "out",)
    child = hold_in_child(*held)
    try:
        done = run_script(command, f"ckpt={toy_run}", *args)
    finally:
        child.kill()
        child.wait()
    from tests.test_cli import is_log_line  # e.g. what device=auto chose, logged before
    errors = [line for line in done.stderr.decode().strip().splitlines() if not is_log_line(line)]
    assert done.returncode == USER_ERROR and len(errors) == 1, errors
    assert f"is in use by process {child.pid}" in errors[0]
    assert not (tmp_path / "out").exists() or [p.name for p in (tmp_path / "out").iterdir()] == [
        ".lock"]
