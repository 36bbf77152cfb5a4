"""What uvicorn's h11 protocol is given to parse, and how what it refuses is answered.

- A head is handed to h11 at most ``max_header_bytes`` at a time: asyncio reads up to 256 KiB at
  once, and h11 would parse all of it, so a head of 50,000 fields in one piece would cost the
  event loop tens of milliseconds before its refusal. So h11 parses at most twice the limit of a
  head before it is refused (431), and bytes after a complete request wait unparsed until its
  answer is done (pipelining).
- No protocol upgrade is made (uvicorn's WebSocket support is off, `mtx.serving.server`): a
  request with ``Upgrade`` (WebSocket, h2c) is answered as plain HTTP/1.1, through every check of
  the app (RFC 9110 7.8 lets a server ignore it), and nothing is logged for it.
- A request h11 refuses gets the service's JSON answer with the security headers (431 for a head
  over the limit, 400 for bad syntax), not uvicorn's plain text, and the connection is closed.
  Nothing is logged for it (uvicorn warns once per invalid request: any client could fill the
  log with them); the protocol's errors (an exception in the app) are logged as before.
"""
import http
import json
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .answers import SECURITY_HEADERS

# h11's states of a client whose request is complete and not yet answered: what comes after waits
REQUEST_COMPLETE = (h11.DONE, h11.MUST_CLOSE, h11.MIGHT_SWITCH_PROTOCOL)
# uvicorn's protocol logger, for the paced protocol: its errors only (module docstring)
ERRORS_ONLY = logging.getLogger(__name__ + ".h11")
ERRORS_ONLY.setLevel(logging.ERROR)  # (and uvicorn's per-connection trace lines not even made)


class PacedH11(H11Protocol):
    """uvicorn's h11 protocol, paced (module docstring); the class attribute
    ``max_header_bytes`` is the head's limit."""
    max_header_bytes: int = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.logger = ERRORS_ONLY
        self._unread = bytearray()  # received, not yet handed to h11 (`_feed`)

    def data_received(self, data):
        self._unread += data
        self._feed()

    def on_response_complete(self):
        super().on_response_complete()  # may start a pipelined request at once
        if not self.transport.is_closing():
            self._feed()

    def _feed(self):
        """Hand h11 what has been received, ``max_header_bytes`` at a time, and nothing more
        once a request is complete (the rest waits for its answer: `on_response_complete`)."""
        step = self.max_header_bytes
        while self._unread and not self.transport.is_closing():
            if self.conn.their_state in REQUEST_COMPLETE:
                self.flow.pause_reading()
                return
            piece = bytes(self._unread[:step])
            del self._unread[:step]
            super().data_received(piece)

    def _should_upgrade(self):
        return False  # never, and nothing logged (module docstring)

    def send_400_response(self, msg):
        """A request h11 refused: a head over ``max_header_bytes`` (431) or bad syntax (400),
        answered as the service answers (JSON, written here: h11 is in its error state), then
        the connection is closed (only closed, when an answer has begun already)."""
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            unparsed = self.conn.trailing_data[0]  # at most twice the limit (`_feed`)
            if len(unparsed) > self.max_header_bytes and b"\r\n\r\n" not in unparsed:
                status, message = 431, (f"the request line and headers are over "
                                        f"{self.max_header_bytes} bytes (limits.max_header_bytes)")
            else:
                status, message = 400, "invalid HTTP request (bad syntax)"
            self.transport.write(json_refusal(status, message))
        self.transport.close()


def json_refusal(status, message):
    """A whole HTTP/1.1 answer, ``{"error": message}`` with ``status``, that closes the
    connection."""
    body = json.dumps({"error": message}).encode()
    head = [b"HTTP/1.1 %d %s" % (status, http.HTTPStatus(status).phrase.encode()),
            b"content-type: application/json", b"content-length: %d" % len(body),
            b"connection: close", *(name + b": " + value for name, value in SECURITY_HEADERS)]
    return b"\r\n".join(head) + b"\r\n\r\n" + body
