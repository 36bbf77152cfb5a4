"""mtx-serve against clients that hold connections and queue space, over real sockets (the
installed command on a free loopback port, serving the toy run): idle and trickling clients in
numbers above the connection limit, slow bodies above the request limit, clients that post and
hang up at once, a burst of ordinary clients, a model thread that dies, and an open bind without
a token."""
import json
import os
import subprocess
import threading
import time

import pytest

import fastapi  # noqa: F401  the serve extra, which make install installs
from servers import (MTX_SERVE, TOY_DECODE, closed_by_server, connect, get, post,  # noqa: E402
                     start_server, until)

LIMIT = 8           # limits.max_connections of the server below
HEAD_SECONDS = 3    # limits.head_seconds
SENTENCE = {"text": ["w1 w2 w3"], "beam_size": 1, "length_penalty": 1.0}


@pytest.fixture(scope="module")
def small(toy_run):
    process = start_server(toy_run, f"limits.max_connections={LIMIT}",
                           f"limits.head_seconds={HEAD_SECONDS}", "limits.body_seconds=4",
                           "limits.keepalive_seconds=2")
    yield process
    assert process.stop() == 0, process.log[-5:]


def _timed(function, *args):
    start = time.monotonic()
    result = function(*args)
    return result, time.monotonic() - start


def test_idle_and_trickling_clients_beyond_the_limit_neither_lock_out_others_nor_stay(small):
    idle = [connect(small.url) for _ in range(3 * LIMIT)]  # send nothing at all
    trickling = [connect(small.url) for _ in range(LIMIT)]
    stop = threading.Event()

    def trickle():  # a header byte every half second: each byte would restart a keep-alive timer
        for step in range(1000):
            for sock in trickling:
                try:
                    sock.sendall(b"GET /health HTTP/1.1\r\nX-Slow: "[step:step + 1] or b"a")
                except OSError:
                    pass
            if stop.wait(0.5):
                return
    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)
        (status, health, _), seconds = _timed(get, small.url, "/health")
        assert status == 200 and health["status"] == "ok" and seconds < 5
        (status, out, _), seconds = _timed(post, small.url, "/translate", SENTENCE)
        assert status == 200 and out["translations"] == ["w3 w2 w1"] and seconds < 5
        # every idle and trickling connection is closed by the server (room for newcomers, or
        # its head deadline), well within a minute
        for sock in idle + trickling:
            assert closed_by_server(sock, HEAD_SECONDS + 10)
    finally:
        stop.set()
        thread.join(10)
        for sock in idle + trickling:
            sock.close()


def test_requests_beyond_the_limit_get_json_503_with_retry_after_and_probes_stay_answered(small):
    slow = []
    try:
        for i in range(LIMIT):  # in requests: headers in, their bodies never come; each from
            sock = connect(small.url, source=f"127.0.1.{i + 1}")  # its own client (its share)
            sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{")
            slow.append(sock)
        time.sleep(0.5)
        status, data, raw = post(small.url, "/translate", SENTENCE)
        assert status == 503 and "limits.max_connections" in data["error"], raw[:200]
        assert get(small.url, "/health")[0] == 200 and get(small.url, "/ready")[0] == 200
        for sock in slow:  # each gets its 408 when limits.body_seconds runs out
            assert closed_by_server(sock, 15)
        assert post(small.url, "/translate", SENTENCE)[0] == 200
    finally:
        for sock in slow:
            sock.close()


def test_one_client_holds_at_most_its_share_of_the_requests_at_once(small):
    """limits.client_share (half) of limits.max_connections: a client's slow bodies hold no
    more, and another client is still served."""
    slow = []
    try:
        for _ in range(LIMIT // 2):
            sock = connect(small.url, source="127.0.2.1")
            sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{")
            slow.append(sock)
        time.sleep(0.5)
        status, data, _ = post(small.url, "/translate", SENTENCE, source="127.0.2.1")
        assert status == 503 and "limits.client_share" in data["error"]
        assert post(small.url, "/translate", SENTENCE, source="127.0.2.2")[0] == 200
    finally:
        for sock in slow:
            sock.close()
    assert until(lambda: post(small.url, "/translate", SENTENCE, source="127.0.2.1")[0] == 200,
                 within=10)


def test_the_refusal_carries_retry_after(small):
    slow = [connect(small.url) for _ in range(LIMIT)]
    try:
        for sock in slow:
            sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.5)
        sock = connect(small.url)
        body = json.dumps(SENTENCE).encode()
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        answer = sock.recv(65536).lower()
        sock.close()
        assert answer.startswith(b"http/1.1 503") and b"retry-after:" in answer
        assert b"application/json" in answer and b"x-content-type-options: nosniff" in answer
    finally:
        for sock in slow:
            sock.close()


def test_clients_that_post_and_hang_up_leave_no_work_in_the_queue(small):
    heavy = json.dumps({"text": [" ".join(f"w{k % 20}" for k in range(40))] * 8,
                        "beam_size": 8}).encode()
    for _ in range(40):
        sock = connect(small.url)
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(heavy), heavy))
        sock.close()  # gone before the answer
    deadline = time.monotonic() + 20
    health = get(small.url, "/health")[1]
    while (health["queued"] or health["running"]) and time.monotonic() < deadline:
        time.sleep(0.1)
        health = get(small.url, "/health")[1]
    assert health["queued"] == 0  # (that an abandoned job leaves at once: test_serve_batcher)
    (status, _, _), seconds = _timed(post, small.url, "/translate", SENTENCE)
    assert status == 200 and seconds < 5


def test_a_burst_of_ordinary_clients_is_all_served(toy_run):
    process = start_server(toy_run)  # the default limits
    try:
        results = [None] * 64

        def one(i):
            results[i] = post(process.url, "/translate", SENTENCE)[0]
        threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert results == [200] * 64
    finally:
        assert process.stop() == 0, process.log[-5:]


def _answer_to(url, raw):
    sock = connect(url)
    sock.sendall(raw)
    answer = b""
    while not answer.endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        answer += chunk
    sock.close()
    return answer.lower()


def test_oversized_or_invalid_heads_get_json_errors_with_the_security_headers(small):
    whole = _answer_to(small.url, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                       + b"a" * 20000 + b"\r\n\r\n")  # in one piece
    assert whole.startswith(b"http/1.1 431") and b"limits.max_header_bytes" in whole
    invalid = _answer_to(small.url, b"GET / HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n")
    assert invalid.startswith(b"http/1.1 400") and b"invalid http request" in invalid
    for answer in (whole, invalid):
        assert b"application/json" in answer and b"x-frame-options: deny" in answer


def test_a_body_not_sent_as_json_is_415(small):
    status, data, _ = post(small.url, "/translate", json.dumps(SENTENCE).encode(),
                           headers={"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in data["error"]


def test_a_dead_model_thread_fails_health_and_the_process_exits_non_zero(toy_run):
    env = {**os.environ, "MTX_KILL_AT": "model_round:1:RAISE"}
    process = start_server(toy_run, env=env)
    try:
        status, data, _ = post(process.url, "/translate", SENTENCE)
        assert status >= 500
        try:
            status, health, _ = get(process.url, "/health")
            assert status == 503 and health["status"] == "failed"
        except OSError:
            pass  # already stopped: the exit below is what a supervisor sees
        process.process.wait(60)
    finally:
        process.stop()
    assert process.process.returncode == 2, process.log[-5:]  # its one-line error
    assert any("model thread died" in line for line in process.log)


def test_an_open_bind_without_a_token_refuses_to_start(toy_run):
    done = subprocess.run([MTX_SERVE, f"ckpt={toy_run}", TOY_DECODE, "host=0.0.0.0", "port=0"],
                          capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "MTX_SERVE_TOKEN"})
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert "access.open_without_token=true" in lines[-1] and "Traceback" not in done.stderr
