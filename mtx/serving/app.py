"""The HTTP side of mtx-serve (FastAPI): routes, the body-size limit, and errors as JSON.

    GET  /           the page (page.html: one file, no build step, nothing from other hosts)
    GET  /health     {"status": "ok" | "stopping", "queued", "jobs", "failed", "batches", ...}
    GET  /info       languages, parameters, heads per attention layer, checkpoint, precision
    GET  /heads      the run's head study, or {"available": false, "reason": ...}
    POST /translate  {"text": [...], "beam_size", "length_penalty", "nbest", "gates"}
                     -> {"translations": [...], "scores": [...], "nbest": [[{text, score}]]}
    POST /attention  {"text": "...", "beam_size", "length_penalty", "gates"}
                     -> {"translation", "score", "source", "target", "layers": [{..., weights}]}

Every error is ``{"error": "<one line naming the problem>"}`` with a 4xx status (413 for a body,
a list or a sentence over the limits, 422 for a value that does not fit), 503 when the queue is
full or the server is stopping, 500 for a bug (its traceback goes to the server's log only).
"""
import json
import logging
from contextlib import asynccontextmanager
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException

from ..errors import MtxError
from .bodies import AttentionBody, RequestError, TranslateBody, validation_message

log = logging.getLogger(__name__)
# The page loads nothing from elsewhere (the machine may be offline); the browser enforces it.
PAGE_POLICY = ("default-src 'self'; script-src 'self' 'unsafe-inline'; "
               "style-src 'self' 'unsafe-inline'; img-src 'self' data:")


def error(status, message, headers=None):
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class BodyCheck:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 before any route sees it (by
    its Content-Length or, streamed without one, as soon as it is over); a JSON body that does
    not parse (bad syntax, not UTF-8) gets 422 naming where. A body within the limit is read
    here and handed on whole (at most ``max_bytes`` held per request)."""

    def __init__(self, app, max_bytes):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"0")
        body = None
        if not (declared.isdigit() and int(declared) > self.max_bytes):
            body = await self._read(receive)
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


def _json_problem(body, content_type):
    """Why a JSON body does not parse, or None (also None for bodies that are not JSON)."""
    if not body or b"json" not in content_type.lower():
        return None
    try:
        json.loads(body)
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        return f"the body is not valid JSON ({err})"[:300]
    except RecursionError:
        return "the body's JSON is nested too deeply"
    return None


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


def create_app(service, shutdown_seconds):
    """The FastAPI app of a started `mtx.serving.service.Service`; when the server stops, the
    service answers what it has queued (within ``shutdown_seconds``) and stops its worker."""
    @asynccontextmanager
    async def lifespan(app):
        yield
        service.stop(shutdown_seconds)  # after uvicorn has answered the requests in flight

    app = FastAPI(title="mtx-serve", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(BodyCheck, max_bytes=service.limits.max_body_bytes)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, err: RequestError):
        return error(err.status, str(err))

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, err: RequestValidationError):
        return error(422, validation_message(err.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        what = {404: "no such page", 405: "method not allowed"}.get(err.status_code, err.detail)
        return error(err.status_code, f"{what}: {request.method} {request.url.path} (the API: "
                                      f"GET /info, /health, /heads; POST /translate, /attention)",
                     getattr(err, "headers", None))

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(page_html(), headers={"Content-Security-Policy": PAGE_POLICY,
                                                  "Cache-Control": "no-store"})

    @app.get("/health")
    async def health():
        state = service.health()
        return JSONResponse(state, status_code=200 if state["status"] == "ok" else 503)

    @app.get("/info")
    async def info():
        return service.info

    @app.get("/heads")
    async def heads():
        return service.study

    @app.post("/translate")
    async def translate(body: TranslateBody):
        return await answer(service.translate(body))

    @app.post("/attention")
    async def attention(body: AttentionBody):
        return await answer(service.attention(body))

    return app
