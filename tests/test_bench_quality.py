"""mtx-bench quality's plumbing: mtx and the peer toolkits (OpenNMT-py, Sockeye, each in its own
virtual environment) train for a minute on one small corpus made from Multi30k, translate its
test split, and one sacreBLEU call scores them all. Where a peer cannot be installed (no
package index), the test is skipped with the bench's own line saying so."""
import gzip
import json
import os

import pytest

from conftest import ROOT, run_command

pytestmark = pytest.mark.slow
LINES = {"tr": 2000, "va": 100, "te": 40}


def small_corpus(multi30k_dir, folder):
    """<folder>/{tr,va,te}.{en,de}: the first lines of Multi30k's training split."""
    with gzip.open(multi30k_dir / "train.en.gz", "rt") as en, \
            gzip.open(multi30k_dir / "train.de.gz", "rt") as de:
        pairs = [next(zip(en, de)) for _ in range(sum(LINES.values()))]
    start = 0
    for prefix, count in LINES.items():
        for side, lang in enumerate(("en", "de")):
            (folder / f"{prefix}.{lang}").write_text("".join(p[side] for p in
                                                             pairs[start:start + count]))
        start += count


def test_every_toolkit_trains_translates_and_is_scored_alike(multi30k_dir, tmp_path):
    small_corpus(multi30k_dir, tmp_path)
    overrides = (f"data.src_lang=en data.tgt_lang=de data.train={tmp_path}/tr "
                 f"data.valid={tmp_path}/va data.test=[{tmp_path}/te] data.vocab_size=500")
    peers = os.environ.get("MTX_PEERS_DIR") or str(ROOT / "data" / "peers")
    done = run_command("bench", "quality", "--impl", "mtx,opennmt,sockeye", "--model", "tiny",
                       "--data", "files", "--data-overrides", overrides, "--minutes", "1",
                       "--work", str(tmp_path / "work"), "--out", str(tmp_path / "report.json"),
                       cwd=tmp_path, env={"MTX_DATA_DIR": str(tmp_path / "data"),
                                          "MTX_PEERS_DIR": peers}, timeout=3600)
    err = done.stderr.decode()
    if done.returncode == 2 and "cannot install" in err:
        pytest.skip(err.strip().splitlines()[-1])
    assert done.returncode == 0, err[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    rows = report["results"]
    assert list(rows) == ["mtx", "opennmt", "sockeye"]
    signatures = {row["scores"]["sacrebleu"]["signature"] for row in rows.values()}
    assert len(signatures) == 1 and "tok:13a" in signatures.pop()
    for name, row in rows.items():
        assert row["updates"] > 0 and row["parameters"] > 0, (name, row)
        assert 0 <= row["scores"]["chrf"]["score"] <= 100
        assert row["decode"]["seconds"] > 0 and row["decode"]["peak_rss_mb"] > 0
        assert len(row["commands"]) == 2
    # the peers were stopped by the budget (OpenNMT) or stopped themselves (Sockeye), each
    # with the size asked: mtx's tiny model has 1+1 layers of width 32
    assert rows["opennmt"]["train"]["stopped"]
    config = json.loads((tmp_path / "work" / "opennmt-seed1" / "config.json").read_text())
    assert (config["enc_layers"], config["hidden_size"], config["heads"]) == (1, 32, 4)
    hypotheses = (tmp_path / "work" / "sockeye-seed1" / "test.hyp.pieces").read_text()
    assert len(hypotheses.splitlines()) == LINES["te"]
    assert "| mtx |" in done.stdout.decode() and "| sockeye |" in done.stdout.decode()


def test_an_unknown_toolkit_is_one_line(tmp_path):
    done = run_command("bench", "quality", "--impl", "marian", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.decode().strip() == ("error: --impl marian: choose from mtx, opennmt, "
                                            "sockeye"), done.stderr.decode()
