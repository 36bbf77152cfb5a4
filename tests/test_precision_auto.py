"""train.precision=auto: bfloat16 only where its products measure clearly faster; a GPU, an explicit
precision and a resumed run are not probed; the choice reaches the log, Pieces and report.json."""
import dataclasses
import logging

import mxnet as mx
import pytest
from mxnet.base import MXNetError
from omegaconf import OmegaConf

from mtx import precision
from mtx.config import DataConfig, DecodeConfig, ModelConfig, TrainConfig
from mtx.errors import ConfigError
from mtx.precision import BF16_MIN_SPEEDUP, choose_precision
from mtx.rundir import RunDir
from mtx.training import new_fit, train
from mtx.training.build import build_pieces
from tests.conftest import ROOT

FLOAT32_GFLOP_S = 200.0


def _fake_probe(monkeypatch, bfloat16_gflop_s):
    """probe_matmul_speed measures float32 at 200 GFLOP/s and bfloat16 at ``bfloat16_gflop_s``
    (an exception instance: raised); returns the list of devices it was called with."""
    calls = []

    def probe(ctx, *args, **kwargs):
        calls.append(ctx)
        if isinstance(bfloat16_gflop_s, Exception):
            raise bfloat16_gflop_s
        return {"float32": FLOAT32_GFLOP_S, "bfloat16": bfloat16_gflop_s}
    monkeypatch.setattr(precision, "probe_matmul_speed", probe)
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
    caplog.set_level(logging.INFO, logger="mtx.precision")
    choice = choose_precision("auto", [mx.cpu()])
    assert calls == [mx.cpu()]
    assert choice["used"] == used and choice["requested"] == "auto"
    probe = choice["probe"]
    assert probe["float32_gflop_s"] == FLOAT32_GFLOP_S
    assert probe["bfloat16_gflop_s"] == round(bfloat16_gflop_s, 1)
    assert probe["ratio"] == pytest.approx(bfloat16_gflop_s / FLOAT32_GFLOP_S, abs=1e-3)
    assert probe["min_ratio"] == BF16_MIN_SPEEDUP
    line = caplog.records[-1].getMessage()
    assert line.startswith(f"matrix products in {used}: ")
    assert f"{round(bfloat16_gflop_s, 1)} GFLOP/s" in line and f"float32 {FLOAT32_GFLOP_S}" in line


def test_bfloat16_that_fails_is_float32_with_the_reason(monkeypatch):
    _fake_probe(monkeypatch, MXNetError("bfloat16 FullyConnected is not supported\nstack"))
    choice = choose_precision("auto", [mx.cpu()])
    assert choice["used"] == "float32" and "probe" not in choice
    assert "MXNetError: bfloat16 FullyConnected is not supported)" in choice["reason"]


def test_a_gpu_and_explicit_precisions_are_not_probed(monkeypatch):
    calls = _fake_probe(monkeypatch, 2.0 * FLOAT32_GFLOP_S)
    choice = choose_precision("auto", [mx.gpu(0), mx.gpu(1)])  # a Context needs no GPU
    assert choice["used"] == "float32" and "not probed" in choice["reason"]
    for requested in ("float32", "bfloat16"):
        assert choose_precision(requested, [mx.cpu()])["used"] == requested
    assert choose_precision("float16", [mx.gpu(0)])["used"] == "float16"
    with pytest.raises(ConfigError, match="float16 needs a GPU"):
        choose_precision("float16", [mx.cpu()])
    assert calls == []


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
    with pytest.raises(ConfigError, match="choose one of float32, bfloat16, float16, auto"):
        TrainConfig(precision="bf16")


def test_build_pieces_runs_the_choice_and_tells_it(monkeypatch, tiny_cfg):
    """Pieces.precision says what runs; a recorded choice is used as it is."""
    calls = _fake_probe(monkeypatch, 2.0 * FLOAT32_GFLOP_S)
    pieces = build_pieces(tiny_cfg, TrainConfig(), [mx.cpu()], "device")  # as the bench does
    assert pieces.precision["used"] == "float32" and calls == []
    pieces = build_pieces(tiny_cfg, TrainConfig(precision="auto"), [mx.cpu()], "device")
    assert pieces.precision["used"] == "bfloat16" and len(calls) == 1
    assert pieces.model.encoder.blocks[0].attention.W_q.compute_dtype == "bfloat16"
    with pytest.raises(ConfigError, match="float16 needs a GPU"):
        build_pieces(tiny_cfg, TrainConfig(), [mx.cpu()], "device",
                     {"used": "float16", "requested": "float16", "reason": "recorded"})


def _toy():
    data_cfg = DataConfig(name="toy", sizes=[300, 20, 20], max_len=64)
    model_cfg = ModelConfig(num_hiddens=16, num_heads=2, ffn_num_hiddens=32, num_encoder_layers=1,
                            num_decoder_layers=1, dropout=0.0)
    return model_cfg, data_cfg


def test_fine_tuning_with_auto_chooses_too(monkeypatch, tmp_path):
    """`continue_training` (heads fine-tuning) builds its run with `new_fit` from the run's
    train config, where precision may be auto."""
    from mtx.corpus import load_corpus
    _fake_probe(monkeypatch, 2.0 * FLOAT32_GFLOP_S)
    model_cfg, data_cfg = _toy()
    corpus = load_corpus(data_cfg, tmp_path / "data", 3)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=len(corpus.tokenizer))
    fit = new_fit(corpus, model_cfg, data_cfg, TrainConfig(precision="auto"), DecodeConfig(),
                  tmp_path / "run", [mx.cpu()], 3)
    assert fit.pieces.precision["used"] == "bfloat16"


def test_a_resumed_run_keeps_the_precision_it_started_with(monkeypatch, caplog, tmp_path):
    """Started where bfloat16 measured 2x: a resume where the probe would now say float32 runs
    bfloat16 again, without probing; report.json carries the choice and its timings."""
    model_cfg, data_cfg = _toy()
    decode_cfg = DecodeConfig(beam_size=1)
    train_cfg = TrainConfig(batch_tokens=256, max_epochs=1, eval_bleu=False, warmup_steps=5,
                            average_last=0, precision="auto")
    first = _fake_probe(monkeypatch, 2.0 * FLOAT32_GFLOP_S)
    report = train(model_cfg, data_cfg, train_cfg, decode_cfg, tmp_path / "run", tmp_path / "data")
    assert len(first) == 1
    assert report["precision"]["used"] == "bfloat16" and report["precision"]["requested"] == "auto"
    assert report["precision"]["probe"]["bfloat16_gflop_s"] == 2.0 * FLOAT32_GFLOP_S
    assert RunDir(tmp_path / "run").recorded_precision() == report["precision"]

    later = _fake_probe(monkeypatch, 0.5 * FLOAT32_GFLOP_S)
    caplog.set_level(logging.INFO, logger="mtx.precision")
    resumed = dataclasses.replace(train_cfg, resume=True, max_epochs=2)
    report = train(model_cfg, data_cfg, resumed, decode_cfg, tmp_path / "run", tmp_path / "data")
    assert later == [] and report["epochs"] == 2
    assert report["precision"]["used"] == "bfloat16"
    assert report["precision"]["probe"]["float32_gflop_s"] == FLOAT32_GFLOP_S
    assert any(r.getMessage().startswith("matrix products in bfloat16, as when the run started")
               for r in caplog.records)


def test_a_run_from_before_precision_json_keeps_its_config_precision(tmp_path):
    run = RunDir(tmp_path)
    (tmp_path / "config.yaml").write_text("train:\n  precision: bfloat16\n")
    assert run.recorded_precision() is None  # no checkpoint: nothing ran yet
    run.checkpoints.mkdir()
    (run.checkpoints / "epoch_001.json").write_text("{}")  # a manifest: the run ran
    assert run.recorded_precision()["used"] == "bfloat16"
    (tmp_path / "config.yaml").write_text("train:\n  precision: auto\n")
    assert run.recorded_precision() is None  # auto there: no record of what it measured
    run.record_precision({"used": "float32", "requested": "auto", "reason": "measured"})
    assert run.recorded_precision()["used"] == "float32"


def test_the_real_probe_measures_both_and_chooses_by_the_rule():
    """One unfaked probe on this CPU (about a second): positive timings, a valid choice."""
    choice = choose_precision("auto", [mx.cpu()])
    assert choice["used"] in ("float32", "bfloat16")
    if "probe" not in choice:  # bfloat16 cannot run here
        assert choice["used"] == "float32" and "fail" in choice["reason"]
        return
    probe = choice["probe"]
    assert probe["float32_gflop_s"] > 0 and probe["bfloat16_gflop_s"] > 0 and probe["seconds"] > 0
    assert probe["ratio"] == pytest.approx(probe["bfloat16_gflop_s"] / probe["float32_gflop_s"],
                                           rel=1e-2)
    assert choice["used"] == ("bfloat16" if probe["ratio"] >= BF16_MIN_SPEEDUP else "float32")
