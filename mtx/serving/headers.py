"""What a request's headers must say before anything else is done with it: that a body is JSON
in UTF-8, and that no other site's page sent a request that does work.

Browsers send some cross-site requests without asking the server first ("simple" requests: a
form, or a fetch with ``Content-Type: text/plain``), so a page anywhere could make a visitor's
browser queue work on a server on their loopback. Two checks stop that: a body must be declared
exactly ``application/json`` (a simple request cannot say so), and a request that does work is
refused when the browser says it came from another origin (``Origin``) or site
(``Sec-Fetch-Site``). Clients that are not browsers send neither header and are not affected.
"""
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
SAME_ORIGIN_SITES = (b"same-origin", b"none")  # "none": the user typed or bookmarked the URL


def values(scope, name):
    """Every value of the header ``name`` (lowercase bytes) of an ASGI scope."""
    return [value for key, value in scope["headers"] if key == name]


def json_media_type(content_types):
    """Whether ``content_types`` (the Content-Type headers' values) are one value that says
    exactly ``application/json``, with no parameter but ``charset=utf-8``. Type, subtype,
    parameter names and the charset are case-insensitive (RFC 9110, 8.3.1); a value may be
    quoted; empty parameters (``;;``) are allowed."""
    if len(content_types) != 1:
        return False
    media, *parameters = content_types[0].decode("latin-1").split(";")
    if media.strip(" \t").lower() != "application/json":
        return False
    for parameter in parameters:
        if not parameter.strip(" \t"):
            continue
        name, _, value = parameter.strip(" \t").partition("=")
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if name.lower() != "charset" or value.lower() != "utf-8":
            return False
    return True


def cross_site(scope):
    """Why the request came from another site's page (one line), or None: a Sec-Fetch-Site other
    than same-origin or none, or an Origin whose host and port are not the Host header's."""
    for site in values(scope, b"sec-fetch-site"):
        if site.strip().lower() not in SAME_ORIGIN_SITES:
            return f"Sec-Fetch-Site: {site[:40].decode('latin-1')}"
    hosts = values(scope, b"host")
    for origin in values(scope, b"origin"):
        origin = origin.decode("latin-1").strip()
        if len(hosts) != 1 or not same_origin(origin, hosts[0].decode("latin-1")):
            return f"Origin: {origin[:100]}"
    return None


def same_origin(origin, host):
    """Whether the Origin header ``origin`` ('http://127.0.0.1:8000') names the host and port of
    the Host header ``host`` ('127.0.0.1:8000'); a port left out is the scheme's default."""
    try:
        parts = urlsplit(origin)
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
        name = parts.hostname
    except ValueError:  # 'null', a port that is not a number
        return False
    if (parts.scheme not in DEFAULT_PORTS or not name or parts.username is not None
            or parts.path or parts.query or parts.fragment):
        return False
    return (name, port) == host_and_port(host, DEFAULT_PORTS[parts.scheme])


def host_and_port(host, default_port):
    """A Host header -> (lowercase name, port): '[::1]:8000' -> ('::1', 8000); without a port,
    ``default_port``; (None, None) when it is not a host[:port]."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else (None if rest else "")
    else:
        name, colon, port = host.rpartition(":")
        if not colon or ":" in name:  # no port, or an IPv6 address without brackets
            name, port = host, ""
    if port is None or not (port == "" or len(port) <= 5 and port.isascii() and port.isdigit()):
        return None, None
    return name, int(port) if port else default_port
