"""mtx-serve against hostile request heads, over real sockets (the installed command on a free
loopback port, serving the toy run): protocol upgrades (WebSocket, h2c), heads over the limits
in one piece, in pipelined requests and in header fields, and a body framed two ways."""
import json

import pytest

import fastapi  # noqa: F401  the serve extra, which make install installs
from servers import (closed_by_server, connect, exchange, request, served,  # noqa: E402
                     until)

TOKEN = "t0ken-for-the-head-tests-0123456789"
BEARER = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
WEBSOCKET = (b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
LIMIT = 16384  # limits.max_header_bytes (the default)


@pytest.fixture(scope="module")
def server(toy_run):
    yield from served(toy_run, f"access.token={TOKEN}")


def _health(url):
    return request(url, "GET", "/health", headers={"Authorization": f"Bearer {TOKEN}"})[1]


def test_a_websocket_upgrade_is_plain_http_through_the_host_and_token_checks(server):
    status, head, body = exchange(server.url, b"GET /info HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  + WEBSOCKET + b"\r\n")
    assert status == 401 and "needs its token" in json.loads(body)["error"]
    status, _, body = exchange(server.url, b"GET /info HTTP/1.1\r\nHost: evil.example\r\n"
                               + WEBSOCKET + BEARER + b"\r\n")
    assert status == 421 and "access.allowed_hosts" in json.loads(body)["error"]
    status, _, body = exchange(server.url, b"GET /info HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               + WEBSOCKET + BEARER + b"\r\n")
    assert status == 200 and json.loads(body)["source_language"] == "src"


def test_upgrade_attempts_leave_no_connection_behind_and_nothing_in_the_log(server):
    before = len(server.log)
    for i in range(60):
        upgrade = WEBSOCKET if i % 2 else b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        status, _, _ = exchange(server.url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                + upgrade + b"\r\n")
        assert status == 200
    # the attempts' connections are closed by now (this one is the /health below)
    assert until(lambda: _health(server.url)["connections"] == 1, within=10)
    assert not any("upgrade" in line.lower() for line in server.log[before:]), server.log[before:]


def test_a_head_of_many_kilobytes_in_one_piece_is_refused_before_h11_reads_it_all(server):
    fields = b"".join(b"X%d:\r\n" % i for i in range(30000))  # 30,000 fields in 260 KB
    status, head, body = exchange(server.url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                  + fields + b"\r\n")
    # refused by what it had read (twice the limit at most), not by the whole head's size
    assert status == 431 and json.loads(body)["error"] == (
        f"the request line and headers are over {LIMIT} bytes (limits.max_header_bytes)")
    assert b"connection: close" in head


def test_a_pipelined_oversized_head_waits_for_its_turn_and_is_refused(server):
    sock = connect(server.url)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                     + b"a" * (3 * LIMIT) + b"\r\n\r\n")
        answers = _until_closed(sock)
    finally:
        sock.close()
    first, _, second = answers.partition(b"HTTP/1.1 431")
    assert first.startswith(b"HTTP/1.1 200") and b"limits.max_header_bytes" in second


def _until_closed(sock):
    """Every byte the server sends on ``sock`` until it closes it."""
    sock.settimeout(10)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_invalid_and_oversized_heads_by_the_hundred_leave_no_line_in_the_log(server):
    before = len(server.log)
    for i in range(100):
        raw = (b"GET / HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n" if i % 2 else
               b"GET / HTTP/1.1\r\nX-Big: " + b"a" * (3 * LIMIT) + b"\r\n\r\n")
        assert exchange(server.url, raw)[0] in (400, 431)
    assert _health(server.url)["status"] == "ok"
    assert server.log[before:] == []


def test_too_many_header_fields_get_431_naming_the_limit(server):
    fields = b"".join(b"X-%d: a\r\n" % i for i in range(101))  # 1 KB: within the bytes
    status, _, body = exchange(server.url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                               + fields + b"\r\n")
    assert status == 431 and "102 header fields" in json.loads(body)["error"]
    assert "limits.max_headers" in json.loads(body)["error"]


def test_content_length_with_transfer_encoding_is_400_and_the_connection_closed(server):
    body = json.dumps({"text": ["w1 w2"]}).encode()
    sock = connect(server.url)
    try:
        status, head, answer = exchange(
            server.url, b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\n" + BEARER
            + b"Content-Type: application/json\r\nContent-Length: %d\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), len(body),
                                                                          body), sock=sock)
        assert status == 400 and "Transfer-Encoding" in json.loads(answer)["error"]
        assert b"connection: close" in head and closed_by_server(sock, 5)
    finally:
        sock.close()
