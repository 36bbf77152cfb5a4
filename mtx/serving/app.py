"""The HTTP side of mtx-serve (FastAPI): the routes of `mtx.serving.routes` and their handlers,
the layers in front of them, and errors as JSON.

Every error is ``{"error": "<one line naming the problem>"}`` with a 4xx status (413 for a body,
a list, a sentence or a request's work over the limits, 422 for a value that does not fit, 415
for a body not sent as application/json, 408 for a body that is too slow, 401/403/421/429 from
`mtx.serving.access`), 503 with Retry-After when the server is busy or stopping
(`mtx.serving.admission`), 500 for a bug (its traceback goes to the server's log only, once).
A request passes, in order: `Outermost` (the security headers; a bug's last catch),
`HeadCheck` (the head's size and fields, the body's framing), `AccessCheck` (Host, other sites,
token: from the head alone; no scope but HTTP's passes), `Admission` (requests at once,
the queue), `BodyCheck` (the body of a route that takes one, read and parsed once); then the
route validates the parsed value.
"""
import asyncio
import base64
import hashlib
import logging
import re
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from ..errors import MtxError
from .access import AUTHORIZED, AccessCheck
from .admission import Admission, HeadCheck
from .answers import Outermost, RequestError, error, printable, printable_traceback
from .bodies import AttentionBody, TranslateBody, validation_message
from .intake import BodyCheck, parsed_body
from .routes import ROUTES, listing
from .tokens import client_key

log = logging.getLogger(__name__)


def page_policy(html):
    """The page's Content-Security-Policy: nothing from elsewhere (the machine may be offline),
    no framing, and only the page's own inline script (by its SHA-256) runs."""
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    hashes = " ".join("'sha256-%s'" % base64.b64encode(hashlib.sha256(s.encode()).digest())
                      .decode() for s in scripts) or "'none'"
    return (f"default-src 'self'; script-src {hashes}; "
            f"style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; "
            f"base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


async def client_gone(request):
    """Ends when the client of ``request`` disconnects (its body was read before)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def client_address(request):
    """Who the client is (behind a trusted proxy: the one it forwards), counted as
    `mtx.serving.tokens.client_key` counts it."""
    return client_key(request.client.host if request.client else None)


def page_html():
    return resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")


async def answer(work):
    """The route's result; a user error inside the model's work -> 422, a bug -> 500."""
    try:
        return await work
    except RequestError:
        raise
    except MtxError as err:
        raise RequestError(str(err)) from None
    except Exception as err:  # noqa: BLE001 (one JSON line for the client, the traceback logged)
        log.error("internal error\n%s", printable_traceback(err))
        raise RequestError(f"internal error ({type(err).__name__}); this is a bug, please report "
                           f"it with the server's log", 500) from None


def create_app(service, access, listen_host, open_connections=None):
    """The ASGI app of a started `mtx.serving.service.Service`: FastAPI with the layers in front
    (module docstring), inside `Outermost`. When the server stops, the service stops its model
    thread off the event loop, by the deadline its `close` set. ``access``: the settings of
    `mtx.serving.access`, for a server on ``listen_host``; ``open_connections()``: how many
    connections the server has open (/health)."""
    @asynccontextmanager
    async def lifespan(app):
        yield
        # after uvicorn has answered the requests in flight; the loop stays free meanwhile
        await asyncio.get_running_loop().run_in_executor(None, service.stop)

    app = FastAPI(title="mtx-serve", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    limits = service.limits
    app.add_middleware(BodyCheck, max_bytes=limits.max_body_bytes, seconds=limits.body_seconds,
                       stop_deadline=lambda: service.answer_by)
    app.add_middleware(Admission, service=service, max_requests=limits.max_connections,
                       client_share=limits.client_share)
    app.add_middleware(AccessCheck, access=access, listen_host=listen_host)  # before any work
    app.add_middleware(HeadCheck, max_bytes=limits.max_header_bytes,
                       max_fields=limits.max_headers)
    add_error_handlers(app)
    add_routes(app, service, open_connections)
    return Outermost(app)


def add_error_handlers(app):
    """Every error as ``{"error": "<one line>"}`` with its status (module docstring)."""
    @app.exception_handler(RequestError)
    async def request_error(request: Request, err: RequestError):
        return error(err.status, str(err), err.headers)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, err: Exception):
        log.error("internal error in %s %s\n%s", request.method, printable(request.scope["path"]),
                  printable_traceback(err))
        return error(500, f"internal error ({type(err).__name__}); this is a bug, please report "
                          f"it with the server's log")

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, err: RequestValidationError):
        return error(422, validation_message(err.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        what = {404: "no such page", 405: "method not allowed"}.get(err.status_code, err.detail)
        return error(err.status_code, f"{what}: {request.method} {request.url.path} (the API: "
                                      f"{listing()})", getattr(err, "headers", None))


def add_routes(app, service, open_connections=None):
    """The routes of `mtx.serving.routes`, each answered by the `Handlers` method its row
    names (the sign-in's by `mtx.serving.access`)."""
    handlers = Handlers(service, open_connections)
    for route in ROUTES:
        if route.handler is not None:
            app.add_api_route(route.path, getattr(handlers, route.handler),
                              methods=[route.method], include_in_schema=False)


class Handlers:
    """What the app's routes answer, by ``service``; ``open_connections()``: how many the
    server has open (None: not counted)."""

    def __init__(self, service, open_connections=None):
        self.service, self.open_connections = service, open_connections
        self.html = page_html()
        self.policy = page_policy(self.html)

    async def page(self, request: Request):
        return HTMLResponse(self.html, headers={"Content-Security-Policy": self.policy,
                                                "Cache-Control": "no-store"})

    async def health(self, request: Request):  # liveness: the process answers, its model works
        counters = request.scope.get(AUTHORIZED, False)
        status = self.service.health(counters=counters)
        if counters and self.open_connections is not None:
            status["connections"] = self.open_connections()
        return JSONResponse(status, status_code=503 if status["status"] == "failed" else 200)

    async def ready(self, request: Request):
        reason = self.service.not_ready()
        if reason:
            return error(503, f"not ready: {reason}",
                         {"Retry-After": str(self.service.jobs.retry_after())})
        return JSONResponse({"ready": True})

    async def translate(self, request: Request):
        body = parsed_body(request, TranslateBody, self.service.limits)
        return JSONResponse(await answer(self.service.translate(
            body, lambda: client_gone(request), client_address(request))))

    async def attention(self, request: Request):  # its JSON is made in the model thread
        body = parsed_body(request, AttentionBody, self.service.limits)
        json_bytes = await answer(self.service.attention(body, lambda: client_gone(request),
                                                         client_address(request)))
        return Response(json_bytes, media_type="application/json")

    async def info(self):
        return self.service.info

    async def heads(self):
        return self.service.study
