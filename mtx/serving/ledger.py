"""What mtx-serve's queue holds, counted: requests and work (source subwords x beam) admitted
and not yet released (answered or abandoned), in all and per client, within the queue's limits.

The per-client share keeps one client (an address) from filling the queue for everyone. Behind
a proxy listed in ``access.trusted_proxies`` the address is the one the proxy forwards, so the
share is per user there too; from anyone else X-Forwarded-For is ignored, so a client cannot
get a fresh share per made-up address. No locking here: `mtx.serving.jobs.JobQueue` calls it
under its lock. `Stats` are the counters of the queue and its model thread (/health).
"""
import math
import time
from dataclasses import dataclass, field
from typing import Optional


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


@dataclass
class Stats:
    """The queue's counters (/health shows them but the last three) and the model thread's
    progress (`stalled`)."""
    jobs: int = 0          # jobs answered with a result
    failed: int = 0        # jobs answered with an exception
    abandoned: int = 0     # jobs whose callers gave up before they were done
    batches: int = 0       # run_batch calls
    largest_batch: int = 0  # most parts in one run_batch call
    running: int = 0       # parts in the batch the model is working on now
    busy_seconds: float = 0.0  # time spent in run_batch calls
    running_since: Optional[float] = None  # time.monotonic() the running batch started at
    progress_at: float = field(default_factory=time.monotonic)  # the model thread's last batch
                                # done, or the moment it took work after waiting for some
    idle: bool = True      # the model thread is waiting for work (it owes nothing)

    def stalled(self, now):
        """Seconds the model thread has owed work without finishing a batch (0 while idle)."""
        return 0.0 if self.idle else max(0.0, now - self.progress_at)

    def model_seconds(self, jobs):
        """The expected model time of ``jobs`` jobs (the mean model time of an answered job so
        far; 1 s without one), as whole seconds from 1 to 60: a refused client's Retry-After."""
        done = self.jobs + self.failed
        per_job = (self.busy_seconds / done if done else 0.0) or 1.0
        return max(1, min(60, math.ceil(per_job * jobs)))
