#!/usr/bin/env python
"""Start a data-parallel job with MXNet's own launcher (`mxnet/tools/launch.py` and the
`dmlc_tracker` shipped in the mxnet wheel): a scheduler, KVStore servers and workers.

    python scripts/launch.py --launcher local -n 2 -s 1 \\
        python scripts/train.py train.kvstore=dist_sync hydra.run.dir=outputs/train/runs/dist

Every option is MXNet's (`-n` workers, `-s` servers, `--launcher local|ssh|mpi|sge|yarn`,
`-H hosts` for ssh/mpi); see README "Several machines". Three repairs for this wheel: the tracker
calls `Thread.isAlive`, gone since Python 3.9; with the local launcher a worker that fails
would leave the others waiting for it forever, so the whole job is stopped instead (exit 1);
and the local launcher joined the command's words with spaces for a shell, so a word with a
space or a quote in it was split: here workers and servers get the words as they are, the
scheduler's shell gets them quoted (`shlex.join`).
"""
import os
import runpy
import shlex
import signal
import subprocess
import sys
import threading

import mtx  # noqa: F401  (prepares numpy for MXNet before mxnet.tools.launch imports it)

if not hasattr(threading.Thread, "isAlive"):
    threading.Thread.isAlive = threading.Thread.is_alive


def descendants(pid):
    """Process ids below ``pid`` (Linux /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def run_once_or_stop_the_job(cmd, num_attempt, role, taskid, pass_env):
    """dmlc_tracker.local.exec_cmd without its retries (a restarted worker waits forever for a
    cluster that has moved on): a process that fails stops the whole job."""
    env = dict(os.environ, **{k: str(v) for k, v in pass_env.items()},
               DMLC_TASK_ID=str(taskid), DMLC_ROLE=role, DMLC_JOB_CLUSTER="local")
    try:
        code = subprocess.call(list(cmd), env=env)
    except OSError as err:  # no such program: as a shell would say it
        print(f"error: cannot run {cmd[0]}: {err.strerror}", file=sys.stderr, flush=True)
        code = 127
    if code != 0:
        print(f"error: {role} {taskid} exited with code {code} (its messages are above); "
              f"stopping the job", file=sys.stderr, flush=True)
        for pid in descendants(os.getpid()):  # SIGKILL: a worker that would save on SIGTERM
            try:                                  # waits for the dead one in the KVStore
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(1)


def submit_local(args):
    """dmlc_tracker.local.submit with the command kept as its words: the workers and servers
    run by `run_once_or_stop_the_job`, the scheduler by the tracker's shell, quoted."""
    from dmlc_tracker import tracker

    def start(num_workers, num_servers, envs):
        for task in range(num_workers + num_servers):
            role = "worker" if task < num_workers else "server"
            threading.Thread(target=run_once_or_stop_the_job, daemon=True,
                             args=(args.command, 0, role, task, envs)).start()
    tracker.submit(args.num_workers, args.num_servers, fun_submit=start,
                   pscmd=shlex.join(args.command))


if __name__ == "__main__":
    if os.path.isdir("/proc"):
        from dmlc_tracker import local
        local.submit = submit_local
    runpy.run_module("mxnet.tools.launch", run_name="__main__", alter_sys=True)
