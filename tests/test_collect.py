"""scripts/collect.py: the sweep table, minutes to reach a val BLEU, the curves picture."""
import importlib.util
import json

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def collect():
    spec = importlib.util.spec_from_file_location("collect", ROOT / "scripts" / "collect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(folder, name, curve, updates_per_epoch=100):
    run = folder / name
    run.mkdir(parents=True)
    scores = {"sacrebleu": {"score": 30.0}, "bleu_tok_lc": {"score": 31.0},
              "sentences_per_second": 50.0, "beam_size": 1}
    (run / "report.json").write_text(json.dumps({
        "parameters": 1000, "train_minutes": curve[-1][0], "epochs": len(curve), "steps": 100,
        "final": {"valid_bleu": {"score": curve[-1][1]}, "valid_loss": 5.0 - curve[-1][1] / 10},
        "scores": {"test_2016_flickr": scores}}))
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"wall_minutes": m, "valid/bleu": b, "valid/loss": 5.0 - b / 10,
                    "train/tok_s": 1000.0, "step": updates_per_epoch * (i + 1)}) + "\n"
        for i, (m, b) in enumerate(curve)))


def test_minutes_to_reach_interpolates_between_epochs(collect):
    curve = [(5.0, 10.0), (10.0, 20.0), (15.0, 24.0)]
    assert collect.minutes_to_reach(curve, 15.0) == 7.5
    assert collect.minutes_to_reach(curve, 20.0) == 10.0
    assert collect.minutes_to_reach(curve, 5.0) == 2.5  # from (0 minutes, 0 BLEU)
    assert collect.minutes_to_reach(curve, 30.0) is None


def test_value_at_interpolates_and_stops_at_the_end(collect):
    curve = [(251, 10.0), (502, 20.0)]
    assert collect.value_at(curve, 376.5) == 15.0
    assert collect.value_at(curve, 502) == 20.0
    assert collect.value_at(curve, 125.5) == 5.0  # from (0 updates, 0 BLEU)
    assert collect.value_at(curve, 503) is None


def test_table_with_reach_and_curves(collect, tmp_path, capsys):
    _run(tmp_path, "fast", [(5.0, 20.0), (10.0, 30.0)])
    _run(tmp_path, "slow", [(5.0, 10.0), (10.0, 20.0)])
    collect.main([str(tmp_path), "--reach", "25", "--curves", str(tmp_path / "curves.png")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| minutes_to_25 |")
    assert lines[2].startswith("| fast |") and lines[2].endswith("| 7.5 |")
    assert lines[3].startswith("| slow |") and lines[3].endswith("| - |")
    assert (tmp_path / "curves.png").stat().st_size > 1000
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert [r["minutes_to_25"] for r in rows] == [7.5, None]


def _table(markdown_lines):
    """[{column: cell}] of a markdown table's lines."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in markdown_lines]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def test_runs_that_differ_only_in_seed_get_a_mean_row(collect, tmp_path, capsys):
    _run(tmp_path, "model.num_heads=1,seed=1", [(5.0, 20.0)])
    _run(tmp_path, "model.num_heads=1,seed=2", [(5.0, 24.0)], updates_per_epoch=150)
    _run(tmp_path, "model.num_heads=4,seed=1", [(5.0, 30.0)])
    collect.main([str(tmp_path), "--at-update", "100"])
    out = capsys.readouterr().out
    means = _table([line for line in out.split("Mean over seeds")[1].splitlines()
                    if line.startswith("|")])
    one, four = means
    assert one["setting"] == "model.num_heads=1" and one["seeds"] == "2"
    assert one["valid_bleu"] == "22 (20, 24)" and one["test_sacrebleu"] == "30 (30, 30)"
    assert one["val_bleu_at_update_100"] == "18 (20, 16)"  # 24 * 100/150 for seed 2
    assert four["setting"] == "model.num_heads=4" and four["valid_bleu"] == "30 (30)"
    assert "parameters" not in one  # the same for every seed: not averaged
    assert collect.without_seed("seed=3") == "(default)"


def test_two_sweeps_of_one_command_stay_apart(collect, tmp_path, capsys):
    """Below a folder of sweeps (outputs/train/multiruns/<time>/<overrides>) a run is named by
    its sweep too: the same overrides in two sweeps are two rows, never one setting's seeds."""
    for sweep, bleu in (("2026-11-30_10-00-00", 20.0), ("2026-11-30_12-00-00", 24.0)):
        _run(tmp_path / sweep, "model.num_heads=4,seed=1", [(5.0, bleu)])
    collect.main([str(tmp_path)])
    out = capsys.readouterr().out
    rows = _table([line for line in out.splitlines() if line.startswith("|")])
    assert [r["run"] for r in rows] == ["2026-11-30_10-00-00/model.num_heads=4,seed=1",
                                        "2026-11-30_12-00-00/model.num_heads=4,seed=1"]
    assert "Mean over seeds" not in out
    assert collect.without_seed("t/model.num_heads=4,seed=2") == "t/model.num_heads=4"


def test_no_mean_table_without_repeated_settings(collect, tmp_path, capsys):
    _run(tmp_path, "a", [(5.0, 20.0)])
    _run(tmp_path, "b", [(5.0, 24.0)])
    collect.main([str(tmp_path)])
    assert "Mean over seeds" not in capsys.readouterr().out


def test_val_bleu_at_equal_updates(collect, tmp_path, capsys):
    _run(tmp_path, "small_batches", [(5.0, 10.0), (10.0, 20.0)], updates_per_epoch=200)
    _run(tmp_path, "large_batches", [(5.0, 20.0), (10.0, 30.0)], updates_per_epoch=100)
    collect.main([str(tmp_path), "--at-update", "200"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| val_bleu_at_update_200 |")
    assert lines[2].startswith("| large_batches |") and lines[2].endswith("| 30.0 |")
    assert lines[3].startswith("| small_batches |") and lines[3].endswith("| 10.0 |")


def test_val_bleu_and_loss_at_equal_minutes(collect, tmp_path, capsys):
    """--at-minutes: both interpolated between epochs; no loss before the first epoch (BLEU
    starts from 0), and neither past a run's end."""
    _run(tmp_path, "fast", [(4.0, 20.0), (8.0, 30.0)])
    _run(tmp_path, "short", [(6.0, 10.0)])
    collect.main([str(tmp_path), "--at-minutes", "6"])
    rows = _table([line for line in capsys.readouterr().out.splitlines()
                   if line.startswith("|")])
    assert [(r["run"], r["val_bleu_at_6_min"], r["val_loss_at_6_min"]) for r in rows] == [
        ("fast", "25.0", "2.5"), ("short", "10.0", "4.0")]
    assert collect.value_at([(4.0, 3.0), (8.0, 2.0)], 2.0, origin=None, digits=3) is None
    assert collect.value_at([(4.0, 3.0)], 9.0, origin=None) is None


def test_a_run_without_metrics_or_test_scores_gets_dashes(collect, tmp_path, capsys):
    _run(tmp_path, "complete", [(5.0, 20.0)])
    _run(tmp_path, "no_test", [(5.0, 24.0)])
    report = json.loads((tmp_path / "no_test" / "report.json").read_text())
    (tmp_path / "no_test" / "report.json").write_text(json.dumps({**report, "scores": {}}))
    (tmp_path / "no_test" / "metrics.jsonl").unlink()
    collect.main([str(tmp_path)])
    rows = {line.split(" | ")[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["| complete"].endswith("| 1000 | 20.0 | 3.0 | 30.0 | 31.0 | 50.0 | 1 |")
    assert rows["| no_test"].endswith("| - | 24.0 | 2.6 | - | - | - | - |")


@pytest.mark.parametrize("report, problem", [("{not json", "is damaged"),
                                              ('{"final": {}}', "is not a training report")])
def test_a_damaged_report_or_an_empty_folder_is_one_line(collect, tmp_path, report, problem):
    with pytest.raises(collect.DataError, match="no report.json below"):
        collect.main([str(tmp_path)])
    _run(tmp_path, "run", [(5.0, 20.0)])
    (tmp_path / "run" / "report.json").write_text(report)
    with pytest.raises(collect.DataError, match=problem):
        collect.main([str(tmp_path)])
