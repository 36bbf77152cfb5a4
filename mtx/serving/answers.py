"""What every answer of mtx-serve carries, and the last line of defence around the app.

- Every answer: ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``,
  ``X-Frame-Options: DENY`` (`Outermost`, and `mtx.serving.connections` for the answers h11
  makes itself).
- An exception that reaches the top (Starlette raises again what its error handler answered,
  for the server to log) is not logged a second time, and if nothing was answered yet the client
  gets a JSON 500: never uvicorn's plain-text one, never two tracebacks for one bug.
- Text from a request goes into a log line only through `printable`, so a newline in a path
  (``%0A``) cannot forge a log line; a traceback only through `printable_traceback`, which
  escapes its exceptions' messages (they may quote a request) the same way.
"""
import json
import logging
import traceback

log = logging.getLogger(__name__)
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY")]
INTERNAL_ERROR = ("internal error; this is a bug, please report it with the server's log")


class RequestError(ValueError):
    """A request that cannot be served: ``status`` (4xx, or 503 when busy or stopping) and a
    one-line message, answered as `error` answers."""

    def __init__(self, message, status=422, headers=None):
        super().__init__(message)
        self.status, self.headers = status, headers


def error(status, message, headers=None):
    """The app's JSON error answer, ``{"error": message}`` with ``status`` (a Starlette response;
    the ASGI middleware before the app answers with `json_answer`)."""
    from starlette.responses import JSONResponse  # the serve extra: imported only to answer
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def json_answer(status, message, headers=()):
    """An ASGI answer: ``{"error": message}`` (or ``message`` itself, a dict) with ``status``."""
    body = json.dumps(message if isinstance(message, dict) else {"error": message}).encode()

    async def respond(send):
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            *SECURITY_HEADERS, *headers]})
        await send({"type": "http.response.body", "body": body})
    return respond


def printable(text, most=200):
    """``text`` from a request, fit for one log line: its first ``most`` characters, with
    control characters (newlines, escapes) written as Python escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text)[:most])


def printable_traceback(err):
    """``err``'s traceback (with the exceptions it came from) for the log: its frames as Python
    writes them, each exception's message one line by `printable`."""
    chain, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        chain.append(err)
        err = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    return "\n".join("Traceback (most recent call last):\n"
                     + "".join(traceback.format_tb(e.__traceback__))
                     + printable(f"{type(e).__qualname__}: {e}", most=1000)
                     for e in reversed(chain))


class Outermost:
    """The ASGI app uvicorn runs, around the FastAPI app (module docstring)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_with_headers(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                message = {**message, "headers": headers + [
                    header for header in SECURITY_HEADERS if header[0] not in present]}
            await send(message)
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as err:  # noqa: BLE001 (one JSON line for the client, one traceback)
            if started:  # the app's error handler answered it and logged its traceback
                return
            log.error("internal error in %s %s\n%s", scope["method"], printable(scope["path"]),
                      printable_traceback(err))
            await json_answer(500, INTERNAL_ERROR)(send_with_headers)
