"""mtx-serve against careless and hostile clients, over real HTTP (the installed command on a
free loopback port, serving the toy run): the token, the Host allow-list, the headers of every
answer, readiness, requests over the work limits, a body that never arrives, a second signal,
and the page's script policy. What needs no server (the parts' rules) is tested directly."""
import http.client
import json
import signal
import socket
import time
from urllib.parse import urlparse

import pytest

import fastapi  # noqa: F401  the serve extra, which make install installs
from servers import get, post, request, start_server  # noqa: E402

from mtx.errors import ConfigError
from mtx.serving.access import Access, host_name
from mtx.serving.app import page_html, page_policy

TOKEN = "t0ken-for-the-tests-0123456789"


@pytest.fixture(scope="module")
def guarded(toy_run):
    """A server with a token and small work limits."""
    process = start_server(toy_run, f"access.token={TOKEN}", "limits.max_request_work=200",
                           "limits.max_sentence_subwords=20", "limits.body_seconds=2")
    yield process
    assert process.stop() == 0, process.log[-5:]


def with_token(headers=None):
    return {**(headers or {}), "Authorization": f"Bearer {TOKEN}"}


def test_the_token_is_needed_everywhere_but_liveness_and_the_static_page(guarded):
    url = guarded.url
    status, health, _ = get(url, "/health")
    assert status == 200 and health == {"status": "ok"}  # no traffic counters without the token
    status, health, _ = request(url, "GET", "/health", headers=with_token())
    assert status == 200 and "queued" in health and "busy_seconds" in health
    status, _, page = get(url, "/")
    assert status == 200 and b'id="login"' in page
    for method, path in (("GET", "/info"), ("GET", "/ready"), ("GET", "/heads"),
                         ("POST", "/translate"), ("GET", "/openapi.json")):
        status, data, _ = request(url, method, path, {"text": ["w1"]} if method == "POST" else None)
        assert status == 401 and "needs its token" in data["error"], (path, status)
    status, data, _ = request(url, "GET", "/info", headers={"Authorization": "Bearer wrong"})
    assert status == 401
    status, info, _ = request(url, "GET", "/info", headers=with_token())
    assert status == 200 and info["source_language"] == "src"
    status, out, _ = post(url, "/translate", {"text": ["w1 w2 w3"], "beam_size": 1,
                                              "length_penalty": 1.0}, headers=with_token())
    assert status == 200 and out["translations"] == ["w3 w2 w1"]


def _login(url, headers):
    parts = urlparse(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    connection.request("POST", "/login", headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status, response.getheader("Set-Cookie")


def test_the_page_signs_in_with_the_token_in_a_header_for_an_expiring_cookie(guarded):
    status, cookie = _login(guarded.url, with_token())
    assert status == 200 and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Max-Age=43200" in cookie and "Secure" not in cookie  # plain HTTP
    assert TOKEN not in cookie  # the cookie holds an expiry and its signature
    session = {"Cookie": cookie.split(";")[0]}
    assert request(guarded.url, "GET", "/info", headers=session)[0] == 200
    forged = {"Cookie": "mtx_session=99999999999." + "0" * 64}
    assert request(guarded.url, "GET", "/info", headers=forged)[0] == 401
    # X-Forwarded-Proto from an address not trusted is ignored (a trusted one: test_serve_tokens)
    status, cookie = _login(guarded.url, with_token({"X-Forwarded-Proto": "https"}))
    assert status == 200 and "Secure" not in cookie
    assert _login(guarded.url, {"Authorization": "Bearer wrong"})[0] == 401
    status, _, _ = request(guarded.url, "GET", f"/?token={TOKEN}")  # a URL carries no token
    assert status == 200
    assert request(guarded.url, "GET", f"/info?token={TOKEN}")[0] == 401


def test_only_the_allowed_host_names_are_answered(guarded):
    port = urlparse(guarded.url).port
    status, data, _ = request(guarded.url, "GET", "/health",
                              headers={"Host": f"rebound.example:{port}"})
    assert status == 421 and "rebound.example" in data["error"]
    assert "127.0.0.1" not in data["error"]  # the hosts it serves are not listed
    for host in (f"localhost:{port}", f"127.0.0.1:{port}"):
        assert request(guarded.url, "GET", "/health", headers={"Host": host})[0] == 200


def test_every_answer_has_the_security_headers(guarded):
    parts = urlparse(guarded.url)
    for path, headers in (("/health", {}), ("/info", {}), ("/nothing", with_token())):
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        assert response.getheader("X-Content-Type-Options") == "nosniff", path
        assert response.getheader("X-Frame-Options") == "DENY", path
        connection.close()


def test_ready_when_idle_and_work_over_the_limit_is_413(guarded):
    status, data, _ = request(guarded.url, "GET", "/ready", headers=with_token())
    assert status == 200 and data == {"ready": True}
    text = [" ".join(f"w{k}" for k in range(12))] * 4  # 4 x 13 subwords x beam 4 = 208 > 200
    status, data, _ = post(guarded.url, "/translate", {"text": text, "beam_size": 4},
                           headers=with_token())
    assert status == 413 and "limits.max_request_work" in data["error"]
    status, _, _ = post(guarded.url, "/translate", {"text": text, "beam_size": 3},
                        headers=with_token())
    assert status == 200  # 156: within it


def test_a_body_that_does_not_arrive_is_408_and_frees_the_connection(guarded):
    parts = urlparse(guarded.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                     + TOKEN.encode() + b"\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"text\": [")  # and nothing more
        answer = b""  # the headers and the JSON body may come in separate reads
        while b"\r\n\r\n{" not in answer or not answer.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408") and b"limits.body_seconds" in answer


def test_attention_is_compact_json(guarded):
    status, data, raw = post(guarded.url, "/attention", {"text": "w1 w2 w3", "beam_size": 1},
                             headers=with_token())
    assert status == 200 and data["translation"]
    assert b", " not in raw and b": " not in raw
    weights = [w for layer in data["layers"] for head in layer["weights"] for row in head
               for w in row]
    assert weights and all(len(repr(w).partition(".")[2]) <= 3 for w in weights)


def test_attention_json_written_a_head_at_a_time_is_the_whole_answer_s_json():
    import numpy
    from mtx.serving.engine import attention_json, compact_json
    rng = numpy.random.default_rng(0)
    layers = [{"row": a, "name": f"enc{a} self", "kind": "self", "layer": a, "queries": "source",
               "keys": "source", "weights": rng.random((heads, 5, 7)).round(3)}
              for a, heads in enumerate((4, 2, 1))]  # a pruned layer has fewer heads
    answer = {"translation": "w3 w2 w1", "score": -0.5, "source": ["w1", "</s>"],
              "target": ["<s>", "w3"], "layers": layers}
    whole = {**answer, "layers": [{**layer, "weights": layer["weights"].tolist()}
                                  for layer in layers]}
    assert attention_json(answer) == compact_json(whole)
    assert json.loads(attention_json(answer)) == whole


def test_info_names_no_path_of_the_machine(guarded, toy_run):
    info = request(guarded.url, "GET", "/info", headers=with_token())[1]
    assert str(toy_run.resolve().parent) not in json.dumps(info)


def test_a_second_signal_exits_at_once(toy_run):
    """The first SIGTERM waits for the request in flight (a body still arriving); the second
    ends the process with 143 without waiting for it."""
    process = start_server(toy_run, "limits.body_seconds=600", "shutdown_seconds=600")
    parts = urlparse(process.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50\r\n"
                     b"Content-Type: application/json\r\n\r\n{")
        time.sleep(0.5)  # the request is in (its body has begun)
        process.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while not any("stopping" in line for line in process.log) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.process.poll() is None  # still waiting for the request in flight
        assert process.stop(timeout=60) == 143, process.log[-5:]
    assert any("second signal" in line for line in process.log)


def test_the_page_policy_runs_only_the_page_s_own_script():
    policy = page_policy(page_html())
    script = policy.split("script-src ")[1].split(";")[0]
    assert script.startswith("'sha256-") and "unsafe-inline" not in script
    assert "frame-ancestors 'none'" in policy and "base-uri 'none'" in policy


@pytest.mark.parametrize("header, name", [("127.0.0.1:8000", "127.0.0.1"), ("[::1]:80", "::1"),
                                          ("Example.ORG", "example.org"), ("::1", "::1")])
def test_host_names(header, name):
    assert host_name(header) == name


def test_access_settings():
    assert Access().hosts("127.0.0.1") == {"localhost", "127.0.0.1", "::1"}
    assert Access().hosts("0.0.0.0") is None  # every address: any Host
    assert Access(allowed_hosts=["MT.example"]).hosts("0.0.0.0") == {"mt.example"}
    with pytest.raises(ConfigError, match="access.token is 5 characters: give at least 16"):
        Access(token="short")
    with pytest.raises(ConfigError, match="access.token has characters other than"):
        Access(token="a token with spaces in it")
    with pytest.raises(ConfigError, match=r"access.allowed_hosts=\[\] answers no one"):
        Access(allowed_hosts=[])


class _Engine:
    """The part of `mtx.serving.engine.Engine` a Service's model thread calls: run_batch waits for
    ``release``; warm_up raises ``warm_up_error`` if given."""

    def __init__(self, warm_up_error=None):
        import threading
        self.release, self.warm_up_error = threading.Event(), warm_up_error

    def warm_up(self):
        if self.warm_up_error:
            raise self.warm_up_error

    def run_batch(self, key, payloads):
        self.release.wait(60)
        return payloads


def _service(engine, **limits):
    from mtx.serving.service import Service
    from mtx.serving.settings import Batching, Limits
    return Service(engine, Limits(**limits), Batching(max_wait_ms=0), info={}, study={})


def test_not_ready_while_the_queue_is_full_and_after_the_model_thread_died():
    engine = _Engine()
    service = _service(engine, max_queue=2)
    service.start()
    assert service.not_ready() is None
    futures = [service.jobs.submit("k", 0, 1)]
    deadline = time.monotonic() + 60
    while service.jobs.stats.running == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # the first runs (held inside the model); then two wait
    futures += [service.jobs.submit("k", i, 1) for i in (1, 2)]
    assert service.not_ready() == "the queue is full (2 requests)"
    assert service.jobs.retry_after() >= 1
    engine.release.set()
    assert [f.result(60) for f in futures] == [0, 1, 2]
    service.stop(60)
    assert service.not_ready() == "the server is shutting down"

    dead = _service(_Engine(RuntimeError("no memory for the model")))
    with pytest.raises(RuntimeError, match="no memory"):
        dead.start()
    assert dead.not_ready() == "the model thread is not running (see the server's log)"


def test_past_its_deadline_a_request_is_504_and_its_work_is_dropped():
    import asyncio
    from mtx.serving.answers import RequestError
    engine = _Engine()
    service = _service(engine, request_seconds=0.2)
    service.start()
    with pytest.raises(RequestError, match="limits.request_seconds") as caught:
        asyncio.run(service._ask("k", [(1, 1), (2, 1), (3, 1)]))
    assert caught.value.status == 504
    engine.release.set()  # the part that was running finishes; the others never run
    deadline = time.monotonic() + 60
    while service.jobs.stats.abandoned == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.jobs.stats.abandoned == 1 and service.jobs.queued_tokens() == 0
    service.stop(60)


def test_a_client_that_goes_away_frees_the_model():
    import asyncio
    from mtx.serving.answers import RequestError
    engine = _Engine()
    service = _service(engine)
    service.start()

    async def ask_then_hang_up():
        gone = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.1, gone.set_result, None)
        return await service._ask("k", [(1, 1), (2, 1)], lambda: gone)
    with pytest.raises(RequestError, match="went away"):
        asyncio.run(ask_then_hang_up())
    engine.release.set()
    deadline = time.monotonic() + 60
    while service.jobs.stats.abandoned == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert service.jobs.stats.abandoned == 1
    assert service.jobs.submit("k", 5, 1).result(60) == 5  # free for the next request
    service.stop(60)


def test_the_shutdown_deadline_answers_what_is_still_waiting_with_503():
    import asyncio
    from mtx.serving.answers import RequestError
    engine = _Engine()
    service = _service(engine, request_seconds=600)
    service.start()

    async def ask_then_stop():
        asking = asyncio.ensure_future(service._ask("k", [(1, 1)]))
        await asyncio.sleep(0.05)
        service.close(0.2)  # the first signal, with a short shutdown_seconds
        return await asking
    with pytest.raises(RequestError, match="stopped before this request finished") as caught:
        asyncio.run(ask_then_stop())
    assert caught.value.status == 503 and "Retry-After" in caught.value.headers
    engine.release.set()
    service.stop(60)


def test_over_http_a_request_past_its_deadline_is_a_json_504(toy_run):
    process = start_server(toy_run, "limits.request_seconds=0.001")
    try:
        text = [" ".join(f"w{(i + k) % 20}" for k in range(10)) for i in range(16)]
        status, data, _ = post(process.url, "/translate", {"text": text, "beam_size": 8})
        assert status == 504 and "limits.request_seconds" in data["error"]
        assert get(process.url, "/health")[0] == 200
    finally:
        assert process.stop() == 0, process.log[-5:]
