"""Who may use mtx-serve, and what every answer carries.

- The Host header: answered only for the names in ``allowed_hosts`` (by default the loopback
  names and the address the server listens on), so a web page cannot reach a loopback server
  through DNS rebinding (its requests carry the attacker's host name). A server on every address
  (0.0.0.0, ::) without ``access.allowed_hosts`` answers any Host.
- A bearer token (``access.token``, or the ``MTX_SERVE_TOKEN`` environment variable): when set,
  every route but liveness (GET /health) needs ``Authorization: Bearer <token>`` or the cookie
  the page gets from ``GET /?token=<token>`` (HttpOnly, SameSite=Strict: other sites' pages
  cannot send it).
- Every answer: ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``,
  ``X-Frame-Options: DENY``.
"""
import hmac
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import List, Optional
from urllib.parse import parse_qs

from ..errors import ConfigError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
EVERY_ADDRESS = ("0.0.0.0", "::", "")
PUBLIC_PATHS = ("/health",)  # liveness: answered without the token
COOKIE = "mtx_token"
MIN_TOKEN_CHARS = 16
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY")]


@dataclass(frozen=True)
class Access:
    """conf/serve.yaml ``access``."""
    token: Optional[str] = None               # None: no token asked for
    allowed_hosts: Optional[List[str]] = None  # None: loopback names and the listening address

    def __post_init__(self):
        if self.token is not None and not re.fullmatch(r"[A-Za-z0-9._~+/=-]+", self.token):
            raise ConfigError("access.token has characters other than letters, digits and "
                              "._~+/=-: give a token such as secrets.token_urlsafe() makes")
        if self.token is not None and len(self.token) < MIN_TOKEN_CHARS:
            raise ConfigError(f"access.token is {len(self.token)} characters: give at least "
                              f"{MIN_TOKEN_CHARS} (e.g. python -c 'import secrets; "
                              f"print(secrets.token_urlsafe())')")
        if self.allowed_hosts is not None and not self.allowed_hosts:
            raise ConfigError("access.allowed_hosts=[] answers no one: list host names, or null "
                              "for the loopback names")

    def hosts(self, listen_host):
        """The Host names answered (lowercase, no port), or None for any."""
        if self.allowed_hosts is not None:
            return {host_name(h) for h in self.allowed_hosts}
        if listen_host in EVERY_ADDRESS:
            return None
        return {*LOOPBACK_NAMES, host_name(listen_host)}


def is_loopback(host):
    """Whether ``host`` (an address or name) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header):
    """A Host header ('127.0.0.1:8000', '[::1]:8000', 'Example.org') -> the name, lowercase."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    name, colon, port = header.rpartition(":")
    return name if colon and port.isdigit() and ":" not in name else header


def _json(status, message, headers=()):
    """An ASGI answer: ``{"error": message}`` with ``status``."""
    body = json.dumps({"error": message}).encode()

    async def respond(send):
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            *SECURITY_HEADERS, *headers]})
        await send({"type": "http.response.body", "body": body})
    return respond


class AccessCheck:
    """ASGI middleware: the Host allow-list and the token (module docstring), then the
    security headers on every answer."""

    def __init__(self, app, token, hosts):
        self.app, self.token, self.hosts = app, token, hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        if self.hosts is not None and host_name(host) not in self.hosts:
            return await _json(421, f"Host {host!r} is not served here: use one of "
                                    f"{', '.join(sorted(self.hosts))}, or add it to "
                                    f"access.allowed_hosts")(send)
        if self.token and scope["path"] not in PUBLIC_PATHS:
            refused = self._refusal(scope, headers)
            if refused:
                return await refused(send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []),
                                                  *SECURITY_HEADERS]}
            await send(message)
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope, headers):
        """None when the request carries the token; else the answer (401, or the page's
        redirect that sets the cookie)."""
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if scope["path"] == "/" and "token" in query:
            if self._matches(query["token"][0]):
                cookie = (f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/").encode()
                return _json(303, "signed in; the page is at /",
                             [(b"location", b"/"), (b"set-cookie", cookie)])
            return _json(401, "the token is wrong")
        if self._matches(bearer(headers) or cookie_token(headers)):
            return None
        return _json(401, "this server needs its token: send Authorization: Bearer <token> "
                          "(the page: open /?token=<token>)",
                     [(b"www-authenticate", b'Bearer realm="mtx-serve"')])

    def _matches(self, given):
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())


def bearer(headers):
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, value = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def cookie_token(headers):
    """The token of the page's cookie, or None."""
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return None
