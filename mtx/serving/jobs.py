"""The jobs of mtx-serve's model thread (`mtx.serving.batcher`) and the queue they wait in.

A job carries a *key* (jobs with equal keys can share one model call: the same kind of work,
decoding settings and head gates) and one or more parts, each a payload and its size in tokens
(mtx-serve counts work: source subwords times the beam). `JobQueue` admits jobs within its limits
(requests and tokens of work waiting), keeps the ones the model thread has taken and answers
each: with its result, with the exception its batch raised, with `Abandoned` when its caller gave
up (``future.abandon()``: its parts not yet run are dropped), or with `Stopping` when it was not
run because the queue was stopped. A caller that cancelled its future before the job started is
skipped. No MXNet here.
"""
import concurrent.futures
import math
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Hashable, List, Optional, Tuple


class Busy(RuntimeError):
    """The queue is full; the request should be tried again later."""


class Stopping(RuntimeError):
    """The queue is stopping and takes no more jobs."""


class Abandoned(RuntimeError):
    """The caller gave up on the job (its deadline passed, its client went away)."""


@dataclass
class Stats:
    jobs: int = 0          # jobs answered with a result
    failed: int = 0        # jobs answered with an exception
    abandoned: int = 0     # jobs whose callers gave up before they were done
    batches: int = 0       # run_batch calls
    largest_batch: int = 0  # most parts in one run_batch call
    running: int = 0       # parts in the batch the model is working on now
    busy_seconds: float = 0.0  # time spent in run_batch calls
    running_since: Optional[float] = None  # time.monotonic() the running batch started at


@dataclass
class Job:
    """One request: its parts (payload, tokens) run in turn, each in some batch; the future's
    result is the part's result for a one-part job (`JobQueue.submit`), else the list of them."""
    key: Hashable          # jobs with equal keys share one ``run_batch`` call
    parts: List[Tuple[Any, int]]  # (payload, tokens counted against ``max_batch_tokens``)
    single: bool = True
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    results: List[Any] = field(default_factory=list)
    abandoned: bool = False
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

    def abandon(self):
        """The caller gave up: the parts not yet run are dropped (the one running finishes)."""
        self.abandoned = True

    def answer(self, stats):
        """Give the future its result, or the job's error, or `Abandoned`; count it in
        ``stats``. A cancelled future gets nothing."""
        if self.future.cancelled():
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


class JobQueue:
    """Jobs waiting for the model thread and those it has taken (``active``, the thread's own).
    It holds at most ``max_queue`` jobs and ``max_queue_tokens`` tokens of work left."""

    def __init__(self, max_queue: int, max_queue_tokens: Optional[int] = None):
        self.max_queue, self.max_queue_tokens = max_queue, max_queue_tokens
        self.stats = Stats()
        self.active = []  # jobs taken from the queue with parts left
        self._queue = queue.Queue()  # unbounded: `submit` enforces the limits, `close` never waits
        self._lock = threading.Lock()  # submit and close: no job lands behind the stop marker
        self._stopping = False
        self.stop_taken = False  # the model thread took the stop marker: nothing comes after it
        self._waiting_tokens = 0  # work of the jobs submitted and not answered

    @property
    def stopping(self):
        return self._stopping

    def queued(self):
        """Jobs waiting or partly done, less those in the batch running now."""
        return self._queue.qsize() + len(self.active) - self.stats.running

    def queued_tokens(self):
        return self._waiting_tokens

    def retry_after(self):
        """Seconds a refused client should wait: the queue's expected model time (the mean model
        time of an answered job so far; 1 s without one), 1 to 60."""
        done = self.stats.jobs + self.stats.failed
        per_job = (self.stats.busy_seconds / done if done else 0.0) or 1.0
        return max(1, min(60, math.ceil(per_job * (self.queued() + 1))))

    def submit(self, key, payload, tokens):
        """Queue a one-part job -> its concurrent Future (with ``abandon()``). Raises Stopping
        or Busy (the queue is full)."""
        return self._submit(Job(key, [(payload, tokens)]))

    def submit_parts(self, key, parts):
        """Queue a job of parts [(payload, tokens)] -> its Future, whose result is the list of
        the parts' results. Raises Stopping or Busy."""
        return self._submit(Job(key, list(parts), single=False))

    def _submit(self, job):
        tokens = job.tokens_left
        with self._lock:
            if self._stopping:
                raise Stopping("the server is shutting down")
            if self.queued() >= self.max_queue:
                raise Busy(f"{self.max_queue} requests are waiting already")
            if self.max_queue_tokens and self._waiting_tokens + tokens > self.max_queue_tokens:
                raise Busy(f"{self._waiting_tokens} subwords x beam of work are waiting already "
                           f"(at most {self.max_queue_tokens})")
            self._waiting_tokens += tokens
            job.future.abandon = job.abandon
            self._queue.put(job)
        return job.future

    def close(self):
        """Take no more jobs; the queued ones are still run. Does not wait."""
        with self._lock:
            if not self._stopping:
                self._stopping = True
                self._queue.put(_STOP)

    def take(self, timeout=None):
        """Make the next queued job active, waiting up to ``timeout`` s (None: until one comes);
        False when none came. Taking the stop marker sets ``stop_taken``."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return False
        if item is _STOP:
            self.stop_taken = True
        elif item.future.set_running_or_notify_cancel():
            self.active.append(item)
        else:
            self._settle(item)  # cancelled before it started
        return True

    def ran(self, jobs, results):
        """The next parts of ``jobs`` ran and gave ``results``."""
        with self._lock:
            self._waiting_tokens -= sum(job.next_part[1] for job in jobs)
        for job, result in zip(jobs, results):
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
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                refused.append(item)
        for job in refused:
            if not job.future.done() and (job.future.running()
                                          or job.future.set_running_or_notify_cancel()):
                job.error = Stopping("the server stopped before this request ran")
                self._settle(job)

    def _settle(self, job):
        """The job leaves the queue (with the work of its parts not run) and is answered."""
        with self._lock:
            self._waiting_tokens -= job.tokens_left
        job.answer(self.stats)
