"""mtx.bench: the FLOP count, the config it reads from conf/, its command line, a tiny training
measurement on the toy task."""
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as onp
import pytest
import yaml

from mtx.bench import inputs
from mtx.bench.__main__ import COMMANDS, main
from mtx.bench.flops import decode_step_parts, train_flops
from mtx.bench.tables import results_table
from mtx.config import ModelConfig
from mtx.errors import ConfigError


def test_flops_match_a_hand_count():
    """D=4, F=8, 2 encoder layers, 1 decoder layer, V=10; sentences (S, T) = (3, 2) and (1, 4)."""
    cfg = ModelConfig(num_hiddens=4, num_heads=2, ffn_num_hiddens=8, num_encoder_layers=2,
                      num_decoder_layers=1, vocab_size=10)
    batch = SimpleNamespace(src_valid_len=onp.array([3, 1]), tgt_valid_len=onp.array([2, 4]))
    enc_params = 2 * (4 * 16 + 2 * 4 * 8)          # 2 x 128 = 256 per source token
    dec_params = 1 * (8 * 16 + 2 * 4 * 8) + 4 * 10  # 192 + 40 = 232 per target token
    dense = 6 * (enc_params * 4 + dec_params * 6)   # 4 source, 6 target tokens -> 14,496
    attn = 12 * 4 * (2 * (9 + 1) + 1 * ((4 + 16) + (6 + 4)))  # S^2 20, T^2 20, TS 10 -> 2,400
    assert dense + attn == 16_896
    assert train_flops(cfg, batch) == 16_896


def test_flops_reject_a_pruned_model():
    cfg = ModelConfig(num_hiddens=4, num_heads=2, ffn_num_hiddens=8, num_encoder_layers=1,
                      num_decoder_layers=1, vocab_size=10, heads_per_layer=[2, 1, 2])
    with pytest.raises(ConfigError, match="heads_per_layer"):
        train_flops(cfg, SimpleNamespace(src_valid_len=onp.array([1]), tgt_valid_len=onp.array([1])))


def test_decode_step_parts_follow_a_pruned_model():
    """D=8, 2 heads of 4, F=16, V=10, 1 encoder and 2 decoder layers, the second decoder layer
    pruned to 1 self and 1 cross head; 3 hypotheses, 5 source and 2 cached positions."""
    cfg = ModelConfig(num_hiddens=8, num_heads=2, ffn_num_hiddens=16, num_encoder_layers=1,
                      num_decoder_layers=2, vocab_size=10, heads_per_layer=[2, 2, 2, 1, 1])
    parts = decode_step_parts(cfg, rows=3, src_len=5, cache_len=2)
    assert parts["self-attention projections"] == [
        ("dense", (3, 8, 8), 3), ("dense", (3, 8, 8), 1),   # layer 1: Q K V, then O
        ("dense", (3, 8, 4), 3), ("dense", (3, 4, 8), 1)]   # layer 2: one head of 4
    assert parts["cross-attention projections"] == [
        ("dense", (3, 8, 8), 1), ("dense", (3, 8, 8), 1), ("dense", (3, 8, 4), 1),
        ("dense", (3, 4, 8), 1)]                             # Q and O only: K, V once a sentence
    assert parts["self-attention products"][2:] == [("batched", (3, 1, 4, 3), 1),
                                                    ("batched", (3, 1, 3, 4), 1)]  # 2 cached + new
    assert parts["cross-attention products"][:2] == [("batched", (6, 1, 4, 5), 1),
                                                     ("batched", (6, 1, 5, 4), 1)]
    assert parts["FFN"] == [("dense", (3, 8, 16), 2), ("dense", (3, 16, 8), 2)]
    assert parts["output layer"] == [("dense", (3, 8, 10), 1)]


def test_model_config_is_conf_small_untied_with_the_data_vocabulary():
    expected = yaml.safe_load((inputs.CONF_DIR / "model" / "small.yaml").read_text())
    cfg = inputs.model_config(inputs.DEFAULT_MODEL, vocab_size=8000)
    for key, value in expected.items():
        if key not in ("tie_embeddings", "vocab_size"):
            assert getattr(cfg, key) == value, key
    assert cfg.tie_embeddings is False and cfg.vocab_size == 8000


def test_data_config_is_conf_multi30k_en_de(monkeypatch):
    monkeypatch.setenv("MTX_MULTI30K_DIR", "/nonexistent/multi30k")
    cfg = inputs.data_config(inputs.DEFAULT_DATA)
    assert (cfg.name, cfg.src_lang, cfg.tgt_lang, cfg.max_pair_len) == ("multi30k", "en", "de", 128)
    assert cfg.raw_dir == "/nonexistent/multi30k"


def test_unknown_config_name_is_a_config_error():
    with pytest.raises(ConfigError, match="small"):  # the message lists the choices
        inputs.model_config("no_such_model", vocab_size=8)


@pytest.mark.parametrize("argv", [["train", "--impl", "mtx-fast"], ["decode", "--impl", "mtx,x"],
                                  ["--impl", "gluonnlp,tf"]])
def test_unknown_impl_is_a_one_line_error(argv, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(tmp_path / "report.json")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("error: --impl ") and "choose from mtx, mtx-bf16" in err
    assert err.count("\n") == 1
    assert not (tmp_path / "report.json").exists()


@pytest.mark.parametrize("argv, problem", [
    (["compare-runs", "a", "b", "--rounds", "0"], "--rounds: 0 must be at least 1"),
    (["decode", "--impl", "mtx", "--steps", "x"], "--steps: 'x' is not a whole number"),
    (["serve", "--run", "r", "--seconds", "-1"], "--seconds: -1 must be > 0")])
def test_a_bad_number_is_refused_before_any_work(argv, problem, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and problem in err and err.count("\n") == 1


def test_an_unwritable_out_is_refused_before_the_measurement(capsys, tmp_path, monkeypatch):
    def measure(args):
        raise AssertionError("measured before --out was checked")
    monkeypatch.setitem(COMMANDS, "compare-runs", measure)
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        main(["compare-runs", "a", "b", "--out", str(tmp_path / "file" / "report.json")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_results_table_has_one_row_per_impl_and_scalar_columns():
    table = results_table({"mtx": {"tok_s": 1.0, "tok_s_windows": [1]}, "d2l": {"skipped": "x"}})
    assert table.splitlines()[0] == "| implementation | tok_s | skipped |"
    assert table.splitlines()[2:] == ["| mtx | 1.0 | - |", "| d2l | - | x |"]


@pytest.mark.slow
def test_train_measurement_on_the_toy_task(tmp_path, monkeypatch, capsys):
    """`train --impl mtx` with tiny settings writes the report it is told to, and nothing else."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MTX_DATA_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out" / "train.json"
    main(["train", "--impl", "mtx", "--model", "tiny", "--data", "toy", "--seconds", "0.5",
          "--warmup-steps", "2", "--out", str(out)])
    report = json.loads(out.read_text())
    assert set(report) == {"machine", "model_config", "train"}
    assert set(report["machine"]) >= {"cpu", "cpu_flags", "mxnet", "omp_num_threads"}
    assert report["model_config"]["tie_embeddings"] is False
    assert report["model_config"]["vocab_size"] == 24  # 20 toy symbols + 4 specials
    result = report["train"]["mtx"]
    assert set(result) >= {"tok_s", "tok_s_windows", "gflop_s", "steps", "warmup_steps",
                           "precision", "kernels", "peak_rss_mb", "batching", "batch_shapes",
                           "products_alone_gflop_s"}
    # the step's products timed alone: the toy model's 7 kinds, its output layer 24 wide
    products = result["products_alone"]["products"]
    assert len(products) == 7 and products[-1]["out"] == 24
    assert all(p["gflop_s"] > 0 and p["ms"] > 0 for p in products)
    assert result["tok_s"] > 0 and result["steps"] > 2 and result["precision"] == "float32"
    assert "native_layer_norm" in result["kernels"]
    assert "| mtx |" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no cache: toy data needs none


def test_translate_profile_of_a_trained_run(toy_run, tmp_path, capsys):
    """`translate --profile`: the timed pass under MXNet's profiler, its operators in the report
    and in a table after the results."""
    out = tmp_path / "translate.json"
    main(["translate", "--run", str(toy_run), "--beam", "2", "--max-sentences", "40",
          "--profile", "--out", str(out)])
    result = json.loads(out.read_text())["translate"]["beam2"]
    assert result["sacrebleu"]["score"] > 80 and result["seconds"] > 0
    operators = result["operators_ms"]
    assert "FullyConnected" in operators and "batch_dot" in operators
    assert list(operators.values()) == sorted(operators.values(), reverse=True)
    printed = capsys.readouterr().out
    assert "| ms over the pass | beam2 |" in printed and "| FullyConnected | " in printed


def test_compare_runs_times_each_run_and_its_decoding_step_by_part(toy_run, tmp_path, capsys):
    """`compare-runs`: the runs in turn, forced-length greedy, speed-ups against the first, and
    each run's decoding step with its products by part; with --beam, their real translation."""
    out = tmp_path / "compare.json"
    main(["compare-runs", str(toy_run), str(toy_run), "--data", "toy", "--steps", "6",
          "--rounds", "2", "--beam", "2", "--out", str(out)])
    results = json.loads(out.read_text())["compare_runs"]
    assert list(results) == [str(toy_run)]  # the same run twice is one entry
    r = results[str(toy_run)]
    assert len(r["seconds"]) == 2 and r["best"] == min(r["seconds"]) and r["heads"] == 24
    assert set(r["parts_ms"]) == {"self-attention projections", "self-attention products",
                                  "cross-attention projections", "cross-attention products",
                                  "FFN", "output layer"}
    assert all(ms > 0 for ms in r["parts_ms"].values())
    assert r["products_ms"] == pytest.approx(sum(r["parts_ms"].values()), abs=1e-2)
    beam = r["beam"]  # then the real translation at beam 2, the same rounds
    assert beam["beam_size"] == 2 and len(beam["seconds"]) == 2 and beam["speedup_vs_first"] == 1
    assert beam["sacrebleu"] > 80 and beam["subwords"] > 0
    printed = capsys.readouterr().out
    assert "| run | step | self-attention projections |" in printed
    assert "Translating the test split, beam 2, the runs in turn:" in printed


def test_compare_runs_decodes_the_runs_own_test_split(toy_run, tmp_path):
    """A run with data.json is timed on its own corpus, tokenized by its own tokenizer: --data
    (for runs without one) is not read, even when it names no corpus."""
    out = tmp_path / "compare.json"
    main(["compare-runs", str(toy_run), "--data", "no_such_corpus", "--steps", "2",
          "--rounds", "1", "--out", str(out)])
    result = json.loads(out.read_text())["compare_runs"][str(toy_run)]
    assert len(result["seconds"]) == 1 and result["step_ms"] > 0


def test_compare_runs_refuses_runs_of_different_language_pairs(tmp_path):
    """--beam scores every run against the first run's references: runs of another pair would
    be scored against the wrong language, so they are refused before any model loads."""
    from mtx.bench.workers import runs_corpus
    from mtx.errors import ConfigError
    for name, src, tgt in (("en_de", "en", "de"), ("de_en", "de", "en"), ("en_de2", "en", "de")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data.json").write_text(json.dumps({"src_lang": src, "tgt_lang": tgt}))
    assert runs_corpus([tmp_path / "en_de", tmp_path / "en_de2"]).tgt_lang == "de"
    with pytest.raises(ConfigError, match=r"trained on \('multi30k', 'de', 'en'\) and "
                                          r"\('multi30k', 'en', 'de'\): compare runs of one"):
        runs_corpus([tmp_path / "en_de", tmp_path / "de_en"])


def test_training_rounds_interleave_and_pair_the_ratios(monkeypatch, capsys):
    """`train` with several implementations: each round runs every one in turn, each in a
    process of its own; the report has each one's median round and the paired ratios, the table
    the GEMM peaks and MFU. Children and GEMM peaks are faked: this tests the bookkeeping."""
    from mtx.bench import machine, workers
    calls, speeds = [], {"mtx": iter([2000.0, 1500.0, 2100.0]), "gluonnlp": iter([1600.0, 1400.0,
                                                                                 1500.0])}

    def child(command, *args, cwd=None):
        name = args[args.index("--impl") + 1]
        calls.append(name)
        tok_s = next(speeds[name])
        return {"train": {name: {"tok_s": tok_s, "gflop_s": tok_s / 20}}}
    monkeypatch.setattr(workers, "run_child", child)
    monkeypatch.setattr(machine, "gemm_peak", lambda dtype="float32": 300.0 if dtype ==
                        "float32" else 150.0)
    main(["train", "--impl", "mtx,gluonnlp", "--rounds", "3", "--seconds", "1"])
    assert calls == ["mtx", "gluonnlp"] * 3
    printed = capsys.readouterr().out
    # paired per round: 2000/1600, 1500/1400, 2100/1500; median 1.25 (not 2000/1500 of medians)
    assert "| mtx / gluonnlp | 1.25 | 1.071 | 1.4 | 1.25, 1.071, 1.4 |" in printed
    assert "| mtx | 2000.0 | 2000.0, 1500.0, 2100.0 | 100.0 | 33% | 67% | - |" in printed
    assert "300.0 GFLOP/s float32 (rounds: 300.0, 300.0, 300.0), 150.0 bfloat16" in printed


def test_batchings_interleave_as_implementations_do(monkeypatch, capsys):
    """`--batches bucket,packed`: every round runs each implementation on each batching (the
    child gets one), labelled "<impl> (<batching>)"; ratios of the first implementation to the
    others on the same batches, and of each implementation's packed round to its bucket one."""
    from mtx.bench import machine, workers
    calls = []

    def child(command, *args, cwd=None):
        name, batching = args[args.index("--impl") + 1], args[args.index("--batches") + 1]
        calls.append((name, batching))
        tok_s = 1000.0 * (1 + len(calls))
        return {"train": {name: {"tok_s": tok_s, "gflop_s": tok_s / 20}}}
    monkeypatch.setattr(workers, "run_child", child)
    monkeypatch.setattr(machine, "gemm_peak", lambda dtype="float32": 300.0)
    main(["train", "--impl", "mtx,gluonnlp", "--batches", "bucket,packed", "--rounds", "2"])
    assert calls == [("mtx", "bucket"), ("gluonnlp", "bucket"), ("mtx", "packed"),
                     ("gluonnlp", "packed")] * 2
    printed = capsys.readouterr().out
    # tok/s by call: round 1 mtx 2000, gluonnlp 3000, mtx 4000, gluonnlp 5000; round 2 6000...
    assert "| mtx (bucket) / gluonnlp (bucket) | 0.762 | 0.667 | 0.857 | 0.667, 0.857 |" in printed
    assert "| mtx (packed) / gluonnlp (packed) | 0.844 | 0.8 | 0.889 | 0.8, 0.889 |" in printed
    assert "| mtx (packed) / mtx (bucket) | 1.667 | 1.333 | 2.0 | 2.0, 1.333 |" in printed
    assert "| gluonnlp (packed) / gluonnlp (bucket) | 1.476 | 1.286 | 1.667 | 1.667, 1.286 |" in printed


def test_an_older_revision_runs_in_its_own_checkout(monkeypatch, capsys):
    """`--impl mtx,mtx@REV`: the REV child runs in a worktree of REV (its files are REV's), is
    not given options REV's bench may not know when they are at their defaults, and is paired
    with the current mtx round by round."""
    import subprocess
    from mtx.bench import machine, workers
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip()
    calls = []

    def child(command, *args, cwd=None):
        calls.append((args, cwd))
        if cwd is not None:  # the checkout holds HEAD's tree
            listed = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True,
                                    text=True, cwd=cwd).stdout.strip()
            assert listed == head and (Path(cwd) / "mtx" / "bench").is_dir()
        return {"train": {"mtx": {"tok_s": 2000.0 if cwd is None else 1000.0, "gflop_s": 1.0}}}
    monkeypatch.setattr(workers, "run_child", child)
    monkeypatch.setattr(machine, "gemm_peak", lambda dtype="float32": 300.0)
    main(["train", "--impl", "mtx,mtx@HEAD", "--rounds", "2"])
    assert [cwd is None for _, cwd in calls] == [True, False, True, False]
    assert "--batches" in calls[0][0] and "--batches" not in calls[1][0]
    assert "| mtx / mtx@HEAD | 2.0 |" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["train", "--impl", "mtx", "--batches", "sorted"], "error: --batches sorted"),
    (["train", "--impl", "mtx,mtx@no-such-revision-x"], "no such git revision"),
    (["profile", "--impl", "mtx", "--batches", "bucket,packed"], "error: --batches bucket,packed")])
def test_bad_batching_or_revision_is_a_one_line_error(argv, words, capsys, monkeypatch):
    from mtx.bench import machine, workers

    def measured(*args, **kwargs):
        raise AssertionError("measured before the command line was checked")
    monkeypatch.setattr(workers, "run_child", measured)
    monkeypatch.setattr(machine, "gemm_peak", measured)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert words in err and err.count("\n") == 1


def test_machine_description_has_the_onednn_version():
    from mtx.bench.machine import describe
    assert describe()["onednn"].count(".") == 2  # e.g. 2.4.4, read from the wheel's header
