"""What mtx-serve's queue holds, counted: requests and work (source subwords x beam) admitted
and not yet released (answered or abandoned), in all and per client, within the queue's limits.

The per-client share keeps one client (an address) from filling the queue for everyone. Behind
a proxy on this machine the address is the one the proxy forwards (uvicorn reads X-Forwarded-For
from 127.0.0.1), so the share is per user there too. No locking here: `mtx.serving.jobs.JobQueue`
calls it under its lock.
"""


class Busy(RuntimeError):
    """The queue is full, or the client's share of it; the request should be tried again
    later."""


class Ledger:
    """At most ``max_jobs`` requests and ``max_tokens`` work (None: no limit) held, and per
    client at most ``share`` of each (1: no per-client limit)."""

    def __init__(self, max_jobs, max_tokens=None, share=1.0):
        self.max_jobs, self.max_tokens, self.share = max_jobs, max_tokens, share
        self.jobs = 0     # requests held
        self.tokens = 0   # their work not yet run
        self._by_client = {}  # client -> [jobs, tokens]

    def admit(self, client, tokens, running=0):
        """Count a request of ``tokens`` from ``client`` (None: counted in all only); Busy when
        that is over a limit (``running``: requests held that are in the running batch, which
        do not count against ``max_jobs``)."""
        if self.jobs - running >= self.max_jobs:
            raise Busy(f"{self.max_jobs} requests are waiting already")
        if self.max_tokens and self.tokens + tokens > self.max_tokens:
            raise Busy(f"{self.tokens} subwords x beam of work are waiting already (at most "
                       f"{self.max_tokens})")
        held_jobs, held_tokens = self._by_client.get(client, (0, 0))
        if client is not None and self.share < 1:
            most_tokens = max(1, int(self.share * (self.max_tokens or 0)))
            if (held_jobs >= max(1, int(self.share * self.max_jobs))
                    or (self.max_tokens and held_tokens + tokens > most_tokens)):
                raise Busy(f"this client has {held_jobs} requests ({held_tokens} subwords x beam "
                           f"of work) waiting, its share of the queue (limits.client_share)")
        self.jobs, self.tokens = self.jobs + 1, self.tokens + tokens
        if client is not None:
            self._by_client[client] = [held_jobs + 1, held_tokens + tokens]

    def ran(self, client, tokens):
        """``tokens`` of a held request's work have run."""
        self.tokens -= tokens
        if client in self._by_client:
            self._by_client[client][1] -= tokens

    def release(self, client, tokens_left):
        """A held request is over (answered or abandoned) with ``tokens_left`` not run."""
        self.jobs, self.tokens = self.jobs - 1, self.tokens - tokens_left
        held = self._by_client.get(client)
        if held is not None:
            held[0], held[1] = held[0] - 1, held[1] - tokens_left
            if held[0] <= 0:
                del self._by_client[client]
