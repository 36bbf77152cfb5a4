"""Who may use mtx-serve, decided from the request's head before any of its body is read.

- The Host header: answered only for the names in ``allowed_hosts`` (by default the loopback
  names and the address the server listens on), so a web page cannot reach a loopback server
  through DNS rebinding (its requests carry the attacker's host name). A server on every address
  (0.0.0.0, ::) without ``access.allowed_hosts`` answers any Host: it needs a token, and starts
  without one only when ``access.open_without_token=true`` says so (`check_bind`).
- Other sites' pages: a route that does work (`mtx.serving.routes`) refuses a request that the
  browser says another site sent (403, `mtx.serving.headers`).
- A bearer token (``access.token``, or the ``MTX_SERVE_TOKEN`` environment variable): when set,
  every route but the public ones (liveness, the page) needs ``Authorization: Bearer <token>`` or
  the page's session cookie (`mtx.serving.tokens`). The page gets that cookie from ``POST
  /login`` with the token in the Authorization header (never in a URL, where proxies and browser
  history keep it): HttpOnly, SameSite=Strict, ``Secure`` when the request came over HTTPS;
  ``POST /logout`` revokes it. Wrong tokens are throttled per client (429): an IPv4 address, or
  an IPv6 /64 (one machine can hold a whole /64: `mtx.serving.tokens.client_key`).
- Client addresses: the connection's, or behind a proxy listed in ``access.trusted_proxies`` the
  one it forwards (`mtx.serving.server`); from anyone else X-Forwarded-* are ignored. A server
  beyond loopback without ``trusted_proxies`` warns once, at the first such header: behind a
  proxy every client would be the proxy's address, and ten wrong tokens would lock all out.
- Scopes other than HTTP's (WebSocket) are refused: no route speaks them.
- Without the token, /health says only whether the service is alive (no traffic counters).
"""
import ipaddress
import logging
import re
from dataclasses import dataclass
from typing import List, Optional

from ..errors import ConfigError
from ..typecheck import setting
from .answers import json_answer, printable
from .headers import cross_site
from .routes import route_of
from .tokens import SESSION_SECONDS, Sessions, Throttle, token_problem

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
EVERY_ADDRESS = ("0.0.0.0", "::", "")
COOKIE = "mtx_session"
AUTHORIZED = "mtx.authorized"  # scope key: the request carries the token (or none is needed)
# what mtx-serve believes from a proxy in access.trusted_proxies (uvicorn's proxy headers), as
# docs/serving.md's nginx example sets them; Forwarded (RFC 7239) is not read, but says a proxy
PROXY_HEADERS = (b"x-forwarded-for", b"x-forwarded-proto")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Access:
    """mtx-serve's ``access.*``."""
    token: Optional[str] = setting(None, "a random token (or MTX_SERVE_TOKEN): every route but "
                                         "/health and the page then needs it (Bearer; the page "
                                         "logs in); null: none asked for", secret=True)
    allowed_hosts: Optional[List[str]] = setting(None, "the Host headers answered, or null: the "
                                                       "loopback names and host= (any for "
                                                       "0.0.0.0)")
    open_without_token: bool = setting(False, "true: serve beyond loopback without a token "
                                              "(anyone who reaches it may use it)")
    trusted_proxies: List[str] = setting([], "addresses (or networks) whose X-Forwarded-For/"
                                             "-Proto are believed, e.g. [127.0.0.1] behind a "
                                             "local proxy")
    session_key: Optional[str] = setting(None, "a random secret (or MTX_SERVE_SESSION_KEY) that "
                                               "signs the page's sign-in cookies, so they outlast "
                                               "a restart and pass between servers that share "
                                               "it; null: a random key per process",
                                         secret=True)

    def __post_init__(self):
        if self.token is not None and not re.fullmatch(r"[A-Za-z0-9._~+/=-]+", self.token):
            raise ConfigError("access.token has characters other than letters, digits and "
                              "._~+/=-: give a token such as secrets.token_urlsafe() makes")
        for name, secret in (("token", self.token), ("session_key", self.session_key)):
            if secret is not None and token_problem(secret, f"access.{name}"):
                raise ConfigError(token_problem(secret, f"access.{name}"))
        if self.session_key is not None and self.session_key == self.token:
            raise ConfigError("access.session_key is the token: give a secret of its own (a "
                              "cookie would otherwise allow guessing the token offline)")
        if self.allowed_hosts is not None and not self.allowed_hosts:
            raise ConfigError("access.allowed_hosts=[] answers no one: list host names, or null "
                              "for the loopback names")
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ConfigError(f"access.trusted_proxies: {proxy!r} is not an address or "
                                  f"network (e.g. 127.0.0.1, 10.0.0.0/8)") from None

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


class AccessCheck:
    """ASGI middleware: the Host allow-list, other sites, the sign-in and the token (module
    docstring), in that order; nothing of the body is read here."""

    def __init__(self, app, access, listen_host):
        self.app, self.hosts = app, access.hosts(listen_host)
        self.sessions = Sessions(access.token, access.session_key) if access.token else None
        self.throttle = Throttle()
        self.warn_forwarding = not is_loopback(listen_host) and not access.trusted_proxies

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":  # no route speaks anything but HTTP (WebSocket is off)
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})  # 403 before a handshake
            return None
        headers = dict(scope["headers"])
        if self.warn_forwarding and any(name in headers for name in (*PROXY_HEADERS, b"forwarded")):
            self.warn_forwarding = False
            log.warning("a request came through a proxy (X-Forwarded-For or the like, from %s) "
                        "and access.trusted_proxies is empty: every client behind it counts as "
                        "that one address (its wrong tokens lock them all out); list the "
                        "proxy in access.trusted_proxies", printable(client_of(scope)))
        route = route_of(scope)
        refusal = self._refusal(scope, headers, route)
        if refusal is not None:
            return await refusal(send)
        if route is not None and route.session:
            return await self._session(scope, headers, route)(send)
        authorized = self._authorized(scope, headers)
        public = route is not None and route.public
        if authorized is None and not public:  # too many wrong tokens from this address
            return await self._throttled(scope)(send)
        scope[AUTHORIZED] = bool(authorized)  # the public routes are answered all the same
        if not authorized and not public:
            return await json_answer(401, "this server needs its token: send Authorization: "
                                          "Bearer <token> (the page asks for it)",
                                     [(b"www-authenticate", b'Bearer realm="mtx-serve"')])(send)
        await self.app(scope, receive, send)

    def _refusal(self, scope, headers, route):
        """421 for a Host not served, 403 for another site's request to a route that does
        work; None when neither."""
        host = headers.get(b"host", b"").decode("latin-1")
        if self.hosts is not None and host_name(host) not in self.hosts:
            return json_answer(421, f"Host {host[:100]!r} is not served here: add it to "
                                    f"access.allowed_hosts")
        elsewhere = route is not None and route.work and cross_site(scope)
        if elsewhere:
            return json_answer(403, f"{scope['method']} {route.path} came from another site's "
                                    f"page ({elsewhere}): mtx-serve answers its own page and "
                                    f"clients that are not browsers (docs/serving.md)")
        return None

    def _authorized(self, scope, headers, cookie=True):
        """True with the token or (with ``cookie``) a session, or when none is needed; False
        without; None when a Bearer token comes from an address with too many wrong ones."""
        if self.sessions is None:
            return True
        given = bearer(headers)
        if given is None:
            return cookie and self.sessions.valid(cookie_value(headers))
        address = client_of(scope)
        if self.throttle.wait(address):
            return None
        if self.sessions.matches(given):
            return True
        self.throttle.wrong(address)
        return False

    def _session(self, scope, headers, route):
        """POST /login (the token in the Authorization header -> a session cookie) and POST
        /logout (the cookie revoked and cleared)."""
        if self.sessions is None:
            return json_answer(404, f"no such page: {route.path} (this server has no token, so "
                                    f"nothing to sign in to)")
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        if route.path == "/logout":
            self.sessions.revoke(cookie_value(headers))
            cookie = f"{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{secure}"
            return json_answer(200, {"signed_in": False}, [(b"set-cookie", cookie.encode())])
        authorized = self._authorized(scope, headers, cookie=False)
        if authorized is None:
            return self._throttled(scope)
        if not authorized:
            return json_answer(401, "the token is wrong: send Authorization: Bearer <token>")
        cookie = (f"{COOKIE}={self.sessions.new()}; HttpOnly; SameSite=Strict; Path=/; "
                  f"Max-Age={SESSION_SECONDS}{secure}")
        return json_answer(200, {"signed_in": True, "seconds": SESSION_SECONDS},
                           [(b"set-cookie", cookie.encode())])

    def _throttled(self, scope):
        wait = self.throttle.wait(client_of(scope))
        return json_answer(429, f"too many wrong tokens from this address: try again in {wait} s",
                           [(b"retry-after", str(wait).encode())])


def client_of(scope):
    """The client's address (behind a trusted proxy: the one it forwards), or None."""
    return scope["client"][0] if scope.get("client") else None


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
