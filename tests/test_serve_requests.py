"""mtx-serve against requests made to cost it work, over real sockets (the installed command on a
free loopback port, serving the toy run): bodies whose checks would be quadratic, bodies sent to
routes that take none, bodies that never arrive where no token was given, media types that only
look like JSON, bodies in UTF-16 or UTF-32, a newline in a path that reaches the log, and
requests that other sites' pages make a browser send."""
import json
import os
import re
import threading
from pathlib import Path

import pytest

import fastapi  # noqa: F401  the serve extra, which make install installs
from servers import (closed_by_server, connect, exchange, get, post, served, start_server,  # noqa: E402
                     timed)

from mtx.serving.access import PROXY_HEADERS
from mtx.serving.routes import ROUTES

HEAD_SECONDS = 3
SENTENCE = {"text": ["w1 w2 w3"], "beam_size": 1, "length_penalty": 1.0}
TOKEN = "t0ken-for-the-tests-0123456789"
QUICK = 2.0  # seconds: generous for a check linear in 64 KB (the quadratic one took ~16-23 s)


@pytest.fixture(scope="module")
def server(toy_run):
    yield from served(toy_run, f"limits.head_seconds={HEAD_SECONDS}", "limits.body_seconds=20")


@pytest.fixture(scope="module")
def guarded(toy_run):
    yield from served(toy_run, f"access.token={TOKEN}", "limits.body_seconds=20",
                      clean_log=False)


# bodies of at most limits.max_body_bytes (65,536) that made the old nesting check's regex
# (a JSON string pattern tried at every quote) take time quadratic in their size
ADVERSARIAL = [b'{"text": ["' + b'\\"' * 32000,          # escaped quotes, never closed
               b'{"text": ["' + b'\\"' * 32000 + b'"]',  # closed, the object not
               b'"' + b'\\\\' * 16000 + b'\\"' * 16000]   # backslashes, then escaped quotes


@pytest.mark.parametrize("body", ADVERSARIAL, ids=["open", "closed", "backslashes"])
def test_a_body_made_to_be_slow_to_check_is_refused_at_once_and_health_answers_meanwhile(
        server, body):
    outcome = {}

    def adversary():
        outcome["answer"], outcome["seconds"] = timed(post, server.url, "/translate", body,
                                                      headers={"Content-Type": "application/json"})
    thread = threading.Thread(target=adversary)
    thread.start()
    (status, health, _), seconds = timed(get, server.url, "/health")
    thread.join(120)
    assert status == 200 and health["status"] == "ok" and seconds < QUICK
    status, data, _ = outcome["answer"]
    assert status == 422 and "not valid JSON" in data["error"] and outcome["seconds"] < QUICK
    assert post(server.url, "/translate", SENTENCE)[0] == 200


STRING, NUMBER, EXTRA = ("Input should be a valid string", "Input should be a valid number",
                         "Extra inputs are not permitted")


@pytest.mark.parametrize("body, status, message", [
    # 64 KB of wrong items: the count before the items, each list stops at its first wrong one
    ({"text": [1] * 32000}, 413, "text has 32000 sentences; give at most 64 per request"),
    ({"text": ["a"] + [1] * 60}, 422, f"text[1]: {STRING}"),
    ({"text": ["a"], "gates": [[1, "x"] * 100] * 30}, 422, f"gates[0][1]: {NUMBER}"),
    ({f"k{i}": 1 for i in range(6000)}, 422,
     f"k0: {EXTRA}; k1: {EXTRA}; k2: {EXTRA}; and 5997 more"),
])
def test_a_body_of_many_wrong_items_gets_one_short_error(server, body, status, message):
    compact = json.dumps(body, separators=(",", ":")).encode()  # within limits.max_body_bytes
    got, data, _ = post(server.url, "/translate", compact,
                        headers={"Content-Type": "application/json"})
    assert (got, data["error"]) == (status, message)


@pytest.mark.parametrize("method, path, status", [
    ("GET", "/health", 200), ("POST", "/health", 405), ("POST", "/", 405), ("GET", "/", 200),
    ("POST", "/info", 405), ("GET", "/nothing", 404), ("PUT", "/translate", 405)])
def test_a_route_that_takes_no_body_answers_without_waiting_for_one(server, method, path, status):
    """A body of 100,000 bytes is announced and 10 sent: the answer comes at once, and the
    connection, which never completes its body, is closed within the head deadline."""
    sock = connect(server.url)
    try:
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                f"\r\nContent-Length: 100000\r\n\r\n").encode()
        (got, _, _), seconds = timed(exchange, server.url, head + b'{"text": [', sock=sock)
        assert got == status and seconds < QUICK
        assert closed_by_server(sock, HEAD_SECONDS + 10)
    finally:
        sock.close()


@pytest.mark.parametrize("method, path, status", [
    ("POST", "/translate", 401), ("POST", "/health", 401), ("POST", "/login", 401),
    ("POST", "/attention", 401), ("GET", "/info", 401)])
def test_access_is_decided_before_any_body_is_read(guarded, method, path, status):
    """No token: refused at once, the body neither waited for (it never completes) nor
    checked (an adversarial one)."""
    for body, length in ((b'{"text": [', 60000), (ADVERSARIAL[0], len(ADVERSARIAL[0]))):
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
                f"\r\nContent-Length: {length}\r\n\r\n").encode()
        (got, _, raw), seconds = timed(exchange, guarded.url, head + body)
        assert got == status and seconds < QUICK, raw[:200]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32", "utf-32-be", "utf-8-sig"])
def test_a_body_in_another_encoding_than_utf8_is_refused(server, encoding):
    body = json.dumps(SENTENCE).encode(encoding)
    status, data, _ = post(server.url, "/translate", body,
                           headers={"Content-Type": "application/json"})
    assert status == 422 and "UTF-8" in data["error"], data


@pytest.mark.parametrize("content_type, status", [
    ("application/json", 200), ("application/json; charset=utf-8", 200),
    ("Application/JSON; Charset=\"UTF-8\"", 200), ("application/json;charset=UTF-8;", 200),
    ("text/plain; x=application/json", 415), ("text/plain", 415),
    ("application/json; charset=utf-16", 415), ("application/json; boundary=x", 415),
    ("application/jsonx", 415), ("application/json, text/plain", 415),
    ("multipart/form-data; boundary=application/json", 415),
    ("application/x-www-form-urlencoded", 415)])
def test_only_a_body_declared_exactly_as_json_is_taken(server, content_type, status):
    got, data, _ = post(server.url, "/translate", json.dumps(SENTENCE).encode(),
                        headers={"Content-Type": content_type})
    assert got == status, data
    if status == 415:
        assert "application/json" in data["error"]


def test_two_content_types_are_refused(server):
    body = json.dumps(SENTENCE).encode()
    status, _, _ = exchange(server.url, b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Content-Type: text/plain\r\nContent-Type: application/json\r\n"
                            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    assert status == 415


def test_a_newline_in_a_path_forges_no_log_line(toy_run):
    """A bug in the app (injected: MTX_KILL_AT=request:1:RAISE, whose message quotes the path)
    is logged with the request's path: a %0A (or another control character) in it stays inside
    its line, in the traceback's message too. The client gets one JSON 500 with the security
    headers, the log one traceback."""
    process = start_server(toy_run, env={**os.environ, "MTX_KILL_AT": "request:1:RAISE"})
    try:
        status, head, body = exchange(process.url, b"GET /info%0A[INFO]%20forged%0D%0B%1B[2J "
                                                   b"HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert status == 500 and json.loads(body)["error"].startswith("internal error")
        assert b"application/json" in head and b"x-content-type-options: nosniff" in head
        assert get(process.url, "/health")[0] == 200  # the server goes on
    finally:
        assert process.stop() == 0
    assert not any(line.startswith("[INFO] forged") for line in process.log), process.log
    logged = [line for line in process.log if "forged" in line]
    assert len(logged) == 2 and all("/info\\n[INFO] forged\\r\\x0b\\x1b[2J" in line
                                    for line in logged), logged
    assert logged[0].startswith("[ERROR] internal error in GET /info")
    assert logged[1].startswith("InjectedFault: MTX_KILL_AT=request:1:RAISE at /info"), logged
    assert sum("Traceback" in line for line in process.log) == 1, process.log


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"}, {"Origin": "null"}, {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"}, {"Origin": "http://127.0.0.1:1"},
    {"Origin": "https://evil.example", "Sec-Fetch-Site": "same-origin"},
    {"Origin": "http://127.0.0.1.evil.example"}])
def test_a_request_from_another_site_s_page_does_no_work(server, headers):
    """Refused (403) before its body is read: the queue sees nothing of it."""
    before = get(server.url, "/health")[1]["jobs"]
    status, data, raw = post(server.url, "/translate", SENTENCE, headers=headers)
    assert status == 403 and "another site" in data["error"], raw[:300]
    assert b"access-control-allow" not in raw.lower()
    assert get(server.url, "/health")[1]["jobs"] == before


def test_the_page_s_own_requests_and_clients_that_are_not_browsers_are_served(server):
    origin = server.url  # http://127.0.0.1:<port>
    port = origin.rsplit(":", 1)[1]
    for headers in ({}, {"Origin": origin, "Sec-Fetch-Site": "same-origin"},
                    {"Sec-Fetch-Site": "none"},
                    {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"}):
        status, out, raw = post(server.url, "/translate", SENTENCE, headers=headers)
        assert status == 200 and out["translations"] == ["w3 w2 w1"], (headers, raw[:300])
    # reading routes do no work (and without CORS headers a page elsewhere cannot read them)
    status, _, raw = get(server.url, "/info")
    assert status == 200 and b"access-control-allow" not in raw.lower()


def test_no_cross_origin_preflight_is_granted(server):
    status, head, _ = exchange(server.url, b"OPTIONS /translate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                           b"Origin: http://evil.example\r\nAccess-Control-"
                                           b"Request-Method: POST\r\n\r\n")
    assert status == 405 and b"access-control-allow" not in head


def test_the_docs_name_the_routes_of_the_code():
    """docs/serving.md's API table lists the routes of mtx/serving/routes.py, no more, no fewer
    (the one list the app, the 404 answer and the startup line take theirs from)."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    table = docs.split("## The API", 1)[1].split("\n\n", 2)[1]
    documented = set(re.findall(r"^\| `(GET|POST) (/\S*?)`", table, flags=re.M))
    assert documented == {(route.method, route.path) for route in ROUTES}


def test_each_route_is_answered_by_the_handler_its_row_names():
    """The route table is the one list: each row names its handler (the sign-in's are answered
    in front of the app), and the app has no handler that no row names."""
    from mtx.serving.app import Handlers
    named = [route.handler for route in ROUTES if route.handler is not None]
    assert all(route.session for route in ROUTES if route.handler is None)
    defined = {name for name in vars(Handlers) if not name.startswith("_")}
    assert sorted(named) == sorted(defined)


def test_the_nginx_example_sets_exactly_the_headers_mtx_serve_reads_from_a_proxy():
    docs = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    example = docs.split("## In production", 1)[1].split("```nginx", 1)[1].split("```", 1)[0]
    set_by_nginx = {name.lower() for name in re.findall(r"proxy_set_header\s+(\S+)", example)}
    assert set_by_nginx == {"host", *(name.decode() for name in PROXY_HEADERS)}
