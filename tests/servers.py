"""Helpers of the mtx-serve tests: the installed command started on a free loopback port, and a
plain HTTP client (http.client, so a test can send exactly the bytes it wants)."""
import http.client
import json
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from mtx.bench.serve import ServerProcess

MTX_SERVE = str(Path(sys.executable).parent / "mtx-serve")


# The toy model's expected outputs hold at length penalty 1.0; the default (1.5, chosen on
# Multi30k's val) lengthens some of its translations of short, unusual inputs.
TOY_DECODE = "decode.length_penalty=1.0"


def start_server(run_dir, *overrides, env=None):
    """``mtx-serve ckpt=<run_dir> port=0 <overrides>``, as a user starts it: a ServerProcess
    (``.url``, ``.log``, ``.stop()``) once it has logged its address."""
    return ServerProcess([f"ckpt={run_dir}", TOY_DECODE, *overrides], argv=(MTX_SERVE,), env=env)


def served(run_dir, *overrides, clean_log=True):
    """A module fixture's server (`start_server`): yielded, then stopped with exit 0 and, with
    ``clean_log``, no traceback in its log."""
    process = start_server(run_dir, *overrides)
    yield process
    assert process.stop() == 0, process.log[-5:]
    if clean_log:
        assert not any("Traceback" in line for line in process.log), process.log[-20:]


def request(url, method, path, body=None, headers=None, chunked=False, source=None):
    """One request on a new connection -> (status, parsed JSON or None, raw bytes). ``body``:
    bytes as they are, or an object sent as JSON; ``source``: the client's address (another
    loopback address, e.g. 127.0.0.2, is another client)."""
    parts = urlparse(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120,
                                            source_address=(source, 0) if source else None)
    headers = dict(headers or {})
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    if chunked:  # no Content-Length: the body streams in pieces
        pieces, body = [body[i:i + 4096] for i in range(0, len(body), 4096)], None
        connection.putrequest(method, path)
        for key, value in {**headers, "Transfer-Encoding": "chunked"}.items():
            connection.putheader(key, value)
        connection.endheaders()
        try:
            for piece in pieces:
                connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            connection.send(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered before the whole body was in
    else:
        connection.request(method, path, body, headers)
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    return response.status, data, raw


def until(condition, within, every=0.05):
    """Wait until ``condition()`` is true -> whether it was within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return False


def post(url, path, body, **kwargs):
    return request(url, "POST", path, body, **kwargs)


def get(url, path):
    return request(url, "GET", path)


def connect(url, source=None, timeout=60):
    """A plain socket to the server of ``url`` (from the address ``source``, if given)."""
    parts = urlparse(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=timeout,
                                    source_address=(source, 0) if source else None)


def closed_by_server(sock, within):
    """Whether the server closes ``sock`` (reads end) within ``within`` seconds."""
    sock.settimeout(within)
    try:
        while sock.recv(65536):
            pass
        return True
    except socket.timeout:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def exchange(url, raw, source=None, sock=None):
    """Send ``raw`` bytes (on ``sock``, or a new connection that is closed after) and read one
    answer -> (status, its head lowercased, its body bytes)."""
    own = sock is None
    sock = connect(url, source) if own else sock
    try:
        sock.sendall(raw)
        return read_answer(sock)
    finally:
        if own:
            sock.close()


def read_answer(sock):
    """One answer (with a Content-Length) read from ``sock`` -> (status, head lowercased,
    body)."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before an answer: {answer[:200]!r}"
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed inside an answer"
        body += chunk
    return int(head.split(b" ")[1]), head.lower(), body


def timed(function, *args, **kwargs):
    """(``function(*args, **kwargs)``, the seconds it took)."""
    start = time.monotonic()
    result = function(*args, **kwargs)
    return result, time.monotonic() - start
