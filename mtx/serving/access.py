"""Who may use mtx-serve, and what every answer carries.

- The Host header: answered only for the names in ``allowed_hosts`` (by default the loopback
  names and the address the server listens on), so a web page cannot reach a loopback server
  through DNS rebinding (its requests carry the attacker's host name). A server on every address
  (0.0.0.0, ::) without ``access.allowed_hosts`` answers any Host: it needs a token, and starts
  without one only when ``access.open_without_token=true`` says so (`check_bind`).
- A bearer token (``access.token``, or the ``MTX_SERVE_TOKEN`` environment variable): when set,
  every route but liveness (GET /health) and the page itself (GET /, static) needs
  ``Authorization: Bearer <token>`` or the page's session cookie. The page gets that cookie from
  ``POST /login`` with the token in the Authorization header (never in a URL, where proxies and
  browser history keep it): HttpOnly, SameSite=Strict (other sites' pages cannot send it), an
  expiry of `SESSION_SECONDS`, and ``Secure`` when the request came over HTTPS. The cookie holds
  an expiry and its HMAC under the token, not the token.
- Without the token, /health says only whether the service is alive (no traffic counters).
- Every answer: ``X-Content-Type-Options: nosniff``, ``Referrer-Policy: no-referrer``,
  ``X-Frame-Options: DENY``.
"""
import hashlib
import hmac
import ipaddress
import json
import re
import time
from dataclasses import dataclass
from typing import List, Optional

from ..errors import ConfigError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
EVERY_ADDRESS = ("0.0.0.0", "::", "")
PUBLIC_PATHS = ("/health", "/")  # liveness and the static page: answered without the token
LOGIN_PATH = "/login"
COOKIE = "mtx_session"
SESSION_SECONDS = 12 * 3600
AUTHORIZED = "mtx.authorized"  # scope key: the request carries the token (or none is needed)
MIN_TOKEN_CHARS = 16
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
                    (b"x-frame-options", b"DENY")]


@dataclass(frozen=True)
class Access:
    """conf/serve.yaml ``access``."""
    token: Optional[str] = None               # None: no token asked for
    allowed_hosts: Optional[List[str]] = None  # None: loopback names and the listening address
    open_without_token: bool = False          # serve beyond loopback without a token (say so)

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


def check_bind(host, access):
    """A server reachable from other machines needs a token, unless the operator says so."""
    if not is_loopback(host) and not access.token and not access.open_without_token:
        raise ConfigError(f"host={host} is reachable from other machines and no token is set: "
                          f"set MTX_SERVE_TOKEN (or access.token), serve on 127.0.0.1 behind a "
                          f"proxy, or allow it with access.open_without_token=true")


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


def json_answer(status, message, headers=()):
    """An ASGI answer: ``{"error": message}`` (or ``message`` itself, a dict) with ``status``."""
    body = json.dumps(message if isinstance(message, dict) else {"error": message}).encode()

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
            return await json_answer(421, f"Host {host[:100]!r} is not served here: add it to "
                                          f"access.allowed_hosts")(send)
        authorized = not self.token or self._carries_token(headers)
        if scope["path"] == LOGIN_PATH and scope["method"] == "POST" and self.token:
            return await self._login(scope, headers)(send)
        if not authorized and scope["path"] not in PUBLIC_PATHS:
            return await json_answer(401, "this server needs its token: send Authorization: "
                                          "Bearer <token> (the page asks for it)",
                                     [(b"www-authenticate", b'Bearer realm="mtx-serve"')])(send)
        scope[AUTHORIZED] = authorized

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                message = {**message, "headers": headers + [
                    header for header in SECURITY_HEADERS if header[0] not in present]}
            await send(message)
        await self.app(scope, receive, send_with_headers)

    def _login(self, scope, headers):
        """POST /login with the token in the Authorization header -> the session cookie."""
        if not self._matches(bearer(headers)):
            return json_answer(401, "the token is wrong: send Authorization: Bearer <token>")
        expires = int(time.time()) + SESSION_SECONDS
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = (f"{COOKIE}={expires}.{self._sign(expires)}; HttpOnly; SameSite=Strict; "
                  f"Path=/; Max-Age={SESSION_SECONDS}{secure}").encode()
        return json_answer(200, {"signed_in": True, "seconds": SESSION_SECONDS}, [(b"set-cookie", cookie)])

    def _carries_token(self, headers):
        if self._matches(bearer(headers)):
            return True
        expires, _, signature = (cookie_value(headers) or "").partition(".")
        return (expires.isdigit() and int(expires) > time.time()
                and hmac.compare_digest(signature.encode(), self._sign(int(expires)).encode()))

    def _sign(self, expires):
        return hmac.new(self.token.encode(), b"session:%d" % expires, hashlib.sha256).hexdigest()

    def _matches(self, given):
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())


def bearer(headers):
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, value = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def cookie_value(headers):
    """The value of the page's session cookie, or None."""
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value
    return None
