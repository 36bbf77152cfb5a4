"""`mtx-bench serve`: mtx-serve under concurrent clients on loopback, against one-at-a-time
translation of the same test sentences in this process (a `Translator` call each, no HTTP).

The server (``python -m mtx.commands.serve ckpt=RUN port=0``, stopped with SIGTERM at the end)
gets, for each N of --clients, N keep-alive clients that each post one sentence a request, the
next as soon as the answer is in, for --seconds; anything but HTTP 200 with one translation is a
failed request; /health before and after gives the requests per model call. --abuse: sixteen
ordinary requests alone, then just after four of the heaviest requests the limits allow and two
whose clients hang up at once, /health polled throughout. Clients and server share the cores.
"""
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import numpy as onp

from ..errors import ConfigError

START_TIMEOUT = 300   # seconds for the server to load and warm up
WARMUP_REQUESTS = 16  # untimed requests first (graphs of new shapes)
HEAVY, HANG_UPS, ORDINARY = 4, 2, 16  # --abuse


def percentiles(latencies, points=(50, 99)):
    """Latencies (s) -> {p50_ms, p99_ms} (numpy's linear interpolation; None without any)."""
    values = onp.percentile(onp.array(latencies) * 1000, points) if latencies else points
    return {f"p{p}_ms": round(float(v), 1) if latencies else None for p, v in zip(points, values)}


def request(url, path, body=None, hang_up=False, connection=None):
    """GET ``path`` (no ``body``) or POST it -> (status, answer or None, seconds); status None
    after ``hang_up``, "error" when the connection failed. On ``connection`` (kept) or a new one."""
    parts, tic = urlparse(url), time.perf_counter()
    own = connection is None
    connection = connection or http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    try:
        connection.request("POST" if body else "GET", path, body and json.dumps(body),
                           {"Content-Type": "application/json"})
        if hang_up:
            return None, None, time.perf_counter() - tic
        response = connection.getresponse()
        return response.status, json.loads(response.read()), time.perf_counter() - tic
    except (OSError, http.client.HTTPException, ValueError):
        connection.close()  # a kept connection reconnects for the next request
        return "error", None, time.perf_counter() - tic
    finally:
        if own:
            connection.close()


def joined(calls):
    """Each of ``calls`` in a thread of its own, all at once -> their results, once all ended."""
    results = [None] * len(calls)
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, calls[i]()))
               for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def row(answers, seconds):
    """[(status, answer, seconds)] of one-sentence requests -> a table row's numbers."""
    latencies = [dt for status, answer, dt in answers
                 if status == 200 and len(answer.get("translations", ())) == 1]
    return {"requests": len(answers), "failed": len(answers) - len(latencies),
            "sent_s": round(len(latencies) / seconds, 2), **percentiles(latencies)}


def under_load(url, sentences, beam, clients, seconds):
    """``clients`` concurrent keep-alive clients for ``seconds`` -> their row."""
    before, counter = request(url, "/health")[1], iter(range(10 ** 9))  # sentences in turn
    deadline = time.time() + seconds

    def client():
        parts, answers = urlparse(url), []
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        while time.time() < deadline:
            body = {"text": [sentences[next(counter) % len(sentences)]], "beam_size": beam}
            answers.append(request(url, "/translate", body, connection=connection))
        return answers
    start = time.perf_counter()
    result = row(sum(joined([client] * clients), []), time.perf_counter() - start)
    after = request(url, "/health")[1]
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


def heaviest_request(tokenizer, sentences, limits):
    """The heaviest body the server's limits (/info) allow: its longest allowed sentence, as often
    as the work limit takes, at the largest beam."""
    words, beam = " ".join(sentences).split(), limits["max_beam_size"]
    while len(tokenizer.encode([" ".join(words)])[0]) > limits["max_sentence_subwords"]:
        words = words[:max(1, int(len(words) * 0.9))]
    work = (len(tokenizer.encode([" ".join(words)])[0]) + 1) * beam
    count = max(1, min(limits["max_sentences"], limits["max_request_work"] // work))
    return {"text": [" ".join(words)] * count, "beam_size": beam}


def abuse(url, tokenizer, sentences, beam):
    """ORDINARY one-sentence requests alone, then just after HEAVY of the heaviest requests and
    HANG_UPS whose clients hang up, /health polled throughout."""
    heavy = heaviest_request(tokenizer, sentences, request(url, "/info")[1]["limits"])
    ordinary = [lambda s=s: request(url, "/translate", {"text": [s], "beam_size": beam})
                for s in sentences[:ORDINARY]]
    alone, done, health = joined(ordinary), threading.Event(), []

    def poll_health():
        while not done.is_set():
            health.append(request(url, "/health")[2])
            time.sleep(0.1)

    def beside():
        time.sleep(0.2)  # the heavy requests are in first
        return joined(ordinary)
    poller = threading.Thread(target=poll_health)
    poller.start()
    *heavy_answers, beside_heavy = joined(
        [lambda: request(url, "/translate", heavy)] * HEAVY +
        [lambda: request(url, "/translate", heavy, hang_up=True)] * HANG_UPS + [beside])
    done.set()
    poller.join()

    def latency(answers):
        seconds = [dt for status, _, dt in answers if status == 200]
        return {"answered": f"{len(seconds)}/{len(answers)}",
                **percentiles(seconds, (50, 95, 99, 100))}
    return {"heavy_request": f"{len(heavy['text'])} sentences at beam {heavy['beam_size']}",
            "alone": latency(alone), "beside_abuse": latency(beside_heavy),
            "heavy": [f"{status} in {dt:.2f} s" for status, _, dt in heavy_answers],
            "health_ms_max": round(max(health, default=0) * 1000, 1)}


def one_at_a_time(run_dir, sentences, beam, seconds):
    """``sentences`` (cycled) translated one per call in this process for ``seconds``: a row."""
    import mxnet as mx
    from ..devices import use_numpy_interface
    from ..search import Translator
    from .decoding import load_for_decoding
    from .inputs import decode_config
    use_numpy_interface()
    translator = Translator(*load_for_decoding(run_dir), decode_config(beam), mx.cpu())
    for sentence in sentences[:WARMUP_REQUESTS]:  # one at a time: the shapes measured below
        translator.translate([sentence])
    answers, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds:
        tic = time.perf_counter()
        out = translator.translate([sentences[len(answers) % len(sentences)]])
        answers.append((200, {"translations": out}, time.perf_counter() - tic))
    return row(answers, time.perf_counter() - start)


def measure_serve(args):
    """The whole measurement -> (report, tables)."""
    from ..corpus import load_tokenizer
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
        for sentence in sentences[:WARMUP_REQUESTS]:
            request(server.url, "/translate", {"text": [sentence], "beam_size": args.beam})
        report["server"] = {n: under_load(server.url, sentences, args.beam, int(n), args.seconds)
                            for n in clients}
        if args.abuse:
            report["abuse"] = abuse(server.url, load_tokenizer(args.run), sentences, args.beam)
    finally:
        report["server_exit_code"] = server.stop()
    base = report["one_at_a_time"]["sent_s"]
    rows = [[mode, n, *(r.get(k, "-") for k in ("requests", "failed", "sent_s", "p50_ms",
                                                "p99_ms")), f"{r['sent_s'] / base:.2f}",
             r.get("requests_per_batch", "-")] for mode, n, r in
            [("one at a time (in process, no HTTP)", 1, report["one_at_a_time"])]
            + [("mtx-serve", n, r) for n, r in report["server"].items()]]
    text = f"beam {args.beam}, {args.seconds} s per row, one sentence per request\n\n" + table(
        ["mode", "clients", "requests", "failed", "sent/s", "p50 ms", "p99 ms",
         "x one at a time", "requests per batch"], rows)
    if args.abuse:
        a = report["abuse"]
        text += (f"\n\nheavy request: {a['heavy_request']}; /health at most {a['health_ms_max']}"
                 f" ms; heavy and hung-up requests: {', '.join(a['heavy'])}\n\n" + table(
                     [f"{ORDINARY} ordinary one-sentence requests", "answered", "p50 ms",
                      "p95 ms", "p99 ms", "max ms"], [[label, *a[key].values()] for label, key in
                     [("alone", "alone"), (f"just after {HEAVY} heavy + {HANG_UPS} hung up",
                                           "beside_abuse")]])
                 + f"\n\nserver exit code after SIGTERM: {report['server_exit_code']}")
    return report, text
