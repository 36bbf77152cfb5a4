"""The model thread of mtx-serve: one thread owns the model (MXNet is not thread-safe) and takes
jobs from a `JobQueue`, batching the ones that arrive together.

Each round the batcher takes what is queued (waiting up to ``max_wait`` seconds for more while
the batch has room), puts the next part of every job that has parts left into the batch, least
served first, while it stays within ``max_batch_tokens`` (`take_turns`), groups the batch by key
and calls ``run_batch(key, payloads) -> results`` once per group. Requests that come while the
model is busy wait in the queue, so under load each model call serves many of them: that is
where the throughput comes from; and a request of many parts shares every round with those that
came after it instead of holding the model to itself. No MXNet here: ``run_batch`` does the
model's work.

The thread is watched: it records its progress (`mtx.serving.ledger.Stats.stalled`: a thread
alive but stuck is seen), a failed batch answers its jobs with the error and the thread goes on,
but anything else that ends it (a bug in the loop, an error outside a batch) is logged, recorded
in ``died`` and refuses every job queued or running (mtx-serve then stops and exits non-zero,
for its supervisor to restart it).
"""
import concurrent.futures
import logging
import threading
import time
from typing import Callable, Optional

from ..runs import faults
from .answers import printable, printable_traceback
from .jobs import JobQueue

log = logging.getLogger(__name__)


def take_turns(jobs, max_batch_tokens):
    """The jobs whose next part runs now: the least served first (fewest parts done; then the
    oldest), within ``max_batch_tokens`` (at least one part); abandoned ones left out."""
    batch, tokens = [], 0
    for job in sorted(jobs, key=lambda job: len(job.results)):  # stable: by age
        if job.abandoned:
            continue
        part_tokens = job.next_part[1]
        if batch and tokens + part_tokens > max_batch_tokens:
            break
        batch.append(job)
        tokens += part_tokens
    return batch


def by_key(jobs):
    """{key: [jobs]} in order of first arrival."""
    groups = {}
    for job in jobs:
        groups.setdefault(job.key, []).append(job)
    return groups


class Batcher:
    """``run_batch(key, payloads) -> results`` (one per payload, in order) in one thread, on the
    jobs of ``jobs``.

    Jobs are taken in turns: every batch takes the next part of each job that has parts left,
    the least served first, while the batch stays within ``max_batch_tokens``, so a request of
    many parts delays a one-part request that arrives after it by about one batch, not by its
    whole work."""

    def __init__(self, jobs: JobQueue, run_batch: Callable, max_wait: float,
                 max_batch_tokens: int, on_start: Optional[Callable] = None):
        self.jobs, self.run_batch = jobs, run_batch
        self.max_wait, self.max_batch_tokens = max_wait, max_batch_tokens
        self.on_start = on_start  # called first in the model thread (warm-up, thread state)
        self.died = None          # that exception, once the thread has died
        self._aborting = False
        self._ready = concurrent.futures.Future()  # on_start done (or its exception)
        self._thread = threading.Thread(target=self._loop, name="mtx-model", daemon=True)

    def start(self):
        """Start the thread; returns once ``on_start`` is done (raises what it raised, once the
        thread has ended, so that `alive` says so)."""
        self._thread.start()
        try:
            self._ready.result()
        except BaseException:
            self._thread.join()  # it returns right after handing over the exception
            raise
        return self

    def alive(self):
        """Whether the model thread is running (False before start and once it ended)."""
        return self._thread.is_alive()

    def stop(self, timeout=None):
        """Close the queue, then wait up to ``timeout`` s for the queued jobs and the thread to
        end; jobs still waiting after that are answered with Stopping."""
        self.jobs.close()
        if self._thread.ident is not None:
            self._thread.join(timeout)
        self._aborting = True  # a thread still in a batch refuses its other jobs after it
        self.jobs.refuse(active_too=not self._thread.is_alive())

    # -- the model thread -------------------------------------------------------------------
    def _loop(self):
        try:
            if self.on_start is not None:
                self.on_start()
        except BaseException as err:  # noqa: BLE001 (start() raises it in the caller)
            self._ready.set_exception(err)
            return
        self._ready.set_result(None)
        try:
            self._serve()
        except BaseException as err:  # noqa: BLE001 (the thread's end is reported, not lost)
            self.died = err
            log.critical("the model thread died (%s): refusing all work; the server stops\n%s",
                         type(err).__name__, printable_traceback(err))
            self.jobs.close()
            self.jobs.refuse(active_too=True)

    def _serve(self):
        jobs, stats = self.jobs, self.jobs.stats
        while not self._aborting:
            if not jobs.active:
                if jobs.stop_taken:
                    return
                stats.idle = True  # owes nothing while it waits (`Stats.stalled`)
                jobs.take()
                stats.progress_at, stats.idle = time.monotonic(), False
            faults.point("model_round")
            self._gather()
            for key, group in by_key(take_turns(jobs.active, self.max_batch_tokens)).items():
                self._run(key, group)
            jobs.answer_finished()
        jobs.refuse(active_too=True)

    def _gather(self):
        """Take what is queued; wait up to ``max_wait`` for more while the next batch has room."""
        deadline = time.monotonic() + self.max_wait
        while not self.jobs.stop_taken:
            room = self.max_batch_tokens - sum(job.next_part[1] for job in self.jobs.active)
            wait = 0.0 if room <= 0 else max(0.0, deadline - time.monotonic())
            if not self.jobs.take(timeout=wait):
                return

    def _run(self, key, jobs):
        """One ``run_batch`` call on the next parts of ``jobs``; a failure answers them all."""
        stats = self.jobs.stats
        stats.running = len(jobs)
        stats.running_since = started = time.monotonic()
        try:
            results = self.run_batch(key, [job.next_part[0] for job in jobs])
            if len(results) != len(jobs):
                raise RuntimeError(f"run_batch gave {len(results)} results for {len(jobs)} jobs")
        except Exception as err:  # noqa: BLE001 (each caller gets it; the thread goes on)
            user_error = isinstance(err, ValueError)  # mtx.errors.MtxError is one
            log.log(logging.INFO if user_error else logging.ERROR, "a batch of %d request(s) "
                    "failed: %s", len(jobs), printable_traceback(err) if not user_error
                    else printable(err))
            for job in jobs:
                job.error = err
        else:
            stats.batches += 1
            stats.largest_batch = max(stats.largest_batch, len(jobs))
            self.jobs.ran(jobs, results)
        finally:
            stats.running, stats.running_since = 0, None
            stats.progress_at = time.monotonic()
            stats.busy_seconds += stats.progress_at - started
