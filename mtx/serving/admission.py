"""Admission: which requests the service takes on, decided before their bodies are read.

- Heads: a request line and headers over ``limits.max_header_bytes`` get 431.

- Requests at once: at most ``limits.max_connections`` in the app (pipelined ones too: each is
  in the app from its head to its last byte written); more get 503 with Retry-After, as JSON.
  The probes (``Route.probe`` in `mtx.serving.routes`) are always answered: they cost nothing
  and an orchestrator must see a busy server as alive.
- The model's work (the routes that take a body): refused with 503 and Retry-After before the
  body is read, parsed or tokenized when the queue is full, the server is stopping or the model
  thread has died or is stuck (`Service.refusal`).
"""
from ..runs import faults
from .answers import json_answer
from .routes import route_of


class Admission:
    """ASGI middleware over the app of ``service`` (`mtx.serving.service.Service`)."""

    def __init__(self, app, service, max_requests, max_header_bytes):
        self.app, self.service, self.max_requests = app, service, max_requests
        self.max_header_bytes = max_header_bytes
        self.in_flight = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        size = (len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
                + sum(len(name) + len(value) + 4 for name, value in scope["headers"]))
        faults.point("request")  # MTX_KILL_AT=request:1:RAISE: a bug in the app (the tests)
        if size > self.max_header_bytes:  # h11 bounds only heads that arrive in pieces
            return await json_answer(431, f"the request line and headers are {size} bytes; this "
                                          f"server takes at most {self.max_header_bytes} "
                                          f"(limits.max_header_bytes)")(send)
        route = route_of(scope)
        if route is not None and route.probe:
            return await self.app(scope, receive, send)
        refusal = None
        if self.in_flight >= self.max_requests:
            refusal = (f"the server is answering {self.in_flight} requests already "
                       f"(limits.max_connections); try again shortly")
        elif route is not None and route.body:
            reason = self.service.refusal()
            refusal = reason and f"{reason}; try again later"
        if refusal:
            retry = str(self.service.jobs.retry_after()).encode()
            return await json_answer(503, refusal, [(b"retry-after", retry)])(send)
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
