"""The model worker: one thread owns the model (MXNet is not thread-safe) and takes jobs from a
queue, batching the ones that arrive together.

A job carries a *key* (jobs with equal keys can share one model call: the same kind of work,
decoding settings and head gates), a payload and its size in source tokens. The worker takes
the first job waiting, then keeps taking jobs for up to ``max_wait`` seconds while the batch
stays within ``max_batch_tokens`` (a job that would overflow it opens the next batch), groups
the batch by key and calls ``run_batch(key, payloads) -> results`` once per group. Requests
that come while the model is busy wait in the queue, so under load each model call serves many
of them: that is where the throughput comes from.

Every submitted job is answered: with its result, with the exception its batch raised, or with
`Stopping` when it was never started because the worker was stopped. A caller that gave up
(its future cancelled) is skipped. No MXNet here: ``run_batch`` does the model's work.
"""
import concurrent.futures
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional

log = logging.getLogger(__name__)


class Busy(RuntimeError):
    """The queue is full; the request should be tried again later."""


class Stopping(RuntimeError):
    """The worker is stopping and takes no more jobs."""


@dataclass
class Job:
    key: Hashable          # jobs with equal keys share one ``run_batch`` call
    payload: Any
    tokens: int            # source tokens, counted against ``max_batch_tokens``
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


@dataclass
class Stats:
    jobs: int = 0          # jobs answered with a result
    failed: int = 0        # jobs answered with an exception
    batches: int = 0       # run_batch calls
    largest_batch: int = 0  # most jobs in one run_batch call
    running: int = 0       # jobs in the batch the model is working on now


_STOP = object()


class ModelWorker:
    """``run_batch(key, payloads) -> results`` (one per payload, in order) in one thread."""

    def __init__(self, run_batch: Callable, max_wait: float, max_batch_tokens: int,
                 max_queue: int, on_start: Optional[Callable] = None):
        self.run_batch, self.max_wait, self.max_batch_tokens = run_batch, max_wait, max_batch_tokens
        self.max_queue = max_queue
        self.on_start = on_start  # called first in the worker thread (warm-up, thread state)
        self.stats = Stats()
        self._queue = queue.Queue()  # unbounded: `submit` enforces max_queue, `close` never waits
        self._lock = threading.Lock()  # submit and close: no job lands behind the stop marker
        self._stopping = False
        self._carry = None  # a job taken that did not fit the last batch: first of the next
        self._ready = concurrent.futures.Future()  # on_start done (or its exception)
        self._thread = threading.Thread(target=self._loop, name="mtx-model-worker", daemon=True)

    def start(self):
        """Start the thread; returns once ``on_start`` is done (raises what it raised)."""
        self._thread.start()
        self._ready.result()
        return self

    @property
    def stopping(self):
        return self._stopping

    def queued(self):
        return self._queue.qsize()

    def submit(self, key, payload, tokens):
        """Queue a job -> its concurrent Future. Raises Stopping or Busy (the queue is full)."""
        job = Job(key, payload, tokens)
        with self._lock:
            if self._stopping:
                raise Stopping("the server is shutting down")
            if self._queue.qsize() >= self.max_queue:
                raise Busy(f"{self.max_queue} requests are waiting already")
            self._queue.put(job)
        return job.future

    def close(self):
        """Take no more jobs; the queued ones are still run. Does not wait."""
        with self._lock:
            if not self._stopping:
                self._stopping = True
                self._queue.put(_STOP)

    def stop(self, timeout=None):
        """`close`, then wait up to ``timeout`` s for the queued jobs and the thread to end;
        jobs still queued after that are answered with Stopping."""
        self.close()
        if self._thread.ident is not None:
            self._thread.join(timeout)
        self._refuse_left()

    # -- the worker thread ------------------------------------------------------------------
    def _loop(self):
        try:
            if self.on_start is not None:
                self.on_start()
        except BaseException as err:  # noqa: BLE001 (start() raises it in the caller)
            self._ready.set_exception(err)
            return
        self._ready.set_result(None)
        while True:
            first = self._carry if self._carry is not None else self._queue.get()
            self._carry = None
            if first is _STOP:
                return
            batch, stop_seen = self._collect(first)
            for key, jobs in _group(batch).items():
                self._run(key, jobs)
            if stop_seen:
                return

    def _collect(self, first):
        """The batch that starts with ``first``: (live jobs, whether the stop marker came)."""
        batch, tokens = [first], first.tokens
        deadline = time.monotonic() + self.max_wait
        while tokens < self.max_batch_tokens:
            try:
                job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is _STOP:
                return _live(batch), True
            if tokens + job.tokens > self.max_batch_tokens:
                self._carry = job
                break
            batch.append(job)
            tokens += job.tokens
        return _live(batch), False

    def _run(self, key, jobs):
        self.stats.running = len(jobs)
        try:
            results = self.run_batch(key, [job.payload for job in jobs])
            if len(results) != len(jobs):
                raise RuntimeError(f"run_batch gave {len(results)} results for {len(jobs)} jobs")
        except Exception as err:  # noqa: BLE001 (each caller gets it; the worker goes on)
            user_error = isinstance(err, ValueError)  # mtx.errors.MtxError is one
            log.log(logging.INFO if user_error else logging.ERROR, "a batch of %d request(s) "
                    "failed: %s", len(jobs), err, exc_info=not user_error)
            self.stats.failed += len(jobs)
            for job in jobs:
                job.future.set_exception(err)
            return
        finally:
            self.stats.running = 0
        self.stats.batches += 1
        self.stats.jobs += len(jobs)
        self.stats.largest_batch = max(self.stats.largest_batch, len(jobs))
        for job, result in zip(jobs, results):
            job.future.set_result(result)

    def _refuse_left(self):
        """After the thread ended: whatever is still queued is answered with Stopping."""
        done = not self._thread.is_alive()  # else the thread may still hold its carry
        left = [self._carry] if done and self._carry is not None else []
        while True:
            try:
                left.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for job in left:
            if job is not _STOP and job.future.set_running_or_notify_cancel():
                job.future.set_exception(Stopping("the server stopped before this request ran"))
        if not done:  # the thread is still in a batch: it ends after it, and a later stop()
            self._queue.put(_STOP)  # does not wait its whole timeout again


def _live(jobs):
    """The jobs whose callers still wait (marked running); cancelled ones are dropped."""
    return [job for job in jobs if job.future.set_running_or_notify_cancel()]


def _group(jobs):
    """{key: [jobs]} in order of first arrival."""
    groups = {}
    for job in jobs:
        groups.setdefault(job.key, []).append(job)
    return groups
