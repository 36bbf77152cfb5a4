"""Admission: which requests the service takes on, decided before their bodies are read.

- Heads (`HeadCheck`, first of all): a request line and headers over ``limits.max_header_bytes``
  or with over ``limits.max_headers`` fields get 431 (a head that arrives incomplete is bounded
  in `mtx.serving.connections`); a body framed two ways (Content-Length and Transfer-Encoding,
  a request-smuggling pattern: RFC 9112 6.1) gets 400 and the connection is closed.

- Requests at once: at most ``limits.max_connections`` in the app (pipelined ones too: each is
  in the app from its head to its last byte written), and of them at most a share
  (``limits.client_share``) from one client (an IPv4 address or IPv6 /64:
  `mtx.serving.tokens.client_key`), so that one client's slow bodies or slow reads cannot hold
  them all; more get 503 with Retry-After, as JSON.
  The probes (``Route.probe`` in `mtx.serving.routes`) are always answered: they cost nothing
  and an orchestrator must see a busy server as alive.
- The model's work (the routes that take a body): refused with 503 and Retry-After before the
  body is read, parsed or tokenized when the queue is full, the server is stopping or the model
  thread has died or is stuck (`Service.refusal`).
"""
import collections

from ..runs import faults
from .answers import json_answer
from .routes import route_of
from .tokens import client_key


class HeadCheck:
    """ASGI middleware: a request's head within the limits, its body framed one way (module
    docstring); before any other layer reads the headers."""

    def __init__(self, app, max_bytes, max_fields):
        self.app, self.max_bytes, self.max_fields = app, max_bytes, max_fields

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            refusal = head_refusal(scope["headers"], len(scope.get("raw_path") or b"")
                                   + len(scope.get("query_string") or b""), self.max_bytes,
                                   self.max_fields)
            if refusal is not None:
                return await refusal(send)
        await self.app(scope, receive, send)


def head_refusal(headers, target_bytes, max_bytes, max_fields):
    """The answer refusing a head of ``headers`` [(name, value)] and a target of
    ``target_bytes``, or None."""
    if len(headers) > max_fields:  # counted before any is looked at
        return json_answer(431, f"the request has {len(headers)} header fields; this server "
                                f"takes at most {max_fields} (limits.max_headers)")
    size = target_bytes + sum(len(name) + len(value) + 4 for name, value in headers)
    if size > max_bytes:
        return json_answer(431, f"the request line and headers are {size} bytes; this server "
                                f"takes at most {max_bytes} (limits.max_header_bytes)")
    names = {name for name, _ in headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        return json_answer(400, "the request has both Content-Length and Transfer-Encoding: "
                                "send one of them", [(b"connection", b"close")])
    return None


class Admission:
    """ASGI middleware over the app of ``service`` (`mtx.serving.service.Service`)."""

    def __init__(self, app, service, max_requests, client_share):
        self.app, self.service, self.max_requests = app, service, max_requests
        self.most_per_client = max(1, int(max_requests * client_share))
        self.in_flight = 0
        self.by_client = collections.Counter()  # client_key -> its requests in the app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        faults.point("request", scope["path"])  # MTX_KILL_AT=request:1:RAISE: a bug (tests)
        route = route_of(scope)
        if route is not None and route.probe:
            return await self.app(scope, receive, send)
        refusal, client = None, client_key(scope["client"][0] if scope.get("client") else None)
        if self.in_flight >= self.max_requests:
            refusal = (f"the server is answering {self.in_flight} requests already "
                       f"(limits.max_connections); try again shortly")
        elif self.by_client[client] >= self.most_per_client:
            refusal = (f"the server is answering {self.by_client[client]} requests from this "
                       f"client already, its share (limits.client_share); try again shortly")
        elif route is not None and route.body:
            reason = self.service.refusal()
            refusal = reason and f"{reason}; try again later"
        if refusal:
            retry = str(self.service.jobs.retry_after()).encode()
            return await json_answer(503, refusal, [(b"retry-after", retry)])(send)
        self.in_flight += 1
        self.by_client[client] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            self.by_client[client] -= 1
            if not self.by_client[client]:
                del self.by_client[client]
