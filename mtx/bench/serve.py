"""`mtx-bench serve`: mtx-serve under concurrent clients on loopback, against one-at-a-time
translation of the same test sentences in this process (a `Translator` call each, no HTTP).

The server (``python -m mtx.commands.serve ckpt=RUN port=0``, stopped with SIGTERM at the end)
gets, for each N of --clients, N keep-alive clients that each post one sentence a request, the
next as soon as the answer is in, for --seconds; anything but HTTP 200 with one translation is a
failed request; /health before and after gives the requests per model call. Clients and server
share the cores.
"""
import http.client
import itertools
import json
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import numpy as onp

from ..errors import ConfigError

START_TIMEOUT = 300   # seconds for the server to load and warm up
WARMUP_REQUESTS = 16  # untimed requests first (graphs of new shapes)


def request(connection, path, body=None):
    """GET ``path`` (no ``body``) or POST ``body`` as JSON on ``connection`` -> (status, answer,
    seconds); status "error" when the connection failed (it reconnects on the next request)."""
    tic = time.perf_counter()
    try:
        connection.request("POST" if body else "GET", path, body and json.dumps(body),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read()), time.perf_counter() - tic
    except (OSError, http.client.HTTPException, ValueError):
        connection.close()
        return "error", None, time.perf_counter() - tic


def connect(url):
    parts = urlparse(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)


def health(url):
    """The server's /health counters (on a connection of their own, closed when dropped)."""
    return request(connect(url), "/health")[1]


def row(answers, seconds):
    """[(status, answer, seconds)] of one-sentence requests -> a table row's numbers."""
    latencies = [dt for status, answer, dt in answers
                 if status == 200 and len(answer.get("translations", ())) == 1]

    def ms(point):  # a latency percentile (numpy's linear interpolation), None without any
        return round(1000 * float(onp.percentile(latencies, point)), 1) if latencies else None
    return {"requests": len(answers), "failed": len(answers) - len(latencies),
            "sent_s": round(len(latencies) / seconds, 2), "p50_ms": ms(50), "p99_ms": ms(99)}


def under_load(url, sentences, beam, clients, seconds):
    """``clients`` concurrent keep-alive clients for ``seconds`` -> their row."""
    before, turns, deadline = health(url), itertools.count(), time.time() + seconds

    def client(_):
        connection, answers = connect(url), []
        while time.time() < deadline:
            body = {"text": [sentences[next(turns) % len(sentences)]], "beam_size": beam}
            answers.append(request(connection, "/translate", body))
        connection.close()
        return answers
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = sum(pool.map(client, range(clients)), [])
    result, after = row(answers, time.perf_counter() - start), health(url)
    return {**result, "requests_per_batch": round((after["jobs"] - before["jobs"]) / max(
        after["batches"] - before["batches"], 1), 2)}


class ServerProcess:
    """A server process (``argv``, by default ``python -m mtx.commands.serve``), its URL read
    from its log ('serving on http://...'); `stop` sends SIGTERM and returns the exit code."""

    def __init__(self, overrides, argv=(sys.executable, "-m", "mtx.commands.serve"), env=None):
        self.process = subprocess.Popen(
            [*argv, "port=0", *overrides], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, env=env)
        self.log, self.url = [], None
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT
        while self.url is None and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.url is None:
            self.stop()
            raise ConfigError(f"mtx-serve did not start: {' | '.join(self.log[-3:])}")

    def _read_log(self):
        for line in self.process.stderr:
            self.log.append(line.rstrip())
            found = re.search(r"serving on (http://\S+)", line)
            if found:
                self.url = found.group(1)

    def stop(self, timeout=60, sig=signal.SIGTERM):
        """Send ``sig`` and wait for the exit (kill after ``timeout`` s): the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout)  # the whole log is read
        return self.process.returncode


def one_at_a_time(run_dir, sentences, beam, seconds):
    """``sentences`` (cycled) translated one per call in this process for ``seconds``: a row."""
    import mxnet as mx
    from ..hardware.devices import use_numpy_interface
    from ..decoding.search import Translator, load_decoder
    from .inputs import decode_config
    use_numpy_interface()
    model, tokenizer, _ = load_decoder(run_dir, mx.cpu())
    translator = Translator(model, tokenizer, decode_config(beam), mx.cpu())
    for sentence in sentences[:WARMUP_REQUESTS]:  # one at a time: the shapes measured below
        translator.translate([sentence])
    answers, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        tic = time.perf_counter()
        out = translator.translate([sentences[len(answers) % len(sentences)]])
        answers.append((200, {"translations": out}, time.perf_counter() - tic))
    return row(answers, time.perf_counter() - start)


def measure_serve(args):
    """The whole measurement -> (report, table)."""
    from .inputs import run_test_split
    from .measure import describe
    from .tables import table
    clients = [n.strip() for n in args.clients.split(",")]
    if not all(n.isdigit() and int(n) >= 1 for n in clients):
        raise ConfigError(f"--clients {args.clients}: give client counts such as 1,4,16")
    sentences = run_test_split(args.run, args.max_sentences)[0]
    report = {"machine": describe(), "run": str(args.run), "beam": args.beam,
              "seconds": args.seconds, "sentences": len(sentences),
              "one_at_a_time": one_at_a_time(args.run, sentences, args.beam, args.seconds)}
    server = ServerProcess([f"ckpt={args.run}", f"decode.beam_size={args.beam}"])
    try:
        warm_up = connect(server.url)
        for sentence in sentences[:WARMUP_REQUESTS]:
            request(warm_up, "/translate", {"text": [sentence], "beam_size": args.beam})
        warm_up.close()
        report["server"] = {n: under_load(server.url, sentences, args.beam, int(n), args.seconds)
                            for n in clients}
    finally:
        report["server_exit_code"] = server.stop()
    base = report["one_at_a_time"]["sent_s"]
    rows = [[mode, n, *(r[k] for k in ("requests", "failed", "sent_s", "p50_ms", "p99_ms")),
             f"{r['sent_s'] / base:.2f}", r.get("requests_per_batch", "-")] for mode, n, r in
            [("one at a time (in process, no HTTP)", 1, report["one_at_a_time"])]
            + [("mtx-serve", n, r) for n, r in report["server"].items()]]
    return report, (f"beam {args.beam}, {args.seconds} s per row, one sentence per request\n\n"
                    + table(["mode", "clients", "requests", "failed", "sent/s", "p50 ms",
                             "p99 ms", "x one at a time", "requests per batch"], rows))
