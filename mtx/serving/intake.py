"""A POST's body, read before any route sees it: bounded in bytes and in time, sent as JSON,
parsed once (`BodyCheck`); the routes validate the parsed value (`parsed_body`)."""
import asyncio
import json
import re

from fastapi.responses import JSONResponse
from pydantic import ValidationError

from .bodies import RequestError, validation_message


def error(status, message):
    return JSONResponse({"error": message}, status_code=status)


PARSED = "mtx.json"  # scope key: a POST's body, parsed


class BodyCheck:
    """ASGI middleware for POST bodies: over ``max_bytes`` gets 413 before any route sees it (by
    its Content-Length or, streamed without one, as soon as it is over); not sent as
    application/json gets 415 (a cross-site form cannot post one without asking first); JSON
    that does not parse (bad syntax, not UTF-8) gets 422 naming where; a body that has not
    arrived within ``seconds`` gets 408 (a slow client holds no connection for long). A body
    within the limit is read and parsed here (once), and the parsed value handed on."""

    def __init__(self, app, max_bytes, seconds):
        self.app, self.max_bytes, self.seconds = app, max_bytes, seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if b"application/json" not in headers.get(b"content-type", b"").lower():
            return await error(415, "send the body as JSON with Content-Type: "
                                    "application/json")(scope, receive, send)
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
        parsed, problem = _parse_json(body)
        if problem:
            return await error(422, problem)(scope, receive, send)
        scope[PARSED] = parsed
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


def _parse_json(body):
    """(the parsed body, None), or (None, why it does not parse)."""
    if not body:
        return None, "the body is empty: send a JSON object"
    if _nested_too_deeply(body):
        return None, "the body's JSON is nested too deeply"
    try:
        return json.loads(body), None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        return None, f"the body is not valid JSON ({err})"[:300]
    except RecursionError:
        return None, "the body's JSON is nested too deeply"


def parsed_body(request, model):
    """The request's parsed body (`BodyCheck`) validated as pydantic ``model``; 422 naming the
    first problems otherwise."""
    try:
        return model.model_validate(request.scope.get(PARSED))
    except ValidationError as err:
        raise RequestError(validation_message(err.errors())) from None
