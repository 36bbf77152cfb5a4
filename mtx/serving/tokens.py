"""The token of mtx-serve and what it signs: its strength, the page's session cookies, and the
throttle of wrong tokens.

- A token must be hard to guess: at least `MIN_TOKEN_CHARS` characters and about
  `MIN_TOKEN_BITS` bits by the variety of its characters (`token_bits`), so a repeated
  character or a run such as '0123456789abcdefghij' is refused; ``secrets.token_urlsafe()`` has
  about 190 by that count.
- A session cookie is ``<expiry>.<nonce>.<HMAC of both>``, parsed strictly (ASCII digits,
  lowercase hex, fixed lengths): anything else is no session, never an error. The HMAC's key is
  never the token, so a captured cookie tells nothing about it (no offline guessing): it is
  ``access.session_key`` when set (cookies then outlast a restart and pass between servers that
  share it), else random, made when the server starts (a restart signs every page out).
  Signing out revokes its nonce until its expiry.
- Wrong tokens are counted per client (`client_key`: an IPv4 address, an IPv6 /64): past
  `MAX_WRONG` in `WRONG_WINDOW` seconds, every token from that client is refused (429) until the
  window ends, the right one too, so the refusal tells a guesser nothing.
"""
import collections
import hashlib
import hmac
import ipaddress
import math
import re
import secrets
import time

MIN_TOKEN_CHARS = 16
MIN_TOKEN_BITS = 72
SESSION_SECONDS = 12 * 3600
MAX_REVOKED = 65536  # sessions signed out and not yet expired, kept; the oldest go first
MAX_WRONG, WRONG_WINDOW = 10, 60.0
MAX_CLIENTS = 65536  # addresses whose wrong tokens are counted at once
_COOKIE = re.compile(r"([0-9]{10,12})\.([0-9a-f]{16})\.([0-9a-f]{64})")


def token_bits(token):
    """The bits of ``token`` by the variety of its characters: its length times the entropy of
    its characters' frequencies, or that of the steps between neighbours if less (so that a
    run such as 'abcdefghijklmnopqrst' counts as little as a repeated character)."""
    steps = [ord(b) - ord(a) for a, b in zip(token, token[1:])]
    return min(_bits(token), _bits(steps))


def _bits(items):
    counts = collections.Counter(items)
    return max(0.0, -sum(n * math.log2(n / len(items)) for n in counts.values()))


def token_problem(token, name="access.token"):
    """Why ``token`` (the setting ``name``) is too easy to guess (one line), or None."""
    hint = "e.g. python -c 'import secrets; print(secrets.token_urlsafe())'"
    if len(token) < MIN_TOKEN_CHARS:
        return f"{name} is {len(token)} characters: give at least {MIN_TOKEN_CHARS} ({hint})"
    bits = token_bits(token)
    if bits < MIN_TOKEN_BITS:
        return (f"{name} is too easy to guess (about {bits:.0f} bits by the variety of its "
                f"characters; at least {MIN_TOKEN_BITS}): give a random one ({hint})")
    return None


class Sessions:
    """The token, and the session cookies that stand for it (module docstring)."""

    def __init__(self, token, key=None):
        self._token = token.encode()
        # access.session_key, or this process's own, never written anywhere
        self._key = secrets.token_bytes(32) if key is None else key.encode()
        self._revoked = collections.OrderedDict()  # nonce -> expiry

    def matches(self, given):
        """Whether ``given`` (a Bearer token, or None) is the token."""
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    def new(self):
        """A new session cookie's value."""
        expires, nonce = int(time.time()) + SESSION_SECONDS, secrets.token_hex(8)
        return f"{expires}.{nonce}.{self._sign(expires, nonce)}"

    def valid(self, value):
        """Whether ``value`` is a session cookie this process signed, not expired nor
        revoked."""
        found = _COOKIE.fullmatch(value or "")
        if not found:
            return False
        expires, nonce, signature = int(found[1]), found[2], found[3]
        return (expires > time.time() and nonce not in self._revoked
                and hmac.compare_digest(signature, self._sign(expires, nonce)))

    def revoke(self, value):
        """Sign out the session ``value`` (if it is valid): it is refused from now on."""
        if self.valid(value):
            expires, nonce, _ = value.split(".")
            now = time.time()
            for old, until in list(self._revoked.items()):
                if until <= now:
                    del self._revoked[old]
            self._revoked[nonce] = int(expires)
            while len(self._revoked) > MAX_REVOKED:
                self._revoked.popitem(last=False)

    def _sign(self, expires, nonce):
        return hmac.new(self._key, b"session:%d:%s" % (expires, nonce.encode()),
                        hashlib.sha256).hexdigest()


def client_key(address):
    """What a client is counted as: an IPv4 address as it is, an IPv6 one as its /64 (what its
    network gives one machine, which may pick any address in it); anything else as it is."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 4:
        return str(ip)
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))


class Throttle:
    """Wrong tokens per client (module docstring); addresses are counted by `client_key`."""

    def __init__(self, most=MAX_WRONG, window=WRONG_WINDOW):
        self.most, self.window = most, window
        self._wrong = collections.OrderedDict()  # address -> [window start, wrong tokens]

    def wait(self, address):
        """Seconds until ``address`` may send a token again (0: now)."""
        start, wrong = self._wrong.get(client_key(address), (0.0, 0))
        left = start + self.window - time.monotonic()
        return math.ceil(left) if wrong >= self.most and left > 0 else 0

    def wrong(self, address):
        """Count a wrong token from ``address``."""
        address, now = client_key(address), time.monotonic()
        entry = self._wrong.get(address)
        if entry is None or now - entry[0] >= self.window:
            self._wrong.pop(address, None)
            entry = self._wrong[address] = [now, 0]
        entry[1] += 1
        while len(self._wrong) > MAX_CLIENTS:  # the oldest windows go first
            self._wrong.popitem(last=False)
