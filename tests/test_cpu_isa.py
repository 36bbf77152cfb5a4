"""mtx on a CPU without AVX-512, as most users' are: reproduced on any host by oneDNN's own cap,
``DNNL_MAX_CPU_ISA=AVX2``, for the commands run here as child processes. The default training
command chooses float32 and finishes; bfloat16 asked for is one line; a run trained in bfloat16
translates, and resumes only in float32 when told so; the benchmark leaves bfloat16 out or says
why; the native kernels built for AVX2 compute what MXNet's operators do."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_command, run_script
from tests.test_cli import assert_one_line

AVX2 = {"DNNL_MAX_CPU_ISA": "AVX2"}


@pytest.mark.slow
def test_the_default_training_command_chooses_float32_and_finishes(multi30k_dir, tmp_path):
    """`make train`'s command line, only shorter: Multi30k en-de, the default model, auto (the
    barely trained model's translations are cut at 6 subwords: they would run to the limit)."""
    run_dir = tmp_path / "run"
    done = run_script("train", "train.max_minutes=0.1", "decode.max_len_a=0", "decode.max_len_b=6",
                      f"hydra.run.dir={run_dir}",
                      env={**AVX2, "MTX_MULTI30K_DIR": str(multi30k_dir),
                           "MTX_DATA_DIR": str(tmp_path / "data")}, timeout=900)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["precision"]["used"] == "float32"
    assert report["precision"]["requested"] == "auto"
    assert "bfloat16" in report["precision"]["reason"]  # why not: the flags or oneDNN's failure
    assert report["steps"] > 0 and report["scores"]["test_2016_flickr"]["sacrebleu"]["score"] >= 0


@pytest.mark.slow
def test_bfloat16_asked_for_is_one_line_exit_2(tmp_path):
    done = run_script("train", "experiment=toy", "train.precision=bfloat16",
                      f"hydra.run.dir={tmp_path / 'run'}", env=AVX2)
    assert_one_line(done.stderr.decode(), done.returncode, 2,
                    "error: train.precision=bfloat16 cannot run on this CPU: ")
    assert "use train.precision=auto or float32" in done.stderr.decode()


@pytest.fixture
def bfloat16_run(toy_run, tmp_path):
    """A copy of the toy run as a run that trained in bfloat16 would be (its weights are float32
    in either case; only precision.json says how its products ran)."""
    run_dir = tmp_path / "bf16_run"
    shutil.copytree(toy_run, run_dir)
    (run_dir / "precision.json").write_text(json.dumps(
        {"used": "bfloat16", "requested": "auto", "reason": "auto: 1.4x, so bfloat16"}))
    return run_dir


def test_a_bfloat16_run_translates_and_resumes_only_in_float32(bfloat16_run, tmp_path):
    done = run_command("translate", f"ckpt={bfloat16_run}", "decode=greedy",
                       stdin=b"1 2 3 4\n5 6 7\n", cwd=tmp_path, env=AVX2)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert len(done.stdout.decode().splitlines()) == 2
    resume = ["experiment=toy", f"hydra.run.dir={bfloat16_run}", "train.resume=true"]
    done = run_command("train", *resume, cwd=tmp_path, env=AVX2)
    assert_one_line(done.stderr.decode(), done.returncode, 2,
                    "error: this run trains in bfloat16, which cannot run on this CPU")
    assert "resume it with train.precision=float32" in done.stderr.decode()
    done = run_command("train", *resume, "train.precision=float32", cwd=tmp_path, env=AVX2)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    recorded = json.loads((bfloat16_run / "precision.json").read_text())
    assert recorded["used"] == "float32"  # later resumes go on in float32 without being told


def test_the_bench_says_why_bfloat16_is_left_out(tmp_path):
    done = run_command("bench", "train", "--impl", "mtx,mtx-bf16", cwd=tmp_path, env=AVX2)
    assert_one_line(done.stderr.decode(), done.returncode, 2,
                    "error: --impl mtx-bf16: its products cannot run on this CPU")


@pytest.mark.slow
def test_the_training_bench_runs_under_the_cap(tmp_path):
    """`DNNL_MAX_CPU_ISA=AVX2 mtx-bench train`: measured as on an AVX2-only CPU, with no bfloat16
    GEMM peak, and the machine line names the cap."""
    out = tmp_path / "bench.json"
    done = run_command("bench", "train", "--impl", "mtx", "--model", "tiny", "--data", "toy",
                       "--seconds", "1", "--warmup-steps", "2", "--out", str(out), cwd=tmp_path,
                       env={**AVX2, "MTX_DATA_DIR": str(tmp_path / "data")}, timeout=900)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(out.read_text())
    result = report["train"]["mtx"]
    assert result["tok_s"] > 0 and result["gemm_peak_gflop_s"] > 0
    assert result["gemm_peak_bf16_gflop_s"] is None  # no bfloat16 under the cap
    assert report["machine"]["isa_cap"] == "DNNL_MAX_CPU_ISA=AVX2"
    assert "under DNNL_MAX_CPU_ISA=AVX2" in done.stdout.decode()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="the native kernels need g++")
def test_native_kernels_built_for_avx2_match_mxnet(tmp_path):
    """The kernels are built with -march=native; built for an AVX2-only CPU (-march=haswell,
    which comes after it and wins), in their own cache, they pass the same comparisons with
    MXNet's LayerNorm and loss, and live under another cache key."""
    env = {k: v for k, v in os.environ.items() if k not in ("CXXFLAGS", "MTX_KERNEL_CACHE")}
    env.update(CXXFLAGS="-march=haswell", MTX_KERNEL_CACHE=str(tmp_path / "kernels"), **AVX2)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(ROOT / "tests" / "test_kernels.py"), "-k",
                           "matches_mxnet or matches_the_composed_one or build_and_load"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout
    built = list((tmp_path / "kernels").glob("libmtx_kernels-*.so"))
    assert len(built) == 1
    from mtx import kernels
    if os.environ.get("CXXFLAGS") is None:
        assert built[0].name != kernels.library_path().name
