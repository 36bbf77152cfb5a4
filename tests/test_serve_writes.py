"""mtx-serve against clients that ask and never read, over real sockets (the installed command on
a free loopback port, serving the toy run): answers have a write deadline, so clients that
pipeline requests and read none of the answers are dropped and free the slots they held."""
import select
import socket
import threading
import time
from urllib.parse import urlparse

import fastapi  # noqa: F401  the serve extra, which make install installs
from servers import get, post, start_server, until  # noqa: E402

SENTENCE = {"text": ["w1 w2 w3"], "beam_size": 1, "length_penalty": 1.0}


def _pipeline_without_reading(url, requests):
    """A connection that sends ``requests`` pipelined requests for the page (12 KB each, so
    that their answers are more than the kernel's buffers hold) and reads nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    parts = urlparse(url)
    sock.connect((parts.hostname, parts.port))

    def send():  # as fast as the server reads them, until it closes the connection
        try:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * requests)
        except OSError:
            pass
    threading.Thread(target=send, daemon=True).start()
    ready, _, _ = select.select([sock], [], [], 60)  # answered: in requests from now on (an
    assert ready                                      # idle one gives a newcomer its room)
    return sock


def _first(url, status, within):
    """Seconds until GET /info (a request that takes a slot) gets ``status``, or None."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        if get(url, "/info")[0] == status:
            return time.monotonic() - start
        time.sleep(0.1)
    return None


def _tcp_state(sock):
    """The kernel's state of ``sock`` (Linux TCP_INFO): 1 established, 7 closed (reset),
    8 close-wait (the other side closed)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]


def test_clients_that_pipeline_and_never_read_are_dropped_and_free_their_slots(toy_run):
    """As many clients as the limit of requests pipeline requests and read none of the answers:
    each holds a request slot while its answer cannot be written, so the next request is
    refused (503); within the write deadline they are dropped, and requests are served again.
    (Before the write deadline they held their slots for as long as they stayed connected.)"""
    limit, write_seconds = 4, 5
    process = start_server(toy_run, f"limits.max_connections={limit}",
                           f"limits.write_seconds={write_seconds}")
    greedy = [_pipeline_without_reading(process.url, 5000) for _ in range(limit)]
    try:
        assert _first(process.url, 503, within=90) is not None  # every slot held: refused
        assert get(process.url, "/health")[0] == 200  # the probes are answered all the same
        assert _first(process.url, 200, within=write_seconds + 15) is not None  # one dropped
        # each deadline runs from its own stalled write: the others are dropped within theirs
        assert until(lambda: all(_tcp_state(sock) in (7, 8) for sock in greedy),
                      within=write_seconds + 15)  # closed, though never read
        assert post(process.url, "/translate", SENTENCE)[0] == 200
    finally:
        for sock in greedy:
            sock.close()
        assert process.stop() == 0, process.log[-5:]
