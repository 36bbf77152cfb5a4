"""mtx-serve's token against guessers and odd sessions, over real sockets (the installed command
on a free loopback port, serving the toy run): session cookies that are not numbers, wrong tokens
throttled per client address (other loopback addresses are other clients), X-Forwarded-For
believed only from a trusted proxy, signing out, a weak token refused at start, and the sign-in
refused from another site's page."""
import hashlib
import hmac
import http.client
import os
import subprocess
from urllib.parse import urlparse

import pytest

import fastapi  # noqa: F401  the serve extra, which make install installs
from servers import MTX_SERVE, TOY_DECODE, exchange, request, served, start_server  # noqa: E402

from mtx.errors import ConfigError
from mtx.serving.access import Access
from mtx.serving.tokens import MAX_WRONG, Throttle, client_key

TOKEN = "t0ken-for-the-tests-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": "Bearer wrong-token-for-the-tests-000"}


@pytest.fixture(scope="module")
def guarded(toy_run):
    yield from served(toy_run, f"access.token={TOKEN}")


@pytest.fixture(scope="module")
def proxied(toy_run):
    """Behind a proxy on this machine (127.0.0.1), which forwards each client's address."""
    yield from served(toy_run, f"access.token={TOKEN}", "access.trusted_proxies=[127.0.0.1]",
                      clean_log=False)


def _login(url, headers, source=None):
    """POST /login -> (status, its Set-Cookie header)."""
    parts = urlparse(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60,
                                            source_address=(source, 0) if source else None)
    connection.request("POST", "/login", headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status, response.getheader("Set-Cookie")


@pytest.mark.parametrize("value", [
    "²²²²²²²²²²." + "0" * 64, "9" * 5000 + "." + "0" * 64, "١٢٣٤٥٦٧٨٩٠١.a." + "0" * 64,
    "99999999999", "", ".", "..", "1." + "é" * 64, "-1." + "0" * 16 + "." + "0" * 64])
def test_a_session_cookie_that_is_not_one_is_a_401(guarded, value):
    status, head, body = exchange(guarded.url, b"GET /info HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                               b"Cookie: mtx_session=" + value.encode() +
                                               b"\r\n\r\n")
    assert status == 401 and b"needs its token" in body
    assert b"application/json" in head and b"x-frame-options: deny" in head


def test_wrong_tokens_are_throttled_per_client_address(guarded):
    guesser, other = "127.0.0.3", "127.0.0.4"
    for _ in range(MAX_WRONG):
        assert request(guarded.url, "GET", "/info", headers=WRONG, source=guesser)[0] == 401
    status, head, body = exchange(guarded.url, b"GET /info HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                               b"Authorization: Bearer wrong\r\n\r\n",
                                  source=guesser)
    assert status == 429 and b"too many wrong tokens" in body and b"\r\nretry-after: " in head
    # the right token from that address is refused too: the refusal tells a guesser nothing
    assert request(guarded.url, "GET", "/info", headers=BEARER, source=guesser)[0] == 429
    assert _login(guarded.url, BEARER, source=guesser)[0] == 429
    assert request(guarded.url, "GET", "/health", headers=WRONG, source=guesser)[0] == 200
    # another client is not held back
    assert request(guarded.url, "GET", "/info", headers=BEARER, source=other)[0] == 200
    assert _login(guarded.url, WRONG, source=other)[0] == 401


def test_forwarded_addresses_are_ignored_from_an_address_not_trusted(guarded):
    """Each guess with a new X-Forwarded-For is still counted against the sender, and an
    X-Forwarded-Proto from it does not make the cookie Secure."""
    sender = "127.0.0.5"
    for i in range(MAX_WRONG):
        headers = {**WRONG, "X-Forwarded-For": f"10.0.0.{i}"}
        assert request(guarded.url, "GET", "/info", headers=headers, source=sender)[0] == 401
    headers = {**WRONG, "X-Forwarded-For": "10.0.1.1"}
    assert request(guarded.url, "GET", "/info", headers=headers, source=sender)[0] == 429
    status, cookie = _login(guarded.url, {**BEARER, "X-Forwarded-Proto": "https"})
    assert status == 200 and "Secure" not in cookie


def test_behind_a_trusted_proxy_each_forwarded_client_is_counted_apart(proxied):
    for _ in range(MAX_WRONG + 1):
        request(proxied.url, "GET", "/info", headers={**WRONG, "X-Forwarded-For": "10.0.0.1"})
    assert request(proxied.url, "GET", "/info",
                   headers={**BEARER, "X-Forwarded-For": "10.0.0.1"})[0] == 429
    assert request(proxied.url, "GET", "/info",
                   headers={**BEARER, "X-Forwarded-For": "10.0.0.2"})[0] == 200
    # behind HTTPS (X-Forwarded-Proto from the proxy): the cookie is Secure
    status, cookie = _login(proxied.url, {**BEARER, "X-Forwarded-Proto": "https"})
    assert status == 200 and "; Secure" in cookie
    # an address that is not the proxy forwards nothing
    for i in range(MAX_WRONG):
        request(proxied.url, "GET", "/info", headers={**WRONG, "X-Forwarded-For": f"10.1.0.{i}"},
                source="127.0.0.6")
    assert request(proxied.url, "GET", "/info", headers={**BEARER, "X-Forwarded-For": "10.2.0.1"},
                   source="127.0.0.6")[0] == 429


def test_an_ipv6_client_is_counted_by_its_64(proxied):
    """A client that picks a new address of its /64 for each guess is still one client."""
    for i in range(MAX_WRONG):
        request(proxied.url, "GET", "/info", headers={**WRONG, "X-Forwarded-For": f"2001:db8::{i}"})
    assert request(proxied.url, "GET", "/info",
                   headers={**BEARER, "X-Forwarded-For": "2001:db8::ffff:1"})[0] == 429
    assert request(proxied.url, "GET", "/info",
                   headers={**BEARER, "X-Forwarded-For": "2001:db8:0:1::1"})[0] == 200


def test_clients_are_ipv4_addresses_and_ipv6_64s():
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff:ffff:ffff:ffff") == "2001:db8::/64"
    assert client_key("2001:db8:0:1::1") == "2001:db8:0:1::/64"
    assert client_key("10.0.0.1") == client_key("::ffff:10.0.0.1") == "10.0.0.1"
    throttle = Throttle(most=2)
    throttle.wrong("2001:db8::1")
    throttle.wrong("2001:db8::2")
    assert throttle.wait("2001:db8::3") > 0 and throttle.wait("2001:db8:0:1::3") == 0


def test_a_session_cookie_says_nothing_about_the_token(guarded):
    """Its HMAC is under a key of the server's own: a captured cookie allows no offline guessing
    of the token."""
    status, cookie = _login(guarded.url, BEARER)
    value = cookie.split(";")[0].partition("=")[2]
    expires, nonce, signature = value.split(".")
    under_token = hmac.new(TOKEN.encode(), b"session:%d:%s" % (int(expires), nonce.encode()),
                           hashlib.sha256).hexdigest()
    assert status == 200 and len(signature) == 64 and signature != under_token
    assert request(guarded.url, "GET", "/info", headers={"Cookie": f"mtx_session={value}"})[0] == 200


def test_sign_ins_pass_between_servers_that_share_a_session_key_and_no_others(guarded, toy_run):
    key = "s3ssion-key-for-the-tests-0123456789"
    first, second = (start_server(toy_run, f"access.token={TOKEN}", f"access.session_key={key}")
                     for _ in range(2))
    try:
        cookie = {"Cookie": _login(first.url, BEARER)[1].split(";")[0]}
        assert request(second.url, "GET", "/info", headers=cookie)[0] == 200
        # a server with the same token and its own random key signed this one
        elsewhere = {"Cookie": _login(guarded.url, BEARER)[1].split(";")[0]}
        assert request(guarded.url, "GET", "/info", headers=elsewhere)[0] == 200
        assert request(first.url, "GET", "/info", headers=elsewhere)[0] == 401
    finally:
        assert first.stop() == 0 and second.stop() == 0
    assert not any(key in line for line in first.log + second.log)


def test_a_proxy_header_at_a_server_beyond_loopback_without_trusted_proxies_warns_once(toy_run):
    process = start_server(toy_run, "host=0.0.0.0", f"access.token={TOKEN}")
    try:
        assert request(process.url, "GET", "/health")[0] == 200
        assert not any("access.trusted_proxies" in line for line in process.log)
        for _ in range(3):
            request(process.url, "GET", "/info", headers={**BEARER, "X-Forwarded-For": "10.9.9.9"})
    finally:
        assert process.stop() == 0
    warnings = [line for line in process.log if "access.trusted_proxies is empty" in line]
    assert len(warnings) == 1 and warnings[0].startswith("[WARNING] a request came through a "
                                                         "proxy"), process.log


def test_signing_out_revokes_the_session(guarded):
    status, cookie = _login(guarded.url, BEARER)
    session = {"Cookie": cookie.split(";")[0]}
    assert request(guarded.url, "GET", "/info", headers=session)[0] == 200
    parts = urlparse(guarded.url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    connection.request("POST", "/logout", headers=session)
    response = connection.getresponse()
    response.read()
    connection.close()
    cleared = response.getheader("Set-Cookie")
    assert response.status == 200 and "mtx_session=;" in cleared and "Max-Age=0" in cleared
    assert request(guarded.url, "GET", "/info", headers=session)[0] == 401  # even if kept
    status, cookie = _login(guarded.url, BEARER)  # a new sign-in works
    assert request(guarded.url, "GET", "/info", headers={"Cookie": cookie.split(";")[0]})[0] == 200


def test_signing_in_from_another_site_s_page_is_refused(guarded):
    status, _ = _login(guarded.url, {**BEARER, "Origin": "http://evil.example"})
    assert status == 403
    status, _ = _login(guarded.url, {**BEARER, "Origin": guarded.url,
                                     "Sec-Fetch-Site": "same-origin"})
    assert status == 200


@pytest.mark.parametrize("token", ["a" * 24, "0123456789abcdefghij", "abababababababababab"])
def test_a_token_easy_to_guess_is_refused_at_start_in_one_line(toy_run, token):
    env = {**os.environ, "MTX_SERVE_TOKEN": token}
    done = subprocess.run([MTX_SERVE, f"ckpt={toy_run}", TOY_DECODE, "port=0"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "access.token is too easy to guess" in done.stderr.strip().splitlines()[-1]


def test_access_settings_refuse_weak_tokens_and_proxies_that_are_not_addresses():
    with pytest.raises(ConfigError, match="access.token is too easy to guess"):
        Access(token="x" * 40)
    with pytest.raises(ConfigError, match="access.session_key is too easy to guess"):
        Access(token=TOKEN, session_key="y" * 40)
    with pytest.raises(ConfigError, match="access.session_key is the token"):
        Access(token=TOKEN, session_key=TOKEN)
    with pytest.raises(ConfigError, match="access.trusted_proxies: 'proxy.local' is not an"):
        Access(trusted_proxies=["127.0.0.1", "proxy.local"])
    assert Access(trusted_proxies=["10.0.0.0/8", "::1"]).trusted_proxies == ["10.0.0.0/8", "::1"]
