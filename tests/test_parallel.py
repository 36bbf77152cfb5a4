"""Data parallelism: several devices of one process, and a real KVStore cluster on loopback."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import mxnet as mx
import numpy as onp
import pytest

from mtx.config import ConfigError, DataConfig, RunConfig, TrainConfig
from mtx.data.corpus import load_corpus
from mtx.data.batching import bucket_batches
from mtx.training.parallel import DataParallel, split_rows
from mtx.hardware.devices import seed_everything
from mtx.training import new_fit
from mtx.training.steps import train_step

from conftest import model_config, ROOT, run_script


def _toy_batches(tmp_path):
    data_cfg = DataConfig(name="toy", sizes=[400, 20, 20], max_pair_len=64)
    corpus = load_corpus(data_cfg, tmp_path / "cache", seed=3)
    src, tgt = corpus.train_pairs()
    return corpus, data_cfg, bucket_batches(src, tgt, 512, shuffle=True, seed=3)


def test_parts_of_every_worker_and_device_cover_the_batch_once(tmp_path):
    _, _, batches = _toy_batches(tmp_path)
    batch = batches[0]
    for parts in (1, 3, len(batch.ids) + 2):  # more parts than rows leaves some empty
        pieces = split_rows(batch, parts)
        assert len(pieces) == parts
        assert onp.array_equal(onp.concatenate([p.ids for p in pieces]), batch.ids)
        assert sum(p.num_tgt_tokens for p in pieces) == batch.num_tgt_tokens
        assert onp.array_equal(onp.concatenate([p.tgt_out for p in pieces]), batch.tgt_out)
    seen = []
    for rank in range(2):  # what worker `rank` of 2, with 2 devices each, trains on
        parallel = DataParallel([mx.cpu(0), mx.cpu(1)])
        parallel.rank, parallel.num_workers = rank, 2
        seen.append(onp.concatenate([p.ids for p in parallel.local_parts(batch)]))
    assert not set(seen[0]) & set(seen[1])
    assert sorted(onp.concatenate(seen)) == sorted(batch.ids)


def _train_steps(corpus, data_cfg, batches, ctxs, tmp_path):
    model_cfg = model_config(num_hiddens=32, num_heads=4, ffn_num_hiddens=64, dropout=0.0,
                             attention_dropout=0.0, vocab_size=len(corpus.tokenizer))
    seed_everything(7)
    fit = new_fit(corpus, RunConfig(model=model_cfg, data=data_cfg, seed=7, train=TrainConfig(
        batch_tokens=512, warmup_steps=4, lr=3e-3)), tmp_path, ctxs)
    for step, batch in enumerate(batches, 1):
        train_step(fit.pieces, fit.parallel, batch, step, fit.cfg.train)
    return {name: p.data(ctxs[-1]).asnumpy()
            for name, p in fit.model._collect_params_with_prefix().items()}


def test_two_cpu_contexts_train_like_one_with_the_same_total_batch(tmp_path):
    corpus, data_cfg, batches = _toy_batches(tmp_path)
    one = _train_steps(corpus, data_cfg, batches[:6], [mx.cpu(0)], tmp_path / "one")
    two = _train_steps(corpus, data_cfg, batches[:6], [mx.cpu(0), mx.cpu(1)], tmp_path / "two")
    assert one.keys() == two.keys()
    initial = _train_steps(corpus, data_cfg, [], [mx.cpu(0)], tmp_path / "none")
    for name in one:
        assert onp.allclose(one[name], two[name], atol=1e-5, rtol=0), name
    assert any(not onp.allclose(one[n], initial[n], atol=1e-3) for n in one)  # they did train


@pytest.mark.slow
def test_train_script_runs_on_two_devices_end_to_end(tmp_path):
    done = run_script("train", "experiment=smoke", "train.devices=[cpu:0,cpu:1]",
                      f"hydra.run.dir={tmp_path / 'run'}", f"paths.data_dir={tmp_path / 'cache'}",
                      "data.sizes=[600,30,30]")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["devices"] == ["cpu(0)", "cpu(1)"] and report["final"]["checkpoint"] in (
        "best", "average")


def test_unknown_kvstore_is_a_config_error():
    with pytest.raises(ConfigError, match="train.kvstore=nccl"):
        TrainConfig(kvstore="nccl")


CLUSTER_TRAINING = ["experiment=smoke", "train.kvstore=dist_sync", "data.sizes=[1000,50,50]",
                    "train.log_every=5", "train.save_every_minutes=0",
                    "train.cooldown=0.5",  # the budget spent: agreed over the KVStore
                    "train.precision=float32"]  # runs compared across jobs: none chooses alone
WORKER_DIGESTS = (r"worker (\d) of 2: trained on (\d+) sentences \(ids digest (\w+)\) in (\d+) "
                  r"steps; parameter digest (\w+)")


def _launch(tmp_path, *train_args, wrapper=(), env=None, timeout=240):
    """Scheduler, one server and two workers on loopback, started by scripts/launch.py with
    MXNet's local launcher, each running ``wrapper`` + scripts/train.py ``train_args`` ->
    (exit code, everything they printed)."""
    command = [sys.executable, str(ROOT / "scripts" / "launch.py"), "--launcher", "local",
               "-n", "2", "-s", "1", *wrapper, sys.executable, str(ROOT / "scripts" / "train.py"),
               *train_args]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, OMP_NUM_THREADS="1", **(env or {})),
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:  # the launcher, its scheduler, server and workers are one process group: what is
        try:  # left of it (also workers a launcher that exited left behind, holding the output
            os.killpg(proc.pid, signal.SIGKILL)  # open until the timeout) goes with it
        except ProcessLookupError:
            pass
        proc.wait()
    return proc.returncode, out.decode(errors="replace")


def _per_worker(tmp_path, script):
    """A wrapper command that runs ``script`` (bash; $ONE is 1 in worker task 1, else 0) and
    then the command it is given."""
    path = tmp_path / "per_worker.sh"
    path.write_text("#!/bin/bash\n"
                    'ONE=0; [ "$DMLC_ROLE" = worker ] && [ "$DMLC_TASK_ID" = 1 ] && ONE=1\n'
                    f"{script}\nexec \"$@\"\n")
    path.chmod(0o755)
    return [str(path)]


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory):
    """The uninterrupted two-worker run: (its directory, the workers' digests, its output)."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    run_dir = tmp_path / "run"
    code, log = _launch(tmp_path, *CLUSTER_TRAINING, f"hydra.run.dir={run_dir}",
                        f"paths.data_dir={tmp_path / 'cache'}")
    assert code == 0, log[-3000:]
    return run_dir, sorted(re.findall(WORKER_DIGESTS, log)), log


@pytest.mark.slow
def test_local_cluster_trains_the_same_parameters_on_different_shards(cluster_run):
    run_dir, workers, log = cluster_run
    assert sorted(w[0] for w in workers) == ["0", "1"], log[-3000:]
    (_, seen0, ids0, steps0, params0), (_, seen1, ids1, steps1, params1) = workers
    assert params0 == params1, log[-3000:]         # identical parameters on both workers
    assert ids0 != ids1 and steps0 == steps1       # different shards, the same updates
    assert int(seen0) + int(seen1) == 3 * 1000     # together: every pair of 3 epochs once
    assert len(re.findall(r"epoch 1 step \d+ train loss", log)) == 1  # rank 0 alone evaluates
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("epoch_*.json"))
    assert checkpoints == ["epoch_001.json", "epoch_002.json", "epoch_003.json"]
    assert (run_dir / "report.json").is_file()


@pytest.mark.slow
def test_local_cluster_trains_on_a_files_corpus(tmp_path, multi30k_dir):
    """Two workers on a corpus of files (data=files, en -> xx, one gzipped): the training split
    prepared once into the shared data directory (both workers start on an empty one), each
    worker trains its share of every epoch's batches, and both end with the same parameters."""
    from test_files_end_to_end import multi30k_lines, write_pair
    pairs, epochs = 600, 2
    en, de = multi30k_lines(multi30k_dir, pairs + 50)
    write_pair(tmp_path / "corpus" / "train", en[:pairs], de[:pairs], gz=True)
    write_pair(tmp_path / "corpus" / "dev", en[pairs:pairs + 40], de[pairs:pairs + 40])
    write_pair(tmp_path / "corpus" / "news", en[pairs + 40:], de[pairs + 40:])
    cache, run_dir = tmp_path / "cache", tmp_path / "run"
    training = [a for a in CLUSTER_TRAINING if not a.startswith("data.sizes=")]
    code, log = _launch(tmp_path, *training, "data=files", "data.src_lang=en",
                        "data.tgt_lang=xx", f"data.train={tmp_path / 'corpus' / 'train'}",
                        f"data.valid={tmp_path / 'corpus' / 'dev'}",
                        f"data.test=[{tmp_path / 'corpus' / 'news'}]", "data.vocab_size=300",
                        f"train.max_epochs={epochs}", "train.eval_bleu=false",
                        f"hydra.run.dir={run_dir}", f"paths.data_dir={cache}")
    assert code == 0, log[-3000:]
    workers = sorted(re.findall(WORKER_DIGESTS, log))
    assert sorted(w[0] for w in workers) == ["0", "1"], log[-3000:]
    (_, seen0, ids0, steps0, params0), (_, seen1, ids1, steps1, params1) = workers
    assert params0 == params1, log[-3000:]         # identical parameters on both workers
    assert ids0 != ids1 and steps0 == steps1       # different shards, the same updates
    assert int(seen0) + int(seen1) == epochs * pairs  # together: every pair of each epoch once
    # one prepared split, shared, none half-made (beside it: its lock files, `mtx.data.holds`)
    prepared = [p for p in (cache / "prepared").iterdir() if p.is_dir()]
    assert len(prepared) == 1 and (prepared[0] / "meta.json").is_file(), prepared
    report = json.loads((run_dir / "report.json").read_text())
    assert report["workers"] == 2 and set(report["scores"]) == {"news"}
    assert report["tgt_lang"] == "xx"


@pytest.mark.slow
def test_a_worker_killed_mid_step_stops_the_job_which_resumes_to_the_same_parameters(
        cluster_run, tmp_path):
    """kill -9 of worker task 1 inside a step of the second epoch: the launcher stops the whole
    job with one line (no hang); the job started again with train.resume=true ends with the
    parameters of the uninterrupted job."""
    run_dir, uninterrupted, _ = cluster_run
    resumed_dir, data = tmp_path / "run", f"paths.data_dir={run_dir.parent / 'cache'}"
    killer = _per_worker(tmp_path, '[ $ONE = 1 ] && export MTX_KILL_AT=step:30')
    code, log = _launch(tmp_path, *CLUSTER_TRAINING, f"hydra.run.dir={resumed_dir}", data,
                        wrapper=killer)
    assert code == 1, log[-3000:]
    assert re.search(r"error: worker \d exited with code (-9|137) .*stopping the job", log), log[-3000:]
    code, log = _launch(tmp_path, *CLUSTER_TRAINING, f"hydra.run.dir={resumed_dir}", data,
                        "train.resume=true")
    assert code == 0 and "resumed from latest" in log, log[-3000:]
    resumed = sorted(re.findall(WORKER_DIGESTS, log))
    assert [w[4] for w in resumed] == [w[4] for w in uninterrupted], log[-3000:]


@pytest.mark.slow
def test_workers_that_find_different_checkpoints_stop_before_training(cluster_run, tmp_path):
    """Worker task 1 sees an older copy of the run directory (as through a stale network file
    system cache): the workers compare what they found before the first step, and the job stops
    with one line naming the problem."""
    run_dir, _, _ = cluster_run
    current, stale = tmp_path / "current", tmp_path / "stale"
    shutil.copytree(run_dir, current)
    shutil.copytree(run_dir, stale)
    for name in ("latest.json", "epoch_003.json"):
        (stale / "checkpoints" / name).unlink()
    views = _per_worker(tmp_path, f'RUN={current}; [ $ONE = 1 ] && RUN={stale}\n'
                                  'set -- "$@" hydra.run.dir=$RUN')
    code, log = _launch(tmp_path, *CLUSTER_TRAINING, "train.resume=true", "train.max_epochs=4",
                        f"paths.data_dir={run_dir.parent / 'cache'}", wrapper=views)
    assert code == 1, log[-3000:]
    assert re.search(r"error: worker \d found (latest|epoch_002) \(step \d+\) in .*, another "
                     r"worker another one: every worker must see the run directory", log), log[-3000:]


@pytest.mark.slow
def test_a_failing_worker_stops_the_whole_job(tmp_path):
    """Without the repair, MXNet's local launcher retries the worker and the job hangs."""
    command = [sys.executable, str(ROOT / "scripts" / "launch.py"), "--launcher", "local",
               "-n", "2", "-s", "1", sys.executable, str(ROOT / "scripts" / "train.py"),
               "train.kvstore=dist_sync", f"hydra.run.dir={tmp_path / 'run'}",
               f"data.raw_dir={tmp_path / 'missing'}"]
    proc = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log = out.decode(errors="replace")
    assert proc.returncode == 1, log[-2000:]
    assert "is not a readable directory" in log and "stopping the job" in log


def test_every_worker_restarts_its_save_clock_when_the_job_saves(tmp_path):
    """A worker other than rank 0 writes no resume point, but when the job saves one it counts
    `train.save_every_minutes` again from there (else it would ask for one at every log point)."""
    from types import SimpleNamespace
    from mtx.training.checkpointing import Checkpointing
    from mtx.runs.rundir import RunDir
    worker = SimpleNamespace(distributed=True, is_chief=False, any=lambda flag: True)
    checkpointing = Checkpointing(RunDir(tmp_path), pieces=None,
                                  train_cfg=TrainConfig(save_every_minutes=5))
    checkpointing.last_save -= 6 * 60  # a resume point is due
    assert checkpointing.due()
    checkpointing.at_log_point(state=None, minutes=6.0, parallel=worker)
    assert not checkpointing.due() and not any(tmp_path.iterdir())
