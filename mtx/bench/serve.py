"""`mtx-bench serve`: mtx-serve under concurrent load on loopback, against one-at-a-time
translation of the same sentences.

    mtx-bench serve --run RUN [--clients 1,4,16] [--seconds 20] [--beam 5]
                    [--max-sentences 200] [--url http://127.0.0.1:PORT] [--abuse] [--out FILE]

1. One at a time: this process loads the run and translates the test sentences one by one (a
   `Translator` call per sentence, no HTTP) for --seconds.
2. The server (``python -m mtx.commands.serve ckpt=RUN port=0``, started here and stopped with
   SIGTERM at the end, unless --url names one already running): for each N of --clients, N
   clients each post one sentence per request and the next one as soon as the answer is in, for
   --seconds. Every answer is checked (HTTP 200 and one translation); anything else is a failed
   request. The server's /health before and after gives how many model calls (batches) served
   the requests.

3. With --abuse: sixteen ordinary one-sentence requests at once, alone, then just after four of
   the heaviest requests the server's limits allow and two such requests whose clients hang up
   at once (`abuse`), with /health polled throughout.

Each mode reports requests, failed, sentences/s, p50/p99 latency in ms and the ratio of its
throughput to one at a time. Client and server share the machine's cores: the clients are
threads blocked on their sockets most of the time, but they cost some CPU too.
"""
import http.client
import json
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import numpy as onp

from ..errors import ConfigError

log = logging.getLogger("mtx.bench")
START_TIMEOUT = 300  # seconds for the server to load and warm up
WARMUP_REQUESTS = 16  # untimed requests first (graphs of new shapes)


def percentiles(latencies):
    """Latencies (s) -> {p50_ms, p99_ms} (numpy's linear interpolation)."""
    if not latencies:
        return {"p50_ms": None, "p99_ms": None}
    p50, p99 = onp.percentile(onp.array(latencies) * 1000, [50, 99])
    return {"p50_ms": round(float(p50), 1), "p99_ms": round(float(p99), 1)}


def summary(latencies, failed, seconds):
    """One mode's numbers: requests, failed, sentences/s (one sentence per request), latency."""
    return {"requests": len(latencies) + failed, "failed": failed,
            "sent_s": round(len(latencies) / seconds, 2), **percentiles(latencies)}


def one_at_a_time(run_dir, sentences, beam, seconds):
    """Translate ``sentences`` (cycled) one per call in this process for ``seconds``."""
    import mxnet as mx
    from ..devices import use_numpy_interface
    from ..rundir import load_run
    from ..search import Translator
    from .inputs import decode_config
    use_numpy_interface()
    model, tokenizer, _ = load_run(run_dir, mx.cpu())
    model.hybridize(static_alloc=True)
    translator = Translator(model, tokenizer, decode_config(beam), mx.cpu())
    for sentence in sentences[:WARMUP_REQUESTS]:
        translator.translate([sentence])
    latencies, start, i = [], time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        tic = time.perf_counter()
        translator.translate([sentences[i % len(sentences)]])
        latencies.append(time.perf_counter() - tic)
        i += 1
    return summary(latencies, 0, time.perf_counter() - start)


def check_url(url):
    """--url names a running mtx-serve: checked before any measurement."""
    parts = urlparse(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ConfigError(f"--url {url}: give the server's address as http://HOST:PORT")
    try:
        health = Client(url, 1).get("/health")
    except (OSError, http.client.HTTPException, ValueError) as err:
        raise ConfigError(f"--url {url}: no mtx-serve answers there ({err}); start one "
                          f"(mtx-serve ckpt=<run>) or leave --url out to start it here") from None
    if not isinstance(health, dict):
        raise ConfigError(f"--url {url}: /health did not answer as mtx-serve does")


class Client:
    """One keep-alive HTTP connection to the server; `translate` -> (ok, seconds)."""

    def __init__(self, url, beam):
        parts = urlparse(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        self.beam = beam

    def get(self, path):
        self.connection.request("GET", path)
        response = self.connection.getresponse()
        return json.loads(response.read())

    def translate(self, sentence):
        body = json.dumps({"text": [sentence], "beam_size": self.beam})
        tic = time.perf_counter()
        try:
            self.connection.request("POST", "/translate", body,
                                    {"Content-Type": "application/json"})
            response = self.connection.getresponse()
            data = json.loads(response.read())
            ok = response.status == 200 and len(data.get("translations", ())) == 1
        except (OSError, http.client.HTTPException, ValueError) as err:
            log.warning("request failed: %s", err)
            self.connection.close()  # the next request reconnects
            ok = False
        return ok, time.perf_counter() - tic


def under_load(url, sentences, beam, clients, seconds):
    """``clients`` concurrent clients for ``seconds``: their summary and the server's batches."""
    before = Client(url, beam).get("/health")
    results, lock, counter = [], threading.Lock(), iter(range(10 ** 9))
    deadline = time.perf_counter() + seconds

    def client_loop():
        client, mine = Client(url, beam), []
        while time.perf_counter() < deadline:
            with lock:
                i = next(counter)
            mine.append(client.translate(sentences[i % len(sentences)]))
        with lock:
            results.extend(mine)
    start = time.perf_counter()
    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    after = Client(url, beam).get("/health")
    latencies = [dt for ok, dt in results if ok]
    out = summary(latencies, sum(1 for ok, _ in results if not ok), elapsed)
    batches = after["batches"] - before["batches"]
    out["requests_per_batch"] = round((after["jobs"] - before["jobs"]) / max(batches, 1), 2)
    return out


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


ABUSE_HEAVY, ABUSE_HANG_UPS, ABUSE_ORDINARY = 4, 2, 16  # issue #35's mix


def heaviest_request(tokenizer, sentences, info):
    """The heaviest /translate body the server's limits (/info) allow: sentences of at most
    ``max_sentence_subwords`` subwords, at the largest beam, as many as the work limit takes."""
    limits = info["limits"]
    longest, beam = limits["max_sentence_subwords"], limits["max_beam_size"]
    words = " ".join(sentences).split()
    while len(tokenizer.encode([" ".join(words)])[0]) > longest:
        words = words[:max(1, int(len(words) * 0.9))]
    text = " ".join(words)
    work = (len(tokenizer.encode([text])[0]) + 1) * beam
    count = max(1, min(limits["max_sentences"], limits["max_request_work"] // work))
    return {"text": [text] * count, "beam_size": beam}


def post_once(url, body, hang_up=False):
    """One POST /translate on a new connection -> (status, seconds); ``hang_up``: close the
    connection right after sending (the server must drop the work)."""
    parts = urlparse(url)
    tic = time.perf_counter()
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    try:
        connection.request("POST", "/translate", json.dumps(body),
                           {"Content-Type": "application/json"})
        if hang_up:
            return None, time.perf_counter() - tic
        response = connection.getresponse()
        response.read()
        return response.status, time.perf_counter() - tic
    except (OSError, http.client.HTTPException):
        return "error", time.perf_counter() - tic
    finally:
        connection.close()


def in_threads(calls):
    """Run each of ``calls`` (functions of no argument) in its own thread, all at once ->
    their results, in order."""
    results = [None] * len(calls)

    def run(i):
        results[i] = calls[i]()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    return threads, results


def abuse(url, tokenizer, sentences, beam):
    """Sixteen ordinary one-sentence requests alone, then again just after four of the heaviest
    requests the limits allow and two such requests whose clients hang up, with /health polled
    throughout -> {alone, beside_abuse, heavy, health_ms_max}."""
    info = Client(url, beam).get("/info")
    heavy = heaviest_request(tokenizer, sentences, info)
    ordinary = [{"text": [s], "beam_size": beam} for s in sentences[:ABUSE_ORDINARY]]

    def ordinary_round():
        threads, results = in_threads([lambda b=b: post_once(url, b) for b in ordinary])
        for thread in threads:
            thread.join()
        return results
    alone = ordinary_round()
    polling, health_seconds = threading.Event(), []

    def poll_health():
        while not polling.is_set():
            tic = time.perf_counter()
            Client(url, beam).get("/health")
            health_seconds.append(time.perf_counter() - tic)
            time.sleep(0.1)
    poller = threading.Thread(target=poll_health)
    poller.start()
    abusers, heavy_results = in_threads(
        [lambda: post_once(url, heavy)] * ABUSE_HEAVY +
        [lambda: post_once(url, heavy, hang_up=True)] * ABUSE_HANG_UPS)
    time.sleep(0.2)  # the heavy requests are in first
    beside = ordinary_round()
    for thread in abusers:
        thread.join()
    polling.set()
    poller.join()

    def latency(results):
        seconds = [dt for status, dt in results if status == 200]
        return {"answered": len(seconds), "of": len(results), **percentiles(seconds),
                "p95_ms": round(float(onp.percentile(seconds, 95)) * 1000, 1) if seconds else None,
                "max_ms": round(max(seconds) * 1000, 1) if seconds else None}
    return {"heavy_request": {"sentences": len(heavy["text"]), "beam": heavy["beam_size"]},
            "alone": latency(alone), "beside_abuse": latency(beside),
            "heavy": [{"status": status, "seconds": round(dt, 2)} for status, dt in heavy_results],
            "health_ms_max": round(max(health_seconds) * 1000, 1) if health_seconds else None}


def abuse_table(result):
    heavy = ", ".join(f"{h['status']} in {h['seconds']} s" for h in result["heavy"])
    lines = [f"heavy request: {result['heavy_request']['sentences']} sentences at beam "
             f"{result['heavy_request']['beam']}; /health at most {result['health_ms_max']} ms "
             f"throughout; heavy and hung-up requests: {heavy}", "",
             "| 16 ordinary one-sentence requests | answered | p50 ms | p95 ms | p99 ms | max ms |",
             "|---|---|---|---|---|---|"]
    for label, key in (("alone", "alone"), ("just after 4 heavy + 2 hung up", "beside_abuse")):
        r = result[key]
        lines.append(f"| {label} | {r['answered']}/{r['of']} | {r['p50_ms']} | {r['p95_ms']} | "
                     f"{r['p99_ms']} | {r['max_ms']} |")
    return "\n".join(lines)


def measure_serve(args):
    """The whole measurement -> (report, table)."""
    from .inputs import run_seed, test_text
    from .machine import describe
    from ..rundir import RunDir
    clients = [n.strip() for n in args.clients.split(",") if n.strip()]
    if not clients or not all(n.isdigit() and int(n) >= 1 for n in clients):
        raise ConfigError(f"--clients {args.clients}: give client counts such as 1,4,16")
    clients = [int(n) for n in clients]
    if args.url:
        check_url(args.url)
    sentences = test_text(RunDir(args.run).data_config(), args.max_sentences,
                          run_seed(args.run))[0]
    report = {"machine": describe(), "run": str(args.run), "beam": args.beam,
              "seconds": args.seconds, "sentences": len(sentences),
              "one_at_a_time": one_at_a_time(args.run, sentences, args.beam, args.seconds)}
    log.info("one at a time: %s", report["one_at_a_time"])
    server = None if args.url else ServerProcess([f"ckpt={args.run}",
                                                  f"decode.beam_size={args.beam}"])
    url = args.url or server.url
    try:
        warm = Client(url, args.beam)
        for sentence in sentences[:WARMUP_REQUESTS]:
            warm.translate(sentence)
        report["server"] = {}
        for n in clients:
            report["server"][str(n)] = under_load(url, sentences, args.beam, n, args.seconds)
            log.info("%d client(s): %s", n, report["server"][str(n)])
        if args.abuse:
            from ..corpus import load_tokenizer
            report["abuse"] = abuse(url, load_tokenizer(args.run), sentences, args.beam)
            log.info("abuse: %s", report["abuse"])
    finally:
        if server is not None:
            report["server_exit_code"] = server.stop()
    text = table(report)
    if "abuse" in report:
        text += "\n\n" + abuse_table(report["abuse"]) + (
            f"\n\nserver exit code after SIGTERM: {report.get('server_exit_code')}")
    return report, text


def table(report):
    base = report["one_at_a_time"]["sent_s"]
    rows = [("one at a time (in process, no HTTP)", "1", report["one_at_a_time"])]
    rows += [("mtx-serve", n, r) for n, r in report["server"].items()]
    lines = [f"beam {report['beam']}, {report['seconds']} s per row, one sentence per request",
             "", "| mode | clients | requests | failed | sent/s | p50 ms | p99 ms | x one at a "
             "time | requests per batch |", "|---|---|---|---|---|---|---|---|---|"]
    for mode, n, r in rows:
        ratio = f"{r['sent_s'] / base:.2f}" if base else "-"
        lines.append(f"| {mode} | {n} | {r['requests']} | {r['failed']} | {r['sent_s']} | "
                     f"{r['p50_ms']} | {r['p99_ms']} | {ratio} | "
                     f"{r.get('requests_per_batch', '-')} |")
    return "\n".join(lines)
