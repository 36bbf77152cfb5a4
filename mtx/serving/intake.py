"""A POST's body, read before the route that takes it sees it: bounded in bytes and in time,
declared and written as JSON in UTF-8, parsed once (`BodyCheck`); the routes validate the parsed
value (`parsed_body`). Only the routes that take a body (`mtx.serving.routes`) have theirs read:
the others answer without reading one, so a body that never comes holds nothing there. Every
check before the parse costs time linear in the body."""
import asyncio
import json
import re
import time

from pydantic import ValidationError

from .answers import RequestError, error
from .bodies import check_shape, validation_message
from .headers import json_media_type, values
from .routes import route_of

PARSED = "mtx.json"  # scope key: a POST's body, parsed
WAKE_SECONDS = 0.5   # a body being read looks at the shutdown deadline this often


class BodyCheck:
    """ASGI middleware for the bodies of the routes that take one: not declared as JSON
    (`mtx.serving.headers.json_media_type`) gets 415 (a cross-site form cannot send one without
    asking first); over ``max_bytes`` 413 before the route sees it (by its Content-Length or,
    streamed without one, as soon as it is over); not arrived within ``seconds`` 408 (a slow
    client holds no connection for long), or 503 when the server stops meanwhile
    (``stop_deadline()``: `mtx.serving.service.Service.answer_by`); not UTF-8 or not JSON 422
    naming why. A body within the limits is read and parsed here (once), and the parsed value
    handed on."""

    def __init__(self, app, max_bytes, seconds, stop_deadline=lambda: None):
        self.app, self.max_bytes, self.seconds = app, max_bytes, seconds
        self.stop_deadline = stop_deadline

    async def __call__(self, scope, receive, send):
        route = route_of(scope) if scope["type"] == "http" else None
        if route is None or not route.body:
            return await self.app(scope, receive, send)
        if not json_media_type(values(scope, b"content-type")):
            return await error(415, "send the body as JSON with Content-Type: application/json "
                                    "(charset=utf-8, if any)")(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")  # h11 checked its form
        body, refusal = None, None
        if not (declared.isdigit() and int(declared) > self.max_bytes):
            body, refusal = await self._read_in_time(receive)
        if refusal is None and body is None:  # over the limit, or the client went away
            refusal = error(413, f"the request body is over {self.max_bytes} bytes; send fewer "
                                 f"or shorter sentences per request")
        if refusal is None:
            parsed, problem = parse_json(body)
            refusal = problem and error(422, problem)
        if refusal is not None:
            return await refusal(scope, receive, send)
        scope[PARSED] = parsed
        await self.app(scope, replay(body, receive), send)

    async def _read_in_time(self, receive):
        """(the body or None, None), or (None, the 408 or 503 answer) when it has not arrived
        by its deadline or the server's stop."""
        reader = asyncio.ensure_future(self._read(receive))
        deadline = time.monotonic() + self.seconds
        try:
            while not reader.done():
                stop = self.stop_deadline()
                left = (deadline if stop is None else min(deadline, stop)) - time.monotonic()
                if left <= 0 and stop is not None and stop < deadline:
                    return None, error(503, "the server stopped before this request's body "
                                            "arrived; try again later", {"Retry-After": "1"})
                if left <= 0:
                    return None, error(408, f"the request body did not arrive within "
                                            f"{self.seconds:g} s (limits.body_seconds)")
                await asyncio.wait({reader}, timeout=min(left, WAKE_SECONDS))
            return reader.result(), None
        finally:
            reader.cancel()

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


def replay(body, receive):
    """An ASGI ``receive`` that gives the body already read, then what ``receive`` gives (after
    the body only a disconnect can come)."""
    whole = {"type": "http.request", "body": body, "more_body": False}

    async def receive_again():
        nonlocal whole
        if whole is not None:
            message, whole = whole, None
            return message
        return await receive()
    return receive_again


# The API's bodies nest 3 deep. Deeper ones are refused before they are parsed: how deep
# json.loads goes before a RecursionError differs between Pythons (3.13 parses 5,000 levels).
MAX_JSON_DEPTH = 32
# What nesting depends on: an escaped pair (which may be \"), a quote, a bracket. Each match is
# one or two bytes and never backtracks, so a scan is linear in the body.
_JSON_TOKENS = re.compile(rb'\\.|["\[\]{}]', re.S)


def nested_too_deeply(body):
    """Whether the JSON ``body`` nests arrays and objects over `MAX_JSON_DEPTH` deep (brackets
    inside strings do not count)."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return False
    depth, in_string = 0, False
    for token in _JSON_TOKENS.findall(body):
        if token == b'"':
            in_string = not in_string
        elif in_string or len(token) == 2:
            continue
        elif token in b"[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        else:
            depth -= 1
    return False


def parse_json(body):
    """(the parsed body, None), or (None, why it does not parse). Only UTF-8 is read: json.loads
    of bytes would take UTF-16 and UTF-32 too."""
    if not body:
        return None, "the body is empty: send a JSON object"
    if b"\0" in body:  # never in JSON text; every other byte of UTF-16/32 ASCII
        return None, "the body is not valid JSON in UTF-8 (it has NUL bytes: UTF-16 or UTF-32?)"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, (f"the body is not valid JSON in UTF-8 (byte 0x{body[err.start]:02x} at "
                      f"{err.start} is not UTF-8): send JSON in UTF-8")
    if nested_too_deeply(body):
        return None, "the body's JSON is nested too deeply"
    try:
        return json.loads(text), None
    except ValueError as err:  # JSONDecodeError; a number of over 4,300 digits
        return None, f"the body is not valid JSON ({err})"[:300]
    except RecursionError:
        return None, "the body's JSON is nested too deeply"


def parsed_body(request, model, limits):
    """The request's parsed body (`BodyCheck`) validated as pydantic ``model``
    (`mtx.serving.bodies`) within ``limits``; 413 or 422 naming the first problems otherwise."""
    value = request.scope.get(PARSED)
    check_shape(value, model, limits)
    try:
        return model.model_validate(value)
    except ValidationError as err:
        raise RequestError(validation_message(err.errors())) from None
