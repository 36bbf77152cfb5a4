"""mtx-serve under a soak of hostile requests, over real sockets (the installed command on a free
loopback port, serving the toy run; slow: `make test` runs it, `make test-quick` does not):
2,000 protocol upgrade attempts, 2,000 heads of 260 KB and 2,000 bodies of 64 KB full of wrong
items, four clients at a time, while a prober asks /health every 0.2 s. The server's memory
(RSS) must end within 30 MB of what it was after a warm-up of each kind, and /health must be
answered within 1 s throughout (issue 81's soak)."""
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import fastapi  # noqa: F401  the serve extra, which make install installs
from servers import exchange, request, served  # noqa: E402

TOKEN = "t0ken-for-the-soak-0123456789"
EACH, CLIENTS, WARM_UP = 2000, 4, 50
MOST_GROWTH_MB, MOST_HEALTH_SECONDS = 30, 1.0
UPGRADES = [b"GET /info HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket"
            b"\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings\r\n"
            b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"]
BIG_HEAD = (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + b"".join(b"X%d:\r\n" % i for i in range(30000)) + b"\r\n")  # 260 KB


def _post(body):
    data = json.dumps(body, separators=(",", ":")).encode()
    return (b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(data), data))


WRONG_BODIES = [_post({"text": [1] * 32000}),
                _post({"text": ["a"], "gates": [[1, "x"] * 160] * 60}),
                _post({f"k{i}": 1 for i in range(6000)})]


@pytest.fixture(scope="module")
def server(toy_run):
    yield from served(toy_run, f"access.token={TOKEN}")


def _rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _send(url, raw):
    """One request on its own connection -> its status, or None when the server closed the
    connection before its answer could be read (a refused head, its rest unread)."""
    try:
        return exchange(url, raw)[0]
    except (OSError, AssertionError):
        return None


def _soak(url, kinds, count):
    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(lambda i: _send(url, kinds[i % len(kinds)]), range(count)))


def test_hostile_requests_by_the_thousand_leave_memory_and_health_as_they_were(server):
    pid = server.process.pid
    for kinds in (UPGRADES, [BIG_HEAD], WRONG_BODIES):
        _soak(server.url, kinds, WARM_UP)
    start_mb, slowest, probed, stop = _rss_mb(pid), [0.0], [], threading.Event()

    def probe():
        while not stop.wait(0.2):
            began = time.monotonic()
            probed.append(request(server.url, "GET", "/health")[0])
            slowest[0] = max(slowest[0], time.monotonic() - began)
    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        statuses = {name: _soak(server.url, kinds, EACH) for name, kinds in
                    (("upgrades", UPGRADES), ("heads", [BIG_HEAD]), ("bodies", WRONG_BODIES))}
    finally:
        stop.set()
        prober.join(10)
    end_mb = _rss_mb(pid)
    print(f"soak: RSS {start_mb:.1f} -> {end_mb:.1f} MB, slowest of {len(probed)} /health "
          f"{slowest[0]:.3f} s, "
          + ", ".join(f"{name}: {sorted(set(s), key=str)}" for name, s in statuses.items()))
    assert set(statuses["upgrades"]) == {200, 401}
    assert set(statuses["heads"]) <= {431, None} and 431 in statuses["heads"]
    assert set(statuses["bodies"]) == {413, 422}
    assert probed and set(probed) == {200}
    assert end_mb - start_mb <= MOST_GROWTH_MB and slowest[0] <= MOST_HEALTH_SECONDS
