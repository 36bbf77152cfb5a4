"""Small holes in what a run directory, a checkpoint, an export and the cluster launcher promise:
a resume that cannot check what its checkpoints mean is refused before anything is written;
a manifest cannot point outside its folder; positions too few for the data are refused; an
export replaced at any instant is whole; a process's temporary files are its own; the launcher
passes each word of the command as it is."""
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys

import mxnet as mx
import pytest

from mtx.runs.checkpoints import CheckpointStore
from mtx.config import DataConfig, RunConfig, TrainConfig
from mtx.deploy import EXPORT_INFO
from mtx.errors import USER_ERROR, CheckpointError, ConfigError
from mtx.files import atomic_write_json, temp_owner, temp_path
from mtx.model.transformer import Transformer
from mtx.runs.rundir import RunDir, run_identity
from mtx.training.run import prepare
from tests.conftest import model_config, ROOT, run_command, run_script
from tests.test_cli import assert_one_line
from tests.test_deploy import make_run, random_model, small_cfg

TOY = DataConfig(name="toy", sizes=[50, 5, 5])


def _files(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _started_run(path, model_cfg, data_cfg):
    """A run directory as training leaves it: its description and a resume point."""
    run = RunDir(path)
    run.start(run_identity(model_cfg, data_cfg, "0" * 64), model_cfg, data_cfg, "seed: 1\n")
    (run.checkpoints.folder / "latest.json").write_text("{}")
    return run


# -- resume -------------------------------------------------------------------------------------

def test_a_resume_of_a_run_whose_tokenizer_is_gone_is_refused_before_anything_is_written(
        tmp_path):
    """Without its tokenizer the run's identity cannot be checked: a resume with another
    language pair would go through and rewrite run.json, model.json and config.yaml."""
    run = _started_run(tmp_path / "run", model_config({}), TOY)
    before = _files(run.path)
    other_pair = dataclasses.replace(TOY, src_lang="fr")
    with pytest.raises(CheckpointError, match="has checkpoints but no tokenizer .*nothing in the "
                                              "run was changed"):
        prepare(run, RunConfig(data=other_pair, train=TrainConfig(resume=True),
                               data_dir=str(tmp_path / "data")),
                "seed: 1\ndata:\n  src_lang: fr\n", True)
    assert _files(run.path) == before


def test_data_longer_than_the_model_s_positions_is_refused_before_anything_is_written(tmp_path):
    run = RunDir(tmp_path / "run")
    with pytest.raises(ConfigError, match="data.max_len=64 is more than model.max_len=32"):
        prepare(run, RunConfig(data=dataclasses.replace(TOY, max_pair_len=64),
                               model=model_config({}, max_len=32), data_dir=str(tmp_path / "data")),
                None, True)
    assert not run.path.exists()


@pytest.mark.slow
@pytest.mark.parametrize("max_len", ["0", "1"])
def test_a_model_without_room_for_a_subword_is_one_line(max_len, tmp_path):
    done = run_script("train", "experiment=smoke", f"model.max_len={max_len}",
                      f"hydra.run.dir={tmp_path / 'run'}")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert f"model.max_len={max_len}: give the positions" in line and "at least 2" in line


# -- checkpoints and temporary files ------------------------------------------------------------

@pytest.mark.parametrize("outside", ["../outside.params", "{tmp}/outside.params"])
def test_a_manifest_naming_a_file_outside_its_folder_is_refused_as_damaged(outside, tiny_cfg,
                                                                          tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    atomic_write_json(run.path / "model.json", dataclasses.asdict(tiny_cfg))
    model = Transformer(tiny_cfg)
    model.initialize(ctx=mx.cpu())
    manifest = run.checkpoints.save("best", model)
    shutil.copy(run.checkpoints.folder / manifest["files"]["params"], tmp_path / "outside.params")
    named = outside.format(tmp=tmp_path)
    manifest["files"]["params"] = named  # the same bytes, so its SHA-256 still matches
    (run.checkpoints.folder / "best.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=re.escape(f"best.json is damaged: it names "
                                                        f"'{named}', which is not a file of ")):
        run.checkpoints.verify("best")
    run.checkpoints.collect_garbage()
    assert (tmp_path / "outside.params").is_file()


def test_temporary_files_name_their_process_and_cleanup_leaves_a_live_one_s_alone(tmp_path):
    path = temp_path(tmp_path / "x.params")
    assert path == tmp_path / f".x.params.{os.getpid()}.tmp" and temp_owner(path) == os.getpid()
    assert temp_owner(tmp_path / "params-0123.params") is None
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        store = CheckpointStore(tmp_path / "checkpoints", None)
        store.folder.mkdir()
        mine, theirs, dead = (temp_path(store.folder / "params-staging.params", pid)
                              for pid in (os.getpid(), live.pid, finished.pid))
        for leftover in (mine, theirs, dead):
            leftover.write_bytes(b"half a checkpoint")
        store.collect_garbage()
        assert [p.exists() for p in (mine, theirs, dead)] == [False, True, False]
    finally:
        live.kill()
        live.wait()


# -- an export replaced while it is killed ------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("point, left", [("export_staged", "float32"),
                                         ("export_replaced", "int8")])
def test_an_export_killed_while_replacing_another_leaves_one_whole_export(point, left, tmp_path):
    """An int8 export over a float32 one, killed just before and just after the swap: output=
    holds one of the two, whole (CTranslate2 loads it), and the next export clears what the
    killed one left beside it."""
    import ctranslate2
    run, output = make_run(tmp_path / "run", random_model(small_cfg())), tmp_path / "ct2"
    done = run_command("export", f"ckpt={run}", f"output={output}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    killed = run_command("export", f"ckpt={run}", f"output={output}", "quantization=int8",
                         cwd=tmp_path, env={"MTX_KILL_AT": f"{point}:1"})
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    assert json.loads((output / EXPORT_INFO).read_text())["quantization"] == left
    ctranslate2.Translator(str(output), device="cpu")
    leftovers = lambda: [p.name for p in tmp_path.glob(".ct2*") if p.name != ".ct2.lock"]
    assert leftovers()  # the killed export's staging folder (its lock, .ct2.lock, stays)
    done = run_command("export", f"ckpt={run}", f"output={output}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert not leftovers()


# -- the launcher -------------------------------------------------------------------------------

def test_the_launcher_passes_each_word_of_the_command_as_it_is(tmp_path):
    """Scheduler, server and worker each get the command's words unchanged: a space, a quote,
    a `$` and a `*` reach the program, none is split or expanded by a shell."""
    words = ["a b", "it's", "$HOME", "*"]
    (tmp_path / "argv.py").write_text(
        "import json, os, sys, time\n"
        "role = os.environ['DMLC_ROLE'] + os.environ.get('DMLC_TASK_ID', '')\n"
        "open(os.path.join(sys.argv[1], role + '.json'), 'w').write(json.dumps(sys.argv[2:]))\n"
        "others = [os.path.join(sys.argv[1], n + '.json') for n in ('worker0', 'server1')]\n"
        "while role == 'scheduler' and not all(map(os.path.exists, others)):\n"
        "    time.sleep(0.1)  # the job ends with its scheduler: wait for the others\n")
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "launch.py"), "--launcher",
                           "local", "-n", "1", "-s", "1", sys.executable,
                           str(tmp_path / "argv.py"), str(tmp_path), *words],
                          capture_output=True, cwd=tmp_path, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "DMLC_TASK_ID"})
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    for role in ("scheduler", "worker0", "server1"):
        assert json.loads((tmp_path / f"{role}.json").read_text()) == words, role
