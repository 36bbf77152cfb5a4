"""`mtx-bench serve`, short: the toy run's server under 1 and 4 concurrent clients beside the
one-at-a-time baseline; the server stopped cleanly. No speed is asserted (the numbers of
docs/serving.md come from long runs on an idle machine)."""
import json

import fastapi  # noqa: F401  the serve extra, which make install installs: missing, these fail
from conftest import run_command


def test_a_short_load_run_has_no_failed_request(toy_run, tmp_path):
    out = tmp_path / "serve.json"
    done = run_command("bench", "serve", "--run", str(toy_run), "--clients", "1,4",
                       "--seconds", "1.5", "--beam", "2", "--max-sentences", "16",
                       "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(out.read_text())
    assert list(report["server"]) == ["1", "4"]
    for row in [report["one_at_a_time"], *report["server"].values()]:
        assert row["failed"] == 0 and row["requests"] > 0 and row["sent_s"] > 0
        assert row["p50_ms"] <= row["p99_ms"]
    assert report["server"]["4"]["requests_per_batch"] >= 1
    assert report["server_exit_code"] == 0
    table = done.stdout.decode()
    assert "| mtx-serve | 4 |" in table and "| one at a time (in process, no HTTP) | 1 |" in table
