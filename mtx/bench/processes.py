"""Whole processes as the quality bench runs them: each peer toolkit in a virtual environment of
its own (made on first use, never mtx's), and a child timed with its peak resident memory, its
log to a file, stopped at a wall-clock deadline when it has one."""
import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..errors import ConfigError

STOP_GRACE_SECONDS = 60   # after SIGTERM at the deadline, then SIGKILL
POLL_SECONDS = 0.5


def toolkit_env(name, packages, root):
    """The virtual environment ``<root>/<name>-<hash of packages>`` with ``packages`` (pip
    requirement strings, pinned) installed; made the first time, reused after. ConfigError (one
    line) when pip cannot install them."""
    key = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:10]
    env = Path(root) / f"{name}-{key}"
    if (env / "installed").is_file():
        return env
    log = env.with_suffix(".install.log")
    env.parent.mkdir(parents=True, exist_ok=True)
    steps = [[sys.executable, "-m", "venv", "--clear", str(env)],
             [str(env / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
              *packages]]
    with open(log, "w") as out:
        for step in steps:
            if subprocess.run(step, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                raise ConfigError(f"{name}: cannot install {' '.join(packages)} into {env} (see "
                                  f"{log}); leave it out of --impl, or install by hand there")
    (env / "installed").write_text("\n".join(packages) + "\n")
    return env


def measured(command, log_path, seconds=None, env=None, cwd=None):
    """Run ``command`` with its output in ``log_path``; stop it (SIGTERM to its process group,
    SIGKILL after a grace) once ``seconds`` have passed. -> {seconds: wall, peak_rss_mb: the
    process's own peak (its waited-for children included, as wait4 reports), stopped: whether
    the deadline stopped it}. RuntimeError naming the log when it fails by itself."""
    environment = dict(os.environ, **(env or {}))
    tic, stopped = time.time(), False
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(part) for part in command], stdout=log,
                                   stderr=subprocess.STDOUT, env=environment, cwd=cwd,
                                   start_new_session=True)
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            elapsed = time.time() - tic
            if seconds is not None and elapsed > seconds and not stopped:
                stopped = _signal_group(process.pid, signal.SIGTERM)
            if stopped and elapsed > seconds + STOP_GRACE_SECONDS:
                _signal_group(process.pid, signal.SIGKILL)
            time.sleep(POLL_SECONDS)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0 and not stopped:
        raise RuntimeError(f"{Path(command[0]).name} failed (exit {process.returncode}); its "
                           f"log: {log_path}")
    return {"seconds": round(time.time() - tic, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "stopped": stopped}


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    return True
