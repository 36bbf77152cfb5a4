"""`mtx-bench serve`, short: the toy run's server under 1 and 4 concurrent clients and the
one-at-a-time baseline, every request answered, the server stopped cleanly. No speed is asserted
(the numbers of docs/serving.md come from a long run on an idle machine)."""
import json
import re
import socket
from types import SimpleNamespace

import pytest

import fastapi  # noqa: E402,F401  the serve extra, which make install installs: missing, these fail
from conftest import run_command  # noqa: E402

from mtx.bench.serve import measure_serve, percentiles  # noqa: E402
from mtx.errors import ConfigError  # noqa: E402


def test_percentiles_of_known_latencies():
    assert percentiles([0.001 * i for i in range(1, 101)]) == {"p50_ms": 50.5, "p99_ms": 99.0}
    assert percentiles([]) == {"p50_ms": None, "p99_ms": None}


def test_a_short_load_run_has_no_failed_request(toy_run, tmp_path):
    out = tmp_path / "serve.json"
    done = run_command("bench", "serve", "--run", str(toy_run), "--clients", "1,4",
                       "--seconds", "1.5", "--beam", "2", "--max-sentences", "16",
                       "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(out.read_text())
    rows = [report["one_at_a_time"], *report["server"].values()]
    assert list(report["server"]) == ["1", "4"]
    for row in rows:
        assert row["failed"] == 0 and row["requests"] > 0 and row["sent_s"] > 0
        assert row["p50_ms"] <= row["p99_ms"]
    assert report["server"]["4"]["requests_per_batch"] >= 1
    assert report["server_exit_code"] == 0
    table = done.stdout.decode()
    assert "| mtx-serve | 4 |" in table and "one at a time" in table


@pytest.mark.parametrize("clients, url, words", [
    ("1-16", None, "--clients 1-16: give client counts such as 1,4,16"),
    ("1,0", None, "--clients 1,0: give client counts"),
    ("1", "localhost:8000", "--url localhost:8000: give the server's address as http://HOST:PORT"),
    ("1", "http://127.0.0.1:{port}", "no mtx-serve answers there")])
def test_bad_clients_or_url_are_refused_before_any_measurement(clients, url, words, tmp_path):
    with socket.socket() as free:  # a port nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    url = url and url.format(port=port)
    args = SimpleNamespace(clients=clients, url=url, run=tmp_path / "no_run", max_sentences=None,
                           beam=1, seconds=1.0)
    with pytest.raises(ConfigError, match=re.escape(words.format(port=port))):
        measure_serve(args)
