"""The installed commands (mtx-train, mtx-translate, mtx-evaluate, mtx-heads, mtx-bench,
mtx-serve): they run from any working directory, in the editable install and from a wheel, with a
real --help; and the data directory they keep their downloads in."""
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, run_command
from mtx import datadir

CONF = ROOT / "conf"
HYDRA_COMMANDS = ("train", "translate", "evaluate", "heads", "serve", "export")


def groups_of(config_name):
    """The config groups a command's help must list: the groups in its defaults list."""
    defaults = (CONF / f"{config_name}.yaml").read_text().split("\n\n")[0]
    return sorted(g.name for g in CONF.iterdir() if g.is_dir() and g.name != "hydra"
                  and f"- {g.name}:" in defaults)


@pytest.mark.parametrize("name", HYDRA_COMMANDS)
def test_every_command_has_a_real_help_from_any_directory(name, tmp_path):
    done = run_command(name, "--help", cwd=tmp_path)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert out.startswith(f"mtx-{name}: ") and "Examples:" in out and f"  mtx-{name} " in out
    assert "Powered by Hydra" not in out and "${" not in out
    used = groups_of(name)
    for group in used:  # each group it uses, with every option there is
        options = ", ".join(sorted(p.stem for p in (CONF / group).glob("*.yaml")))
        assert f"{group}: {options}" in out
    for group in {"model", "data", "train", "decode"} - set(used):
        assert f"\n{group}: " not in out  # and no group it does not use
    assert not any(tmp_path.iterdir())


def test_help_shows_the_composed_defaults(tmp_path):
    out = run_command("train", "--help", "train.max_minutes=7", cwd=tmp_path).stdout.decode()
    assert "train.max_minutes=7 " in out and "model.num_heads=4 " in out
    out = run_command("translate", "--help", "decode=greedy", cwd=tmp_path).stdout.decode()
    assert "decode.beam_size=1 " in out


def test_bench_command_help(tmp_path):
    done = run_command("bench", "--help", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.decode().startswith("usage: mtx-bench")


def test_scripts_are_the_same_programs():
    for name in HYDRA_COMMANDS + ("download", "prepare"):
        text = (ROOT / "scripts" / f"{name}.py").read_text()
        assert f"from mtx.commands.{name} import main" in text
    pyproject = (ROOT / "pyproject.toml").read_text()
    for name in HYDRA_COMMANDS + ("prepare",):
        assert f'mtx-{name} = "mtx.commands.{name}:main"' in pyproject


def test_translate_prints_no_mxnet_banner(toy_run, tmp_path):
    done = run_command("translate", f"ckpt={toy_run}", "decode=greedy", stdin=b"w1 w2 w3\n",
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode() == "w3 w2 w1\n"
    assert "semantics has been activated" not in done.stderr.decode()


def test_evaluate_from_another_directory(toy_run, tmp_path):
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("w1 w2 w3\nw4 w5 w6 w7\n")
    ref.write_text("w3 w2 w1\nw7 w6 w5 w4\n")
    out_dir = tmp_path / "eval"
    done = run_command("evaluate", f"ckpt={toy_run}", "source=src.txt", "reference=ref.txt",
                       f"out_dir={out_dir}", "decode=greedy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert "src.txt sacrebleu = 100.00" in done.stdout.decode()


# -- the data directory ------------------------------------------------------------------------
def test_data_directory_default_env_and_wheel(monkeypatch, tmp_path):
    monkeypatch.delenv("MTX_DATA_DIR", raising=False)
    assert datadir.data_dir() == ROOT / "data" and (ROOT / "data" / "README.md").is_file()
    monkeypatch.setenv("MTX_DATA_DIR", str(tmp_path / "elsewhere"))
    assert datadir.data_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("MTX_DATA_DIR")
    monkeypatch.setattr(datadir, "CHECKOUT_DATA", tmp_path / "site-packages" / "data")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert datadir.data_dir() == tmp_path / "xdg" / "mtx" / "data"  # installed from a wheel


def test_configs_resolve_the_data_directory(monkeypatch, tmp_path):
    from mtx.commands.declared import compose
    monkeypatch.setenv("MTX_DATA_DIR", str(tmp_path))
    for name in ("evaluate", "heads", "download"):
        assert compose(name).data_dir == str(tmp_path)
    assert compose("train").paths.data_dir == str(tmp_path)


def test_only_the_data_readme_is_committed():
    tracked = subprocess.run(["git", "ls-files", "data"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert tracked == ["data/README.md"]
    ignored = subprocess.run(["git", "check-ignore", "data/multi30k/train.en.gz",
                              "data/spm/x.model"], cwd=ROOT, capture_output=True, text=True)
    assert ignored.stdout.split() == ["data/multi30k/train.en.gz", "data/spm/x.model"]


# -- from a wheel ------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_wheel_carries_the_configs_and_commands(tmp_path):
    """`pip install .` builds a wheel: it must hold the configs (mtx/conf is a link in the
    repository) and the commands must run from it, from any directory."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(tmp_path / "dist"), str(ROOT)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("mtx-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    expected = {"mtx/conf/" + str(p.relative_to(CONF)) for p in CONF.rglob("*.yaml")}
    assert expected <= names
    assert "mtx/serving/page.html" in names  # mtx-serve's page
    for name in HYDRA_COMMANDS + ("bench",):
        assert f"mtx-{name} = " in entry_points
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(target))
    where = subprocess.run([sys.executable, "-c", "import mtx.config as c; print(c.CONF_DIR)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert Path(where.stdout.strip()) == target / "mtx" / "conf"
    done = subprocess.run([str(target / "bin" / "mtx-translate"), "--help"], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("mtx-translate: "), done.stderr


@pytest.mark.parametrize("given", [None, "1"])
def test_threads_default_to_every_cpu_unless_given(given):
    """mtx sets OMP_NUM_THREADS (read by MXNet when it loads) to the CPUs it may run on, and
    keeps a value the user gave."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if given:
        env["OMP_NUM_THREADS"] = given
    code = "import mtx, os; print(os.environ['OMP_NUM_THREADS'])"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == (given or str(len(os.sched_getaffinity(0))))
