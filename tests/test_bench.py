"""mtx-bench: its command line refuses bad input in one line, the measurements run on the toy task
and print their tables, and training in interleaved rounds pairs its ratios round by round."""
import json
import shutil

import pytest
from omegaconf import OmegaConf

from mtx.bench import rounds
from mtx.bench.__main__ import main


def one_line_error(capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1
    return err


@pytest.fixture
def no_children(monkeypatch):
    """A test of the command line fails if any measurement starts."""
    def started(*args, **kwargs):
        raise AssertionError("a measurement started before the command line was checked")
    monkeypatch.setattr(rounds, "run_child", started)
    monkeypatch.setattr("mtx.bench.__main__.measure", started)


@pytest.mark.parametrize("argv, words", [
    (["train", "--impl", "mtx-fast"], "--impl mtx-fast: unknown implementation; choose from mtx, "
                                      "mtx-bf16, mtx-mkl, gluonnlp, d2l"),
    (["train", "--impl", "gluonnlp,tf"], "--impl tf: unknown implementation"),
    (["decode", "--impl", "ct2-int8"], "decode --impl ct2-int8 translates a trained run: give "
                                       "--run RUN_DIR"),
    (["decode", "--run", "r", "--impl", "gluonnlp"], "--impl gluonnlp: unknown implementation; "
                                                     "choose from mtx, mtx-bf16, mtx-mkl, ct2-float32"),
    (["decode", "--run", "a,b", "--impl", "mtx,ct2-int8"],
     "--run a,b: several runs are timed with one implementation, --impl mtx, mtx-bf16, mtx-mkl"),
    (["serve"], "serve translates a trained run: give --run RUN_DIR"),
    (["profile", "--beam", "0"], "--beam: '0' is not a whole number >= 1"),
    (["profile"], "profile translates a trained run: give --run RUN_DIR"),
    (["train", "--impl", "mtx,mtx@no-such-revision-x"], "no such git revision"),
    (["train", "--impl", "mtx", "--rounds", "0"], "--rounds: '0' is not a whole number >= 1"),
    (["decode", "--run", "r", "--max-sentences", "x"],
     "--max-sentences: 'x' is not a whole number"),
    (["serve", "--run", "r", "--seconds", "-1"], "--seconds: '-1' is not a number > 0"),
    (["serve", "--run", "r", "--clients", "1-16"], "--clients 1-16: give client counts"),
    (["train", "--impl", "mtx,mtx:rdrop_alpha=-1"],
     "--impl mtx:rdrop_alpha=-1: train.rdrop_alpha=-1: give > 0 (e.g. 5): R-Drop"),
    (["train", "--impl", "mtx:no_such_setting=1"],
     "--impl mtx:no_such_setting=1: no_such_setting is not a training setting"),
    (["train", "--impl", "mtx:rdrop_alpha"], "give settings as IMPL:KEY=VALUE"),
    (["train", "--impl", "gluonnlp:rdrop_alpha=5"], "apply to mtx and mtx-bf16 only"),
    (["decode", "--run", "r", "--impl", "mtx:rdrop_alpha=5"], "are for mtx-bench train")])
def test_bad_input_is_one_line_before_any_measurement(argv, words, capsys, tmp_path, no_children):
    assert words in one_line_error(capsys, [*argv, "--out", str(tmp_path / "report.json")])
    assert not (tmp_path / "report.json").exists()


def test_an_unwritable_out_is_refused_before_the_measurement(capsys, tmp_path, no_children):
    (tmp_path / "file").write_text("")
    one_line_error(capsys, ["train", "--impl", "mtx", "--out", str(tmp_path / "file" / "r.json")])


def fake_children(monkeypatch, speeds):
    """Children that report the next of ``speeds[impl]`` tok/s; returns the calls made."""
    calls = []

    def child(command, *args, cwd=None):
        options = dict(zip(args[::2], args[1::2]))
        calls.append({**options, "cwd": cwd})
        tok_s = next(speeds[options["--impl"]])
        return {"train": {options["--impl"]: {"tok_s": tok_s, "gflop_s": tok_s / 20,
                                              "gemm_peak_gflop_s": 300.0,
                                              "gemm_peak_bf16_gflop_s": 150.0,
                                              "model_gemm_gflop_s": 200.0,
                                              "model_gemm_bf16_gflop_s": 100.0}}}
    monkeypatch.setattr(rounds, "run_child", child)
    return calls


def test_training_rounds_interleave_and_pair_the_ratios(monkeypatch, capsys):
    """Each round runs every implementation in turn; the table has each one's median round, its
    MFU (against the 2048^3 peaks and the model's own products) and the median of the per-round
    ratios (2000/1600, 1500/1400, 2100/1500), not the ratio of the medians."""
    calls = fake_children(monkeypatch, {"mtx": iter([2000.0, 1500.0, 2100.0]),
                                        "gluonnlp": iter([1600.0, 1400.0, 1500.0])})
    main(["train", "--impl", "mtx,gluonnlp", "--rounds", "3", "--seconds", "1"])
    assert [c["--impl"] for c in calls] == ["mtx", "gluonnlp"] * 3
    printed = capsys.readouterr().out
    assert "| mtx / gluonnlp | 1.25 | 1.071 | 1.4 | 1.25, 1.071, 1.4 |" in printed
    assert "| mtx | 2000.0 | 2000.0, 1500.0, 2100.0 | 100.0 | 33% | 67% | 50% | 100% |" in printed
    assert "300.0 GFLOP/s float32" in printed and "150.0 bfloat16" in printed
    assert "the model's own products" in printed and "200.0 GFLOP/s float32" in printed


def test_decoding_rounds_interleave_children_and_pair_their_seconds(monkeypatch, capsys, tmp_path):
    """Several decoders: each child translates one round, the children in turn, --rounds times;
    each row keeps its fastest round of each search and every round's seconds, and each pair
    its per-round ratios of seconds (not the ratio of the best rounds)."""
    seconds = {"mtx": iter([(10.0, 4.0), (12.0, 3.0)]),
               "ct2-float32": iter([(8.0, 2.0), (6.0, 2.0)])}
    calls = []

    def child(command, *args, cwd=None):
        options = dict(zip(args[::2], args[1::2]))
        calls.append(options)
        beam, greedy = next(seconds[options["--impl"]])
        return {"decode": {options["--impl"]: {"sentences": 9, "beam5_seconds": beam,
                                               "beam5_sacrebleu": 30.0 + beam,
                                               "greedy_seconds": greedy}}}
    monkeypatch.setattr(rounds, "run_child", child)
    out = tmp_path / "r.json"
    main(["decode", "--run", str(tmp_path), "--impl", "mtx,ct2-float32", "--rounds", "2",
          "--out", str(out)])
    assert [(c["--impl"], c["--rounds"]) for c in calls] == [("mtx", 1), ("ct2-float32", 1)] * 2
    report = json.loads(out.read_text())
    mtx = report["decode"]["mtx"]
    assert (mtx["beam5_seconds"], mtx["beam5_sacrebleu"], mtx["greedy_seconds"]) == (10.0, 40.0, 3.0)
    assert mtx["beam5_rounds"] == "10.0, 12.0"
    assert report["decode_ratios"]["mtx / ct2-float32 (beam5 seconds)"]["rounds"] == [1.25, 2.0]
    printed = capsys.readouterr().out
    assert "| mtx / ct2-float32 (greedy seconds) | 1.75 | 1.5 | 2.0 | 2.0, 1.5 |" in printed


def test_another_revision_runs_in_its_checkout_and_is_paired(monkeypatch, capsys):
    """`mtx@HEAD`: every round runs it in its checkout (faked here: a real one is a git worktree),
    beside mtx from this one, and pairs the two round by round."""
    monkeypatch.setattr(rounds, "checkout", lambda revision: f"/checkout/of/{revision}")
    speeds, calls = iter([1000.0, 2000.0] * 2), []

    def child(command, *args, cwd=None):
        impl = args[args.index("--impl") + 1]
        calls.append((impl, cwd))
        return {"train": {impl: {"tok_s": next(speeds), "gflop_s": 1.0,
                                 "gemm_peak_gflop_s": 300.0, "gemm_peak_bf16_gflop_s": None}}}
    monkeypatch.setattr(rounds, "run_child", child)
    main(["train", "--impl", "mtx,mtx@HEAD", "--rounds", "2"])
    assert calls == [("mtx", None), ("mtx", "/checkout/of/HEAD")] * 2
    printed = capsys.readouterr().out
    assert "| mtx / mtx@HEAD | 0.5 | 0.5 | 0.5 | 0.5, 0.5 |" in printed
    assert "no bfloat16 (it cannot run here)" in printed


def test_an_implementation_with_training_settings_is_paired_with_it_without(monkeypatch, capsys):
    """`mtx:rdrop_alpha=5` is a row of its own, its child told the settings, paired with mtx."""
    calls = fake_children(monkeypatch, {"mtx": iter([2000.0, 2200.0]),
                                        "mtx:rdrop_alpha=5": iter([1000.0, 1000.0])})
    main(["train", "--impl", "mtx,mtx:rdrop_alpha=5", "--rounds", "2"])
    assert [c["--impl"] for c in calls] == ["mtx", "mtx:rdrop_alpha=5"] * 2
    assert "| mtx / mtx:rdrop_alpha=5 | 2.1 | 2.0 | 2.2 | 2.0, 2.2 |" in capsys.readouterr().out


@pytest.mark.slow
def test_training_settings_reach_the_measured_step(tmp_path, monkeypatch):
    """`mtx:rdrop_alpha=5` measures steps that run R-Drop."""
    from mtx.training.regularisers import RDrop
    paired = []
    rdrop_active = RDrop.active  # asked once a step
    monkeypatch.setattr(RDrop, "active", lambda self, spent: paired.append(self.alpha)
                        or rdrop_active(self, spent))
    monkeypatch.setenv("MTX_DATA_DIR", str(tmp_path / "cache"))
    out = tmp_path / "train.json"
    main(["train", "--impl", "mtx:rdrop_alpha=5", "--model", "tiny", "--data", "toy",
          "--seconds", "0.3", "--warmup-steps", "1", "--out", str(out)])
    result = json.loads(out.read_text())["train"]["mtx:rdrop_alpha=5"]
    assert result["tok_s"] > 0 and result["precision"] == "float32"
    assert len(paired) == result["steps"] and set(paired) == {5.0}


@pytest.mark.slow
def test_the_default_training_comparison_runs_every_peer_on_the_default_model(
        multi30k_dir, tmp_path, monkeypatch, capsys):
    """`make bench` (mtx-bench train without --impl) on the model users train, a few steps of
    each: every installed peer gets a row (one dropout rate for all, said in the log)."""
    from mtx.bench.__main__ import train_default
    monkeypatch.setenv("MTX_MULTI30K_DIR", str(multi30k_dir))
    out = tmp_path / "train.json"
    main(["train", "--seconds", "0.3", "--warmup-steps", "1", "--rounds", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    expected = set(train_default().split(","))
    if "mtx-bf16" not in report["train"]:  # left out where bfloat16 cannot run
        expected.discard("mtx-bf16")
    assert set(report["train"]) == expected and {"mtx", "gluonnlp", "d2l"} <= expected
    assert all(row["tok_s"] > 0 for row in report["train"].values())
    printed = capsys.readouterr().out
    assert all(f"| {name} |" in printed for name in expected)


@pytest.mark.slow
def test_train_on_the_toy_task(tmp_path, monkeypatch, capsys):
    """`train` of one implementation in this process writes the report it is told to, prints its
    table, and writes nothing else."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MTX_DATA_DIR", str(tmp_path / "cache"))  # toy data needs none
    out = tmp_path / "out" / "train.json"
    main(["train", "--impl", "mtx", "--model", "tiny", "--data", "toy", "--seconds", "0.5",
          "--warmup-steps", "2", "--out", str(out)])
    report = json.loads(out.read_text())
    assert set(report) == {"machine", "model_config", "train"}
    assert report["model_config"]["tie_embeddings"] is False
    assert report["model_config"]["vocab_size"] == 24  # 20 toy symbols + 4 specials
    result = report["train"]["mtx"]
    assert result["tok_s"] > 0 and result["gflop_s"] > 0 and result["gemm_peak_gflop_s"] > 0
    assert result["model_gemm_gflop_s"] > 0  # the model's own products, forward and backward
    assert result["steps"] > 2 and result["precision"] == "float32"
    assert "native_layer_norm" in result["kernels"] and result["peak_rss_mb"] > 0
    printed = capsys.readouterr().out
    assert "| implementation | tok_s |" in printed and "| mtx | " in printed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_profile_train_gives_each_operator_s_share_of_training_steps(tmp_path, monkeypatch,
                                                                     capsys):
    """`profile-train`: MXNet's per-operator totals over mtx's training steps, the longest
    first; the peers are not mtx's to profile."""
    monkeypatch.setenv("MXNET_EXEC_BULK_EXEC_TRAIN", "1")  # put back after: profile-train sets 0
    monkeypatch.setenv("MTX_DATA_DIR", str(tmp_path / "cache"))  # toy data needs none
    out = tmp_path / "train_profile.json"
    main(["profile-train", "--model", "tiny", "--data", "toy", "--steps", "3",
          "--warmup-steps", "1", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["impl"] == "mtx" and report["steps"] == 3 and report["target_tokens"] > 0
    rows = report["operators"]
    assert {"FullyConnected", "_backward_FullyConnected"} <= {row["operator"] for row in rows}
    assert not any(row["operator"].startswith("MXNDArray") for row in rows)  # C API calls
    assert [r["ms"] for r in rows] == sorted((r["ms"] for r in rows), reverse=True)
    assert "mtx: 3 training steps" in capsys.readouterr().out
    assert "profiles mtx's own step" in one_line_error(capsys, ["profile-train", "--impl", "pytorch"])


def test_decode_run_translates_with_beam_5_and_greedily(toy_run, tmp_path, capsys):
    """`decode --run`: mtx translates the run's test split with beam 5 and greedily, scored."""
    out = tmp_path / "decode.json"
    main(["decode", "--run", str(toy_run), "--impl", "mtx", "--max-sentences", "40",
          "--out", str(out)])
    row = json.loads(out.read_text())["decode"]["mtx"]
    assert row["sentences"] == 40 and row["beam5_sacrebleu"] > 80 and row["greedy_sacrebleu"] > 80
    assert row["beam5_sent_s"] > 0 and row["greedy_subwords_s"] > 0
    assert "| mtx | 40 |" in capsys.readouterr().out


def test_profile_gives_each_operator_s_share_of_a_translation(toy_run, tmp_path, capsys,
                                                              monkeypatch):
    """`profile --run`: MXNet's per-operator totals over one translation, the longest first."""
    monkeypatch.setenv("MXNET_EXEC_BULK_EXEC_INFERENCE", "1")  # put back after: profile sets 0
    out = tmp_path / "profile.json"
    main(["profile", "--run", str(toy_run), "--max-sentences", "20", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["sentences"] == 20 and report["beam"] == 5 and report["seconds"] > 0
    names, ms = zip(*[(row["operator"], row["ms"]) for row in report["operators"]])
    assert "FullyConnected" in names and all(row["calls"] > 0 for row in report["operators"])
    assert list(ms) == sorted(ms, reverse=True) and sum(ms) > 0
    printed = capsys.readouterr().out
    assert "| operator | calls | ms | % of operators |" in printed
    assert "| FullyConnected | " in printed


def test_decode_times_runs_against_each_other_in_one_process(toy_run, tmp_path, capsys):
    """`decode --run A,B`: one row per run, translated in interleaved rounds, each with its
    time over the first run's; runs with different test splits are refused in one line."""
    other = tmp_path / "other"
    shutil.copytree(toy_run, other)
    out = tmp_path / "decode.json"
    main(["decode", "--run", f"{toy_run},{other}", "--max-sentences", "20", "--rounds", "2",
          "--out", str(out)])
    rows = json.loads(out.read_text())["decode"]
    assert list(rows) == [f"mtx {toy_run.name}", "mtx other"]
    first, second = rows.values()
    assert first["beam5_time_vs_first"] == first["greedy_time_vs_first"] == 1.0
    assert second["beam5_time_vs_first"] > 0 and second["greedy_seconds"] > 0
    assert first["beam5_sacrebleu"] == second["beam5_sacrebleu"] > 80  # the same weights
    assert "| mtx other | 20 |" in capsys.readouterr().out
    config = OmegaConf.load(other / "config.yaml")
    config.seed += 1
    OmegaConf.save(config, other / "config.yaml")
    assert "has another test split than" in one_line_error(
        capsys, ["decode", "--run", f"{toy_run},{other}", "--max-sentences", "20"])
