"""Connections bounded in time and number: uvicorn's h11 protocol with deadlines that trickling
clients cannot stretch, and room for new clients made by closing idle ones.

uvicorn times out only a connection that sends nothing after an answer (its keep-alive timer,
restarted by every byte), and its ``limit_concurrency`` counts idle connections, so a few dozen
clients that connect and send nothing, or a header byte now and then, would hold every slot.
Here each connection is in one of two states:

- *waiting* for a request's head (since it opened, or since its last answer): it must complete
  the request line and headers within ``head_seconds`` of that moment, however it trickles them,
  or it is closed; and when more than ``max_connections`` are open, the one that has waited
  longest is closed to make room for the newcomer (when every connection is in a request, the
  newcomer stays, up to twice the limit, and the app refuses its request with a 503);
- *in a request*: the app has it; its body has ``limits.body_seconds`` (`mtx.serving.app`) and its
  answer ``limits.request_seconds``. Requests at once are the app's to limit (`Admission`).

Idle keep-alive connections are closed after ``keepalive_seconds`` (uvicorn's timer). And answers
have a write deadline: while a connection's send buffer is full (the client does not read, e.g.
while it pipelines requests), it must take some of it within ``write_seconds``, and a connection
being closed must take what is left within ``write_seconds``; else it is dropped (aborted), its
request leaves the app and its slots are free. (uvicorn waits for a full buffer to drain with no
timer, and closing a transport waits for its buffer to be written.) What h11 is given to parse,
upgrades and invalid requests: `mtx.serving.parsing`.
"""
import logging
import time

from .parsing import PacedH11

log = logging.getLogger(__name__)
HARD_LIMIT_FACTOR = 2  # connections all in requests: newcomers are closed beyond twice the limit


class Guard:
    """The settings and the open connections of one server (shared by its protocols)."""

    def __init__(self, max_connections, head_seconds, write_seconds):
        self.max_connections, self.head_seconds = max_connections, head_seconds
        self.write_seconds = write_seconds
        self.open = set()   # every GuardedH11 connection now open
        self.closed_idle = 0  # closed for room or past their head deadline

    def drop_all(self):
        """Abort every connection still open (at the shutdown deadline: what they have not
        taken of their answers is dropped, and their requests end)."""
        for connection in list(self.open):
            connection.drop("the server's shutdown deadline")

    def make_room(self, newcomer):
        """Over ``max_connections``: close the connection that has waited longest for a
        request's head (not ``newcomer``); none waiting: the newcomer stays (its request is the
        app's to refuse)."""
        self.open -= {c for c in self.open if c.transport.get_protocol() is not c}  # handed on
        open_now = [c for c in self.open if not c.transport.is_closing()]
        if len(open_now) <= self.max_connections:
            return
        waiting = [c for c in open_now if c is not newcomer and c.waiting_since is not None]
        if waiting:
            min(waiting, key=lambda c: c.waiting_since).close_idle("connection limit")
        elif len(open_now) > HARD_LIMIT_FACTOR * self.max_connections:
            newcomer.close_idle("every connection is in a request")


class GuardedH11(PacedH11):
    """uvicorn's h11 protocol, paced (`PacedH11`), under a `Guard` (the class attributes
    ``guard`` and ``max_header_bytes``, set by `protocol_class`)."""
    guard: Guard = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.waiting_since = None   # time.monotonic() it began waiting for a head, or None
        self._head_timer = None
        self._write_timer = None    # the write deadline, while one runs
        self._known_cycle = None

    def connection_made(self, transport):
        super().connection_made(transport)
        self.guard.open.add(self)
        self._wait_for_head()
        self.guard.make_room(self)

    def connection_lost(self, exc):
        self.guard.open.discard(self)
        self._stop_waiting()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().connection_lost(exc)

    def data_received(self, data):
        super().data_received(data)
        self._note_new_request()

    def on_response_complete(self):
        super().on_response_complete()  # may start a pipelined request at once
        if self.transport.is_closing():
            self._write_deadline()
        elif not self._note_new_request():
            self._wait_for_head()

    def pause_writing(self):  # the send buffer is full: the client must take some in time
        super().pause_writing()
        self._write_deadline()

    def resume_writing(self):
        super().resume_writing()
        if self._write_timer is not None and not self.transport.is_closing():
            self._write_timer.cancel()
            self._write_timer = None

    def timeout_keep_alive_handler(self):
        self.close_idle("idle after its answer")

    def shutdown(self):
        super().shutdown()  # closes a connection between requests
        if self.transport.is_closing():
            self._write_deadline()

    def drop(self, why):
        """Abort the connection: what it has not taken of its answers is dropped."""
        if self.transport is not None:
            log.debug("dropping the connection from %s (%s)", self.client, why)
            self.transport.abort()

    def send_400_response(self, msg):
        super().send_400_response(msg)
        self._write_deadline()

    def close_idle(self, why):
        """Close a connection that is waiting for a request's head."""
        if not self.transport.is_closing():
            self.guard.closed_idle += 1
            log.debug("closing an idle connection from %s (%s)", self.client, why)
            self.transport.close()
        self._stop_waiting()
        self._write_deadline()

    def _write_deadline(self):
        """While the send buffer is full, or once the connection is closing with bytes still
        unsent: the client must take them within ``write_seconds``, else they are dropped."""
        if self._write_timer is None and self.transport.get_write_buffer_size():
            self._write_timer = self.loop.call_later(
                self.guard.write_seconds, self.drop, "its answer not taken within "
                                                     "limits.write_seconds")

    def _note_new_request(self):
        """True when a request's head has come since last asked (the app has it now)."""
        if self.cycle is not None and self.cycle is not self._known_cycle:
            self._known_cycle = self.cycle
            if not self.cycle.response_complete:
                self._stop_waiting()
                return True
        return False

    def _wait_for_head(self):
        self._stop_waiting()
        self.waiting_since = time.monotonic()
        self._head_timer = self.loop.call_later(self.guard.head_seconds, self.close_idle,
                                                "no request head in time")

    def _stop_waiting(self):
        self.waiting_since = None
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None


def protocol_class(guard, max_header_bytes):
    """A `GuardedH11` class with its own `Guard` (one per server) and heads of at most
    ``max_header_bytes``."""
    return type("GuardedH11", (GuardedH11,), {"guard": guard,
                                              "max_header_bytes": max_header_bytes})
