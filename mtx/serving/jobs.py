"""The jobs of mtx-serve's model thread (`mtx.serving.batcher`) and the queue they wait in.

A job carries a *key* (jobs with equal keys can share one model call: the same kind of work,
decoding settings and head gates) and one or more parts, each a payload and its size in tokens
(mtx-serve counts work: source subwords times the beam). `JobQueue` admits jobs within its limits
(requests and tokens of work waiting), keeps the ones the model thread has taken and answers
each: with its result, with the exception its batch raised, with `Abandoned` when its caller gave
up (``future.abandon()``: its parts not yet run are dropped, and its count and work leave the
queue's limits at once, not when the model thread reaches it), or with `Stopping` when it was not
run because the queue was stopped. A caller that cancelled its future before the job started is
skipped. No MXNet here.
"""
import concurrent.futures
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Hashable, List, Optional, Tuple

from ..runs import faults
from .ledger import Busy, Ledger, Stats  # noqa: F401  Busy: what submit raises, importable here


class Stopping(RuntimeError):
    """The queue is stopping and takes no more jobs."""


class Abandoned(RuntimeError):
    """The caller gave up on the job (its deadline passed, its client went away)."""


@dataclass
class Job:
    """One request: its parts (payload, tokens) run in turn, each in some batch; the future's
    result is the part's result for a one-part job (`JobQueue.submit`), else the list of them."""
    key: Hashable          # jobs with equal keys share one ``run_batch`` call
    parts: List[Tuple[Any, int]]  # (payload, tokens counted against ``max_batch_tokens``)
    single: bool = True
    client: Optional[Hashable] = None  # who sent it (an address), for the per-client share
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    results: List[Any] = field(default_factory=list)
    abandoned: bool = False
    released: bool = False  # its count and work no longer count against the queue's limits
    error: Optional[BaseException] = None  # what its batch raised

    @property
    def next_part(self):
        """(payload, tokens) of the part that runs next."""
        return self.parts[len(self.results)]

    @property
    def tokens_left(self):
        return sum(tokens for _, tokens in self.parts[len(self.results):])

    @property
    def over(self):
        """Done, failed or abandoned: nothing more of it runs."""
        return self.error is not None or self.abandoned or len(self.results) == len(self.parts)

    def answer(self, stats):
        """Give the future its result, or the job's error, or `Abandoned`; count it in
        ``stats``. A future already done (cancelled, or answered when abandoned) gets nothing."""
        if self.future.done():
            return
        if self.error is not None:
            stats.failed += 1
            self.future.set_exception(self.error)
        elif len(self.results) < len(self.parts):
            stats.abandoned += 1
            self.future.set_exception(Abandoned("the request was given up"))
        else:
            stats.jobs += 1
            self.future.set_result(self.results[0] if self.single else list(self.results))


_STOP = object()


class _Inbox:
    """The jobs submitted and not yet taken by the model thread, in order, then a stop marker
    (unbounded: `JobQueue` enforces the limits, and closing never waits)."""

    def __init__(self):
        self._queue = queue.Queue()

    def put(self, item):
        self._queue.put(item)

    def get(self, timeout=None):
        """The next job or `_STOP`; None when nothing came within ``timeout`` s."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def drain(self):
        """Every job still in it (the stop marker left out)."""
        jobs = []
        while (item := self.get(timeout=0)) is not None:
            if item is not _STOP:
                jobs.append(item)
        return jobs


class JobQueue:
    """Jobs waiting for the model thread and those it has taken (``active``, the thread's own),
    within the limits of its `Ledger`."""

    def __init__(self, max_queue: int, max_queue_tokens: Optional[int] = None,
                 client_share: float = 1.0):
        self.ledger = Ledger(max_queue, max_queue_tokens, client_share)
        self.stats = Stats()
        self.active = []  # jobs taken from the queue with parts left
        self._queue = _Inbox()
        self._lock = threading.Lock()  # the counts, and each future answered once
        self.stopping, self.stop_taken = False, False  # closed; the model thread saw it

    def queued(self):
        """Jobs waiting or partly done (not abandoned), less those in the running batch."""
        return max(0, self.ledger.jobs - self.stats.running)

    def queued_tokens(self):
        return self.ledger.tokens

    def retry_after(self):
        """Seconds a refused client should wait (`Stats.model_seconds` of the queue)."""
        return self.stats.model_seconds(self.queued() + 1)

    def submit(self, key, payload, tokens):
        """Queue a one-part job -> its Future (with ``abandon()``); raises Stopping or Busy."""
        return self._submit(Job(key, [(payload, tokens)]))

    def submit_parts(self, key, parts, client=None):
        """Queue a job of parts [(payload, tokens)] from ``client`` -> its Future (its result: the
        parts' results, in order); raises Stopping or Busy."""
        return self._submit(Job(key, list(parts), single=False, client=client))

    def _submit(self, job):
        tokens = job.tokens_left
        with self._lock:
            # MTX_KILL_AT=queue_locked:1:SIGTERM: a stop signal while the event loop holds the
            # lock (the crash tests: the signal handler must not take it)
            faults.point("queue_locked")
            if self.stopping:
                raise Stopping("the server is shutting down")
            self.ledger.admit(job.client, tokens, running=self.stats.running)
            job.future.abandon = lambda: self._abandon(job)
            self._queue.put(job)
        return job.future

    def _abandon(self, job):
        """The caller gave up: the parts not yet run are dropped (the one running finishes),
        its count and work leave the queue now, and its future gets `Abandoned`."""
        with self._lock:
            if job.released:
                return
            job.abandoned = True
            self._release(job)
            self.stats.abandoned += 1
            if not job.future.done():
                job.future.set_exception(Abandoned("the request was given up"))

    def _release(self, job):
        """(under the lock) The job's count and remaining work leave the queue's limits."""
        if not job.released:
            job.released = True
            self.ledger.release(job.client, job.tokens_left)

    def close(self):
        """Take no more jobs; the queued ones are still run. Does not wait."""
        with self._lock:
            if not self.stopping:
                self.stopping = True
                self._queue.put(_STOP)

    def take(self, timeout=None):
        """Make the next queued job active, waiting up to ``timeout`` s (None: until one comes);
        False when none came. Taking the stop marker sets ``stop_taken``."""
        item = self._queue.get(timeout)
        if item is None:
            return False
        if item is _STOP:
            self.stop_taken = True
            return True
        with self._lock:  # not abandoned meanwhile (its future answered then)
            started = not item.future.done() and item.future.set_running_or_notify_cancel()
        if started:
            self.active.append(item)
        else:
            self._settle(item)  # cancelled or abandoned before it started
        return True

    def ran(self, jobs, results):
        """The next parts of ``jobs`` ran and gave ``results``."""
        with self._lock:
            for job, result in zip(jobs, results):
                if not job.released:
                    self.ledger.ran(job.client, job.next_part[1])
                job.results.append(result)

    def answer_finished(self):
        """Answer the active jobs that are over (done, failed or abandoned); keep the others."""
        going_on = []
        for job in self.active:
            if job.over:
                self._settle(job)
            else:
                going_on.append(job)
        self.active = going_on

    def refuse(self, active_too):
        """Answer the jobs still queued (with ``active_too``, the active ones too: only once the
        model thread has ended) with Stopping: they will not run."""
        refused = []
        if active_too:
            refused, self.active = self.active, []
        for job in refused + self._queue.drain():
            if not job.future.done() and (job.future.running()
                                          or job.future.set_running_or_notify_cancel()):
                job.error = Stopping("the server stopped before this request ran")
                self._settle(job)

    def _settle(self, job):
        """The job leaves the queue (with the work of its parts not run) and is answered."""
        with self._lock:  # answered under the lock: an abandon cannot answer it meanwhile
            self._release(job)
            job.answer(self.stats)
