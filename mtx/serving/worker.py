"""The model worker: one thread owns the model (MXNet is not thread-safe) and takes jobs from a
queue, batching the ones that arrive together.

A job carries a *key* (jobs with equal keys can share one model call: the same kind of work,
decoding settings and head gates) and one or more parts, each a payload and its size in tokens
(mtx-serve counts work: source subwords times the beam). Each round the worker takes what is
queued (waiting up to ``max_wait`` seconds for more while the batch has room), puts the next part
of every job that has parts left into the batch, least served first, while it stays within
``max_batch_tokens``, groups the batch by key and calls ``run_batch(key, payloads) -> results``
once per group. Requests that come while the model is busy wait in the queue, so under load each
model call serves many of them: that is where the throughput comes from; and a request of many
parts shares every round with those that came after it instead of holding the model to itself.

Every submitted job is answered: with its result, with the exception its batch raised, with
`Abandoned` when its caller gave up (``future.abandon()``: its parts not yet run are dropped), or
with `Stopping` when it was not run because the worker was stopped. A caller that cancelled its
future before the job started is skipped. No MXNet here: ``run_batch`` does the model's work.
"""
import concurrent.futures
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, List, Optional, Tuple

log = logging.getLogger(__name__)


class Busy(RuntimeError):
    """The queue is full; the request should be tried again later."""


class Stopping(RuntimeError):
    """The worker is stopping and takes no more jobs."""


class Abandoned(RuntimeError):
    """The caller gave up on the job (its deadline passed, its client went away)."""


@dataclass
class Job:
    """One request: its parts (payload, tokens) run in turn, each in some batch; the future's
    result is the part's result for a one-part job (`submit`), else the list of them."""
    key: Hashable          # jobs with equal keys share one ``run_batch`` call
    parts: List[Tuple[Any, int]]  # (payload, tokens counted against ``max_batch_tokens``)
    single: bool = True
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    results: List[Any] = field(default_factory=list)
    abandoned: bool = False
    error: Optional[BaseException] = None  # what its batch raised

    @property
    def tokens_left(self):
        return sum(tokens for _, tokens in self.parts[len(self.results):])

    def abandon(self):
        """The caller gave up: the parts not yet run are dropped (the one running finishes)."""
        self.abandoned = True


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


_STOP = object()


class ModelWorker:
    """``run_batch(key, payloads) -> results`` (one per payload, in order) in one thread.

    Jobs are taken in turns: every batch takes the next part of each job that has parts left,
    the least served first, while the batch stays within ``max_batch_tokens``, so a request of
    many parts delays a one-part request that arrives after it by about one batch, not by its
    whole work.
    The queue holds at most ``max_queue`` jobs and ``max_queue_tokens`` tokens of work left."""

    def __init__(self, run_batch: Callable, max_wait: float, max_batch_tokens: int,
                 max_queue: int, on_start: Optional[Callable] = None,
                 max_queue_tokens: Optional[int] = None):
        self.run_batch, self.max_wait, self.max_batch_tokens = run_batch, max_wait, max_batch_tokens
        self.max_queue, self.max_queue_tokens = max_queue, max_queue_tokens
        self.on_start = on_start  # called first in the worker thread (warm-up, thread state)
        self.stats = Stats()
        self._queue = queue.Queue()  # unbounded: `submit` enforces the limits, `close` never waits
        self._lock = threading.Lock()  # submit and close: no job lands behind the stop marker
        self._stopping = self._aborting = False
        self._active = []  # jobs taken from the queue with parts left (the worker thread's)
        self._waiting_tokens = 0  # work of the jobs submitted and not answered
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
        """Jobs waiting or partly done, less those in the batch running now."""
        return self._queue.qsize() + len(self._active) - self.stats.running

    def queued_tokens(self):
        return self._waiting_tokens

    def alive(self):
        """Whether the worker thread is running (False before start and once it ended)."""
        return self._thread.is_alive()

    def seconds_per_job(self):
        """The mean model time of an answered job so far (None before the first)."""
        done = self.stats.jobs + self.stats.failed
        return self.stats.busy_seconds / done if done else None

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

    def stop(self, timeout=None):
        """`close`, then wait up to ``timeout`` s for the queued jobs and the thread to end;
        jobs still waiting after that are answered with Stopping."""
        self.close()
        if self._thread.ident is not None:
            self._thread.join(timeout)
        self._aborting = True  # a thread still in a batch refuses its other jobs after it
        self._refuse(self._drain())  # the queue is safe to take from any thread
        if not self._thread.is_alive():
            self._refuse(self._active)
            self._active = []

    # -- the worker thread ------------------------------------------------------------------
    def _loop(self):
        try:
            if self.on_start is not None:
                self.on_start()
        except BaseException as err:  # noqa: BLE001 (start() raises it in the caller)
            self._ready.set_exception(err)
            return
        self._ready.set_result(None)
        stop_seen = False
        while not self._aborting:
            if not self._active:
                if stop_seen:
                    return
                stop_seen = self._take(self._queue.get()) or stop_seen
            stop_seen = self._gather() or stop_seen
            batch = self._next_batch()
            for key, parts in _group(batch).items():
                self._run(key, parts)
            self._active = [job for job in self._active if not self._finished(job)]
        self._refuse(self._active + self._drain())
        self._active = []

    def _take(self, item):
        """Make ``item`` (a job or the stop marker) active; True for the stop marker."""
        if item is _STOP:
            return True
        if item.future.set_running_or_notify_cancel():
            self._active.append(item)
        else:
            self._settle(item)  # cancelled before it started
        return False

    def _gather(self):
        """Take what is queued; wait up to ``max_wait`` for more while the next batch has room.
        True when the stop marker came."""
        deadline = time.monotonic() + self.max_wait
        while True:
            room = self.max_batch_tokens - sum(job.parts[len(job.results)][1]
                                               for job in self._active)
            try:
                item = (self._queue.get_nowait() if room <= 0 else
                        self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                return False
            if self._take(item):
                return True

    def _next_batch(self):
        """The jobs whose next part runs now: the least served first (fewest parts done; then
        the oldest), within ``max_batch_tokens`` (at least one part)."""
        batch, tokens = [], 0
        for job in sorted(self._active, key=lambda job: len(job.results)):  # stable: by age
            if job.abandoned:
                continue
            part_tokens = job.parts[len(job.results)][1]
            if batch and tokens + part_tokens > self.max_batch_tokens:
                break
            batch.append(job)
            tokens += part_tokens
        return batch

    def _run(self, key, jobs):
        payloads = [job.parts[len(job.results)][0] for job in jobs]
        self.stats.running = len(jobs)
        self.stats.running_since = started = time.monotonic()
        try:
            results = self.run_batch(key, payloads)
            if len(results) != len(jobs):
                raise RuntimeError(f"run_batch gave {len(results)} results for {len(jobs)} jobs")
        except Exception as err:  # noqa: BLE001 (each caller gets it; the worker goes on)
            user_error = isinstance(err, ValueError)  # mtx.errors.MtxError is one
            log.log(logging.INFO if user_error else logging.ERROR, "a batch of %d request(s) "
                    "failed: %s", len(jobs), err, exc_info=not user_error)
            for job in jobs:
                job.error = err
        else:
            self.stats.batches += 1
            self.stats.largest_batch = max(self.stats.largest_batch, len(jobs))
            with self._lock:  # these parts' work is done
                self._waiting_tokens -= sum(job.parts[len(job.results)][1] for job in jobs)
            for job, result in zip(jobs, results):
                job.results.append(result)
        finally:
            self.stats.running, self.stats.running_since = 0, None
            self.stats.busy_seconds += time.monotonic() - started

    def _finished(self, job):
        """Answer ``job`` if it is done, failed or abandoned; True when it was answered."""
        if job.error is None and not job.abandoned and len(job.results) < len(job.parts):
            return False
        self._settle(job, job.error)
        return True

    def _settle(self, job, error=None):
        """The job leaves the queue (with the work of its parts not run): its future gets its
        result or ``error``."""
        with self._lock:
            self._waiting_tokens -= job.tokens_left
        future = job.future
        if future.cancelled():
            return
        if error is not None:
            self.stats.failed += 1
            future.set_exception(error)
        elif len(job.results) < len(job.parts):
            self.stats.abandoned += 1
            future.set_exception(Abandoned("the request was given up"))
        else:
            self.stats.jobs += 1
            future.set_result(job.results[0] if job.single else list(job.results))

    def _drain(self):
        """Every job still in the queue (the stop marker left out)."""
        left = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return left
            if item is not _STOP:
                left.append(item)

    def _refuse(self, jobs):
        """Jobs that will not run: answered with Stopping."""
        for job in jobs:
            if job.future.done():
                continue
            if job.future.running() or job.future.set_running_or_notify_cancel():
                job.error = Stopping("the server stopped before this request ran")
                self._settle(job, job.error)


def _group(jobs):
    """{key: [jobs]} in order of first arrival."""
    groups = {}
    for job in jobs:
        groups.setdefault(job.key, []).append(job)
    return groups
