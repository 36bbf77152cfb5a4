"""The HTTP side of mtx-serve (FastAPI): routes, the body-size limit, and errors as JSON.

    GET  /           the page (page.html: one file, no build step, nothing from other hosts)
    GET  /health     liveness: {"status": "ok" | "stopping", "queued", "jobs", "failed", ...}
    GET  /ready      readiness: {"ready": true}, or 503 naming why not (stopping, queue full,
                     the model thread dead, a batch stuck)
    GET  /info       languages, parameters, heads per attention layer, checkpoint, precision
    GET  /heads      the run's head study, or {"available": false, "reason": ...}
    POST /translate  {"text": [...], "beam_size", "length_penalty", "nbest", "gates"}
                     -> {"translations": [...], "scores": [...], "nbest": [[{text, score}]]}
    POST /attention  {"text": "...", "beam_size", "length_penalty", "gates"}
                     -> {"translation", "score", "source", "target", "layers": [{..., weights}]}

Every error is ``{"error": "<one line naming the problem>"}`` with a 4xx status (413 for a body,
a list, a sentence or a request's work over the limits, 422 for a value that does not fit, 408
for a body that is too slow, 401/421 from `mtx.serving.access`), 503 with Retry-After when the
queue is full or the server is stopping, 500 for a bug (its traceback goes to the server's log
only).
"""
import asyncio
import base64
import hashlib
import json
import logging
import re
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from ..errors import MtxError
from .access import AccessCheck
from .bodies import AttentionBody, RequestError, TranslateBody, validation_message

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


def error(status, message, headers=None):
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class BodyCheck:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 before any route sees it (by
    its Content-Length or, streamed without one, as soon as it is over); a JSON body that does
    not parse (bad syntax, not UTF-8) gets 422 naming where; a body that has not arrived
    within ``seconds`` gets 408 (a slow client holds no connection for long). A body within the
    limit is read here and handed on whole (at most ``max_bytes`` held per request)."""

    def __init__(self, app, max_bytes, seconds):
        self.app, self.max_bytes, self.seconds = app, max_bytes, seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"0")
        body = None
        if not (declared.isdigit() and int(declared) > self.max_bytes):
            try:
                body = await asyncio.wait_for(self._read(receive), self.seconds)
            except asyncio.TimeoutError:
                return await error(408, f"the request body did not arrive within "
                                        f"{self.seconds:g} s (limits.body_seconds)")(
                    scope, receive, send)
        if body is None:  # over the limit, or the client went away
            return await error(413, f"the request body is over {self.max_bytes} bytes; send "
                                    f"fewer or shorter sentences per request")(scope, receive, send)
        problem = _json_problem(body, headers.get(b"content-type", b"application/json"))
        if problem:
            return await error(422, problem)(scope, receive, send)
        whole = {"type": "http.request", "body": body, "more_body": False}

        async def replay():
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()  # after the body: only a disconnect can come
        await self.app(scope, replay, send)

    async def _read(self, receive):
        """The whole body, or None when it goes over ``max_bytes`` (or the client leaves)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return None
            if not message.get("more_body"):
                return b"".join(chunks)


# The API's bodies nest 3 deep. Deeper ones are refused before they are parsed: how deep
# json.loads goes before a RecursionError differs between Pythons (3.13 parses 5,000 levels).
MAX_JSON_DEPTH = 32
_JSON_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_JSON_BRACKETS = re.compile(rb"[\[\]{}]")


def _nested_too_deeply(body):
    depth = 0
    for bracket in _JSON_BRACKETS.findall(_JSON_STRINGS.sub(b'""', body)):
        depth += 1 if bracket in b"[{" else -1
        if depth > MAX_JSON_DEPTH:
            return True
    return False


def _json_problem(body, content_type):
    """Why a JSON body does not parse, or None (also None for bodies that are not JSON)."""
    if not body or b"json" not in content_type.lower():
        return None
    if _nested_too_deeply(body):
        return "the body's JSON is nested too deeply"
    try:
        json.loads(body)
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        return f"the body is not valid JSON ({err})"[:300]
    except RecursionError:
        return "the body's JSON is nested too deeply"
    return None


async def client_gone(request):
    """Ends when the client of ``request`` disconnects (its body was read before)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


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
        log.error("internal error", exc_info=True)
        raise RequestError(f"internal error ({type(err).__name__}); this is a bug, please report "
                           f"it with the server's log", 500) from None


def create_app(service, shutdown_seconds, token=None, hosts=None):
    """The FastAPI app of a started `mtx.serving.service.Service`; when the server stops, the
    service answers what it has queued (within ``shutdown_seconds``, off the event loop) and
    stops its model thread. ``token``, ``hosts``: `mtx.serving.access`."""
    @asynccontextmanager
    async def lifespan(app):
        yield
        # after uvicorn has answered the requests in flight; the loop stays free meanwhile
        await asyncio.get_running_loop().run_in_executor(None, service.stop, shutdown_seconds)

    app = FastAPI(title="mtx-serve", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(BodyCheck, max_bytes=service.limits.max_body_bytes,
                       seconds=service.limits.body_seconds)
    app.add_middleware(AccessCheck, token=token, hosts=hosts)  # outermost: before any work
    add_error_handlers(app)
    add_routes(app, service)
    return app


def add_error_handlers(app):
    """Every error as ``{"error": "<one line>"}`` with its status (module docstring)."""
    @app.exception_handler(RequestError)
    async def request_error(request: Request, err: RequestError):
        return error(err.status, str(err), err.headers)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, err: Exception):
        log.error("internal error in %s %s", request.method, request.url.path,
                  exc_info=(type(err), err, err.__traceback__))
        return error(500, f"internal error ({type(err).__name__}); this is a bug, please report "
                          f"it with the server's log")

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, err: RequestValidationError):
        return error(422, validation_message(err.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        what = {404: "no such page", 405: "method not allowed"}.get(err.status_code, err.detail)
        return error(err.status_code, f"{what}: {request.method} {request.url.path} (the API: "
                                      f"GET /info, /health, /heads; POST /translate, /attention)",
                     getattr(err, "headers", None))


def add_routes(app, service):
    """The page and the API (module docstring), answered by ``service``."""
    html = page_html()
    policy = page_policy(html)

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(html, headers={"Content-Security-Policy": policy,
                                           "Cache-Control": "no-store"})

    @app.get("/health")
    async def health():
        return service.health()  # liveness: the process answers

    @app.get("/ready")
    async def ready():
        reason = service.not_ready()
        if reason:
            return error(503, f"not ready: {reason}",
                         {"Retry-After": str(service.jobs.retry_after())})
        return {"ready": True}

    @app.get("/info")
    async def info():
        return service.info

    @app.get("/heads")
    async def heads():
        return service.study

    @app.post("/translate")
    async def translate(body: TranslateBody, request: Request):
        return await answer(service.translate(body, lambda: client_gone(request)))

    @app.post("/attention")
    async def attention(body: AttentionBody, request: Request):  # JSON made in the model thread
        json_bytes = await answer(service.attention(body, lambda: client_gone(request)))
        return Response(json_bytes, media_type="application/json")
