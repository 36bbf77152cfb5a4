"""train.precision=auto: bfloat16 only where its products measure clearly faster; a GPU, an explicit
precision and a resumed run are not probed; the choice reaches the log, Pieces and report.json."""
import dataclasses
import logging
import types

import mxnet as mx
import pytest
from omegaconf import OmegaConf

from mtx.training import precision
from mtx.config import DataConfig, DecodeConfig, RunConfig, TrainConfig
from mtx.errors import CheckpointError, ConfigError
from mtx.training.precision import BF16_MIN_SPEEDUP, choose_precision
from mtx.runs.rundir import RunDir
from mtx.training import new_fit, train
from mtx.training.build import build_pieces
from tests.conftest import model_config, ROOT

FLOAT32_GFLOP_S = 200.0


AVX512_BF16_FLAGS = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"}
AVX2_FLAGS = {"fma", "avx", "avx2"}


def _fake_probe(monkeypatch, bfloat16_gflop_s, flags=AVX512_BF16_FLAGS):
    """The child's probe measures float32 at 200 GFLOP/s and bfloat16 at ``bfloat16_gflop_s``
    (a string: the child's error) on a CPU with ``flags``; returns the list of probes asked for
    (True: with the speed measurement), each once per process as the real one (a measured
    probe also says that bfloat16 works)."""
    calls = []

    def probe(measure):
        if measure not in calls and not (calls and calls[0] is True):
            calls.append(measure)
        if isinstance(bfloat16_gflop_s, str):
            return {"error": bfloat16_gflop_s}
        return {"ok": True, "float32": FLOAT32_GFLOP_S, "bfloat16": bfloat16_gflop_s}
    monkeypatch.setattr(precision, "child_probe", probe)
    monkeypatch.setattr(precision, "cpu_flags", lambda: set(flags))
    return calls


@pytest.mark.parametrize("bfloat16_gflop_s, used", [
    (2.0 * FLOAT32_GFLOP_S, "bfloat16"),                 # the AMD EPYC
    (BF16_MIN_SPEEDUP * FLOAT32_GFLOP_S, "bfloat16"),    # just clearly faster
    (1.05 * FLOAT32_GFLOP_S, "float32"),                 # faster, but within the noise
    (FLOAT32_GFLOP_S, "float32"),                        # equal
    (0.54 * FLOAT32_GFLOP_S, "float32"),                 # the Intel Xeon with AVX512-BF16
])
def test_auto_takes_bfloat16_only_when_its_products_are_clearly_faster(monkeypatch, caplog,
                                                                       bfloat16_gflop_s, used):
    calls = _fake_probe(monkeypatch, bfloat16_gflop_s)
    caplog.set_level(logging.INFO, logger="mtx.training.precision")
    choice = choose_precision("auto", [mx.cpu()])
    assert calls == [True]
    assert choice["used"] == used and choice["requested"] == "auto"
    probe = choice["probe"]
    assert probe["float32_gflop_s"] == FLOAT32_GFLOP_S
    assert probe["bfloat16_gflop_s"] == round(bfloat16_gflop_s, 1)
    assert probe["ratio"] == pytest.approx(bfloat16_gflop_s / FLOAT32_GFLOP_S, abs=1e-3)
    assert probe["min_ratio"] == BF16_MIN_SPEEDUP
    line = caplog.records[-1].getMessage()
    assert line.startswith(f"matrix products in {used}: ")
    assert f"{round(bfloat16_gflop_s, 1)} GFLOP/s" in line and f"float32 {FLOAT32_GFLOP_S}" in line


def test_the_probe_counts_each_dtypes_fastest_round(monkeypatch):
    """A job beside the probe slows bfloat16 in 9 of 15 rounds to half float32's speed (as when a
    training's probe ran beside a download and chose float32 on a CPU where bfloat16 is 1.5x):
    the probe still reports what the CPU does undisturbed. Timed on a fake clock, no products."""
    clock = {"now": 0.0, "round": {"float32": -1, "bfloat16": -1}}  # -1: the warm-up

    def fake_product(F, x, weight, bias, num_hidden, dtype):
        clock["round"][dtype] += 1
        disturbed = dtype == "bfloat16" and 0 <= clock["round"][dtype] < 9
        clock["now"] += {"float32": 1.0, "bfloat16": 2.0 if disturbed else 2 / 3}[dtype]
        return x
    monkeypatch.setattr(precision, "fully_connected", fake_product)
    monkeypatch.setattr(precision, "time", types.SimpleNamespace(perf_counter=lambda: clock["now"]))
    speed = precision.probe_matmul_speed(mx.cpu(), [(4, 8, 16)], rounds=15, max_seconds=1e9)
    assert clock["round"] == {"float32": 15, "bfloat16": 15}
    assert speed["bfloat16"] / speed["float32"] == pytest.approx(1.5)
    assert speed["float32"] == pytest.approx(2 * 4 * 8 * 16 / 1.0 / 1e9)


def test_bfloat16_that_fails_is_float32_with_the_reason(monkeypatch):
    _fake_probe(monkeypatch, "MXNetError: could not create a primitive descriptor iterator")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")
    choice = choose_precision("auto", [mx.cpu()])
    assert choice["used"] == "float32" and "probe" not in choice
    assert choice["reason"] == ("auto: oneDNN cannot build bfloat16 products here (under "
                                "DNNL_MAX_CPU_ISA=AVX2): MXNetError: could not create a "
                                "primitive descriptor iterator, so float32")


def test_a_cpu_without_avx512_is_float32_without_a_probe(monkeypatch):
    """AVX2-only flags rule bfloat16 out before any child runs; an explicit bfloat16 is one
    line that names what the CPU lacks and the fix."""
    calls = _fake_probe(monkeypatch, 2.0 * FLOAT32_GFLOP_S, flags=AVX2_FLAGS | {"avx512f"})
    choice = choose_precision("auto", [mx.cpu()])
    assert choice["used"] == "float32" and "probe" not in choice and calls == []
    assert "this CPU has no avx512bw/avx512vl/avx512dq" in choice["reason"]
    with pytest.raises(ConfigError) as err:
        choose_precision("bfloat16", [mx.cpu()])
    message = str(err.value)
    assert message.startswith("train.precision=bfloat16 cannot run on this CPU: this CPU has no "
                              "avx512bw/avx512vl/avx512dq")
    assert message.endswith("use train.precision=auto or float32") and "\n" not in message
    assert calls == []


def test_the_flags_that_rule_bfloat16_out():
    assert precision.cpu_lacks_bfloat16(AVX512_BF16_FLAGS - {"avx512_bf16"}) is None
    assert "no avx512f/avx512bw/avx512vl/avx512dq" in precision.cpu_lacks_bfloat16(AVX2_FLAGS)


def test_a_bfloat16_run_resumed_where_bfloat16_cannot_run(monkeypatch, caplog):
    """One line that says to resume in float32; train.precision=float32 then continues it in
    float32 with a warning (the weights are float32 either way)."""
    _fake_probe(monkeypatch, "MXNetError: could not create a primitive descriptor iterator")
    recorded = {"used": "bfloat16", "requested": "auto", "reason": "measured 1.4x"}
    for requested in ("auto", "bfloat16"):
        with pytest.raises(ConfigError, match="this run trains in bfloat16, which cannot run on "
                                              "this CPU .*: resume it with train.precision="
                                              "float32"):
            choose_precision(requested, [mx.cpu()], recorded)
    caplog.set_level(logging.WARNING, logger="mtx.training.precision")
    choice = choose_precision("float32", [mx.cpu()], recorded)
    assert choice["used"] == "float32" and choice["requested"] == "float32"
    assert "though this run started in bfloat16" in caplog.records[-1].getMessage()


def test_the_real_child_probe_fails_under_an_avx2_cap(monkeypatch):
    """Under DNNL_MAX_CPU_ISA=AVX2 bfloat16 is unavailable on any CPU (by its flags, or by the
    child's failure), and this process, which never ran the product, goes on computing."""
    from mxnet import np
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX2")
    monkeypatch.setattr(precision, "_child_results", {})
    assert precision.bfloat16_unavailable()
    assert choose_precision("auto", [mx.cpu()])["used"] == "float32"
    assert float((np.ones((4, 4)) @ np.ones((4, 4))).sum()) == 64.0


def test_a_gpu_and_explicit_precisions_are_not_probed(monkeypatch):
    calls = _fake_probe(monkeypatch, 2.0 * FLOAT32_GFLOP_S)
    choice = choose_precision("auto", [mx.gpu(0), mx.gpu(1)])  # a Context needs no GPU
    assert choice["used"] == "float32" and "not probed" in choice["reason"]
    for requested in ("float32", "bfloat16"):
        assert choose_precision(requested, [mx.cpu()])["used"] == requested
    assert choose_precision("float16", [mx.gpu(0)])["used"] == "float16"
    with pytest.raises(ConfigError, match="float16 needs a GPU"):
        choose_precision("float16", [mx.cpu()])
    assert calls == [False]  # bfloat16 asked for: only whether it runs, no speed probe


def test_a_float16_run_resumed_on_a_cpu_says_to_resume_on_a_gpu():
    recorded = {"used": "float16", "requested": "float16", "reason": "train.precision=float16"}
    assert choose_precision("auto", [mx.gpu(0)], recorded) == recorded
    with pytest.raises(ConfigError, match="this run trains in float16, which needs a GPU: "
                                          "resume it on one"):
        choose_precision("float32", [mx.cpu()], recorded)  # train.precision= is not the fix


def test_auto_is_the_hydra_default_and_a_valid_train_config():
    assert OmegaConf.load(ROOT / "conf" / "train" / "default.yaml").precision == "auto"
    assert TrainConfig(precision="auto").precision == "auto"
    assert not TrainConfig(precision="auto").dynamic_loss_scale
    with pytest.raises(ConfigError, match="give one of float32, bfloat16, bfloat16-mkl, float16, auto"):
        TrainConfig(precision="bf16")


def test_build_pieces_runs_the_choice_and_tells_it(monkeypatch, tiny_cfg):
    """Pieces.precision says what runs; a recorded choice is used as it is."""
    calls = _fake_probe(monkeypatch, 2.0 * FLOAT32_GFLOP_S)
    pieces = build_pieces(tiny_cfg, TrainConfig(), [mx.cpu()], "device")  # as the bench does
    assert pieces.precision["used"] == "float32" and calls == []
    pieces = build_pieces(tiny_cfg, TrainConfig(precision="auto"), [mx.cpu()], "device")
    assert pieces.precision["used"] == "bfloat16" and calls[0] is True
    assert pieces.model.encoder.blocks[0].attention.W_q.compute_dtype == "bfloat16"
    with pytest.raises(ConfigError, match="float16 needs a GPU"):
        build_pieces(tiny_cfg, TrainConfig(), [mx.cpu()], "device",
                     {"used": "float16", "requested": "float16", "reason": "recorded"})


def _toy():
    data_cfg = DataConfig(name="toy", sizes=[300, 20, 20], max_pair_len=64)
    model_cfg = model_config(dropout=0.0)
    return model_cfg, data_cfg


def test_fine_tuning_with_auto_chooses_too(monkeypatch, tmp_path):
    """`continue_training` (heads fine-tuning) builds its run with `new_fit` from the run's
    train config, where precision may be auto."""
    from mtx.data.corpus import load_corpus
    _fake_probe(monkeypatch, 2.0 * FLOAT32_GFLOP_S)
    model_cfg, data_cfg = _toy()
    corpus = load_corpus(data_cfg, tmp_path / "data", 3)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=len(corpus.tokenizer))
    fit = new_fit(corpus, RunConfig(model=model_cfg, data=data_cfg, seed=3,
                                    train=TrainConfig(precision="auto")), tmp_path / "run",
                  [mx.cpu()])
    assert fit.pieces.precision["used"] == "bfloat16"


def test_a_resumed_run_keeps_the_precision_it_started_with(monkeypatch, caplog, tmp_path):
    """Started with the probe's choice, a resume where the probe would now choose the other runs
    the first one again, without timing it; report.json carries the choice and its timings. The
    run really trains, so the first choice is bfloat16 only where bfloat16 runs on this CPU (an
    AVX2-only one, or oneDNN capped: float32 first, and bfloat16's 2x later does not move it)."""
    runs_here = precision.bfloat16_unavailable() is None
    first_used, later_used = ("bfloat16", "float32") if runs_here else ("float32", "bfloat16")
    speed = {"bfloat16": 2.0 * FLOAT32_GFLOP_S, "float32": 0.5 * FLOAT32_GFLOP_S}
    model_cfg, data_cfg = _toy()
    decode_cfg = DecodeConfig(beam_size=1)
    train_cfg = TrainConfig(batch_tokens=256, max_epochs=1, eval_bleu=False, warmup_steps=5,
                            average_last=0, precision="auto")
    first = _fake_probe(monkeypatch, speed[first_used])
    run = RunConfig(model=model_cfg, data=data_cfg, train=train_cfg, decode=decode_cfg,
                    device="cpu", data_dir=str(tmp_path / "data"))
    report = train(run, tmp_path / "run")
    assert first == [True]
    assert report["precision"]["used"] == first_used and report["precision"]["requested"] == "auto"
    assert report["precision"]["probe"]["bfloat16_gflop_s"] == speed[first_used]
    assert RunDir(tmp_path / "run").recorded_precision() == report["precision"]

    later = _fake_probe(monkeypatch, speed[later_used])
    caplog.set_level(logging.INFO, logger="mtx.training.precision")
    resumed = dataclasses.replace(train_cfg, resume=True, max_epochs=2)
    report = train(dataclasses.replace(run, train=resumed), tmp_path / "run")
    # bfloat16 kept: only whether it runs here is checked; float32 kept: nothing is
    assert later == ([False] if runs_here else []) and report["epochs"] == 2
    assert report["precision"]["used"] == first_used
    assert report["precision"]["probe"]["float32_gflop_s"] == FLOAT32_GFLOP_S
    assert any(r.getMessage().startswith(f"matrix products in {first_used}, as when the run "
                                         f"started") for r in caplog.records)


def test_a_run_without_precision_json_is_refused_in_one_line(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "config.yaml").write_text("train:\n  precision: bfloat16\n")
    assert run.recorded_precision() is None  # no checkpoint: nothing ran yet
    run.checkpoints.folder.mkdir()
    (run.checkpoints.folder / "epoch_001.json").write_text("{}")  # a manifest: the run ran
    with pytest.raises(CheckpointError, match="no precision.json, written by an older mtx"):
        run.recorded_precision()
    run.record_precision({"used": "float32", "requested": "auto", "reason": "measured"})
    assert run.recorded_precision()["used"] == "float32"


def test_the_real_probe_measures_both_and_chooses_by_the_rule():
    """One unfaked probe on this CPU (a child process, a few seconds): positive timings of
    float32, MXNet's bfloat16 and, where oneMKL is installed, its bfloat16 (else the reason it
    was not timed), and a choice by the rule; float32 with the reason where bfloat16 cannot run."""
    from mtx.kernels import mkl
    choice = choose_precision("auto", [mx.cpu()])
    assert choice["used"] in ("float32", "bfloat16", "bfloat16-mkl")
    if "probe" not in choice:  # bfloat16 cannot run here
        assert choice["used"] == "float32" and precision.bfloat16_unavailable() in choice["reason"]
        return
    probe = choice["probe"]
    timed = ["float32", "bfloat16"] + (["bfloat16-mkl"] if mkl.unavailable() is None else [])
    rates = {p: probe[f"{p.replace('-', '_')}_gflop_s"] for p in timed}
    assert all(rate > 0 for rate in rates.values()) and probe["seconds"] > 0
    if "bfloat16-mkl" not in timed:
        assert "bfloat16_mkl_gflop_s" not in probe and mkl.unavailable() in choice["reason"]
    fastest = max(timed[1:], key=rates.get)
    assert probe["fastest"] == fastest
    assert probe["ratio"] == pytest.approx(rates[fastest] / rates["float32"], rel=1e-2)
    assert choice["used"] == (fastest if probe["ratio"] >= BF16_MIN_SPEEDUP else "float32")
