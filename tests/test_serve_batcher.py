"""The model thread of mtx-serve (mtx/serving/batcher.py, jobs.py) with a stand-in for the
model: which jobs share a batch, bounded batches, failures, stopping. No MXNet, no timing
thresholds: a batch is held open with an event, so what arrives meanwhile is known."""
import threading

import pytest

from mtx.serving.batcher import Batcher
from mtx.serving.jobs import Abandoned, Busy, JobQueue, Stopping

TIMEOUT = 30  # seconds; only reached if a test is broken


class Model:
    """run_batch(key, payloads) -> each payload doubled; records every call. While ``hold`` is
    clear, a call waits inside the model (``busy`` is set), so jobs pile up in the queue."""

    def __init__(self, fail_on=None):
        self.calls, self.fail_on = [], fail_on
        self.hold, self.busy = threading.Event(), threading.Event()
        self.hold.set()

    def __call__(self, key, payloads):
        self.calls.append((key, list(payloads)))
        self.busy.set()
        assert self.hold.wait(TIMEOUT)
        if key == self.fail_on:
            raise RuntimeError("the model broke")
        return [2 * p for p in payloads]


def batcher(model, max_batch_tokens=100, max_queue=100, max_wait=0.0, max_queue_tokens=None):
    """A started Batcher of ``model``; its queue is ``.jobs``."""
    return Batcher(JobQueue(max_queue, max_queue_tokens), model, max_wait=max_wait,
                   max_batch_tokens=max_batch_tokens).start()


def while_busy(model, b, submit_more):
    """Submit one job, hold the model inside it, submit ``submit_more()``'s jobs, release."""
    model.hold.clear()
    first = b.jobs.submit("k", 1, 1)
    assert model.busy.wait(TIMEOUT)
    more = submit_more()
    model.hold.set()
    return first, more


def test_jobs_that_arrive_while_the_model_is_busy_share_one_batch():
    model = Model()
    b = batcher(model)
    first, more = while_busy(model, b, lambda: [b.jobs.submit("k", p, 1) for p in (2, 3, 4)])
    assert [f.result(TIMEOUT) for f in [first, *more]] == [2, 4, 6, 8]
    assert model.calls == [("k", [1]), ("k", [2, 3, 4])]
    assert (b.jobs.stats.batches, b.jobs.stats.jobs, b.jobs.stats.largest_batch) == (2, 4, 3)
    b.stop(TIMEOUT)


def test_different_settings_are_separate_calls_and_every_job_gets_its_own_result():
    model = Model()
    b = batcher(model)
    keys = ["greedy", "beam", "greedy", "beam", "gated"]
    _, more = while_busy(model, b, lambda: [b.jobs.submit(k, i, 1) for i, k in enumerate(keys)])
    assert [f.result(TIMEOUT) for f in more] == [0, 2, 4, 6, 8]
    assert model.calls[1:] == [("greedy", [0, 2]), ("beam", [1, 3]), ("gated", [4])]
    b.stop(TIMEOUT)


def test_a_batch_stays_within_max_batch_tokens():
    model = Model()
    b = batcher(model, max_batch_tokens=7)
    _, more = while_busy(model, b, lambda: [b.jobs.submit("k", p, 3) for p in (2, 3, 4, 5, 6)])
    assert [f.result(TIMEOUT) for f in more] == [4, 6, 8, 10, 12]
    assert [payloads for _, payloads in model.calls] == [[1], [2, 3], [4, 5], [6]]
    b.stop(TIMEOUT)


def test_a_failing_batch_answers_its_jobs_with_the_error_and_the_thread_goes_on():
    model = Model(fail_on="bad")
    b = batcher(model)
    _, (bad, good) = while_busy(model, b, lambda: [b.jobs.submit("bad", 5, 1),
                                                   b.jobs.submit("k", 6, 1)])
    with pytest.raises(RuntimeError, match="the model broke"):
        bad.result(TIMEOUT)
    assert good.result(TIMEOUT) == 12
    assert b.jobs.submit("k", 7, 1).result(TIMEOUT) == 14
    assert b.jobs.stats.failed == 1
    b.stop(TIMEOUT)


def test_stop_answers_what_is_queued_and_refuses_what_comes_after():
    model = Model()
    b = batcher(model)

    def queue_two_then_close():
        queued = [b.jobs.submit("k", p, 1) for p in (2, 3)]
        b.jobs.close()
        return queued
    first, queued = while_busy(model, b, queue_two_then_close)
    assert b.jobs.stopping
    with pytest.raises(Stopping):
        b.jobs.submit("k", 9, 1)
    b.stop(TIMEOUT)
    assert [f.result(TIMEOUT) for f in [first, *queued]] == [2, 4, 6]


def test_a_stop_that_timed_out_in_a_batch_still_lets_the_thread_end_after_it():
    """The first stop's wait ends inside a long batch (what is queued is refused); when that
    batch ends the thread ends too, so the second stop (the server's last) returns then."""
    model = Model()
    b = batcher(model)
    model.hold.clear()
    running = b.jobs.submit("k", 1, 1)
    assert model.busy.wait(TIMEOUT)
    queued = b.jobs.submit("k", 2, 1)
    b.stop(0.01)
    with pytest.raises(Stopping):
        queued.result(TIMEOUT)
    model.hold.set()
    assert running.result(TIMEOUT) == 2
    b.stop(TIMEOUT)
    assert not b.alive()


def test_a_full_queue_is_busy():
    model = Model()
    b = batcher(model, max_queue=2)

    def submit_until_full():
        queued = [b.jobs.submit("k", 2, 1), b.jobs.submit("k", 3, 1)]
        with pytest.raises(Busy, match="2 requests"):
            b.jobs.submit("k", 4, 1)
        return queued
    _, queued = while_busy(model, b, submit_until_full)
    assert [f.result(TIMEOUT) for f in queued] == [4, 6]
    b.stop(TIMEOUT)


def test_a_cancelled_request_is_skipped():
    model = Model()
    b = batcher(model)

    def submit_and_cancel():
        gone, kept = b.jobs.submit("k", 2, 1), b.jobs.submit("k", 3, 1)
        assert gone.cancel()
        return [kept]
    _, (kept,) = while_busy(model, b, submit_and_cancel)
    assert kept.result(TIMEOUT) == 6
    assert model.calls[1] == ("k", [3])
    b.stop(TIMEOUT)


def test_start_raises_what_the_warm_up_raised():
    def broken_warm_up():
        raise OSError("no model")
    with pytest.raises(OSError, match="no model"):
        Batcher(JobQueue(10), Model(), 0.0, 10, on_start=broken_warm_up).start()


def test_a_request_of_many_parts_takes_turns_with_later_ones():
    """A four-part job queued before a one-part one: the one-part job runs in the second batch
    (beside the heavy job's second part), not after all four parts."""
    model = Model()
    b = batcher(model, max_batch_tokens=10)
    _, (heavy, light) = while_busy(model, b, lambda: [
        b.jobs.submit_parts("k", [(10, 4), (20, 4), (30, 4), (40, 4)]), b.jobs.submit("k", 5, 4)])
    assert heavy.result(TIMEOUT) == [20, 40, 60, 80] and light.result(TIMEOUT) == 10
    assert [payloads for _, payloads in model.calls] == [[1], [10, 5], [20], [30], [40]]


def test_an_abandoned_job_runs_no_more_parts():
    model = Model()
    b = batcher(model)
    model.hold.clear()
    heavy = b.jobs.submit_parts("k", [(10, 1), (20, 1), (30, 1)])
    assert model.busy.wait(TIMEOUT)  # inside its first part
    heavy.abandon()
    model.hold.set()
    with pytest.raises(Abandoned):
        heavy.result(TIMEOUT)
    assert b.jobs.submit("k", 7, 1).result(TIMEOUT) == 14
    assert [payloads for _, payloads in model.calls] == [[10], [7]]
    assert b.jobs.stats.abandoned == 1 and b.jobs.queued_tokens() == 0
    b.stop(TIMEOUT)


def test_the_queue_counts_work_not_only_requests():
    model = Model()
    b = batcher(model, max_queue_tokens=10)

    def submit_until_full():
        queued = [b.jobs.submit("k", 2, 6)]  # 1 running + 6 waiting = 7 of 10
        with pytest.raises(Busy, match="7 subwords x beam of work are waiting already"):
            b.jobs.submit("k", 3, 4)
        return queued
    _, queued = while_busy(model, b, submit_until_full)
    assert [f.result(TIMEOUT) for f in queued] == [4]
    assert b.jobs.queued_tokens() == 0
    b.stop(TIMEOUT)


def test_an_abandoned_job_leaves_the_queue_s_limits_at_once():
    model = Model()
    b = batcher(model, max_queue=3, max_queue_tokens=30)

    def fill_then_abandon():
        waiting = [b.jobs.submit_parts("k", [(2, 10), (3, 5)]), b.jobs.submit("k", 4, 10)]
        with pytest.raises(Busy):
            b.jobs.submit("k", 5, 10)  # 1 + 25 waiting: 10 more is over 30
        waiting[0].abandon()  # before the model thread reaches it
        assert b.jobs.queued_tokens() == 1 + 10 and b.jobs.queued() == 1
        with pytest.raises(Abandoned):
            waiting[0].result(0)  # answered at once
        return waiting + [b.jobs.submit("k", 5, 10)]  # room again
    first, more = while_busy(model, b, fill_then_abandon)
    assert first.result(TIMEOUT) == 2 and [f.result(TIMEOUT) for f in more[1:]] == [8, 10]
    assert all(call[1] != [2] for call in model.calls[1:])  # the abandoned job never ran
    assert b.jobs.stats.abandoned == 1 and b.jobs.queued_tokens() == 0
    b.stop(TIMEOUT)


def test_one_client_holds_at_most_its_share_of_the_queue():
    model = Model()
    b = Batcher(JobQueue(4, 100, client_share=0.5), model, max_wait=0.0,
                max_batch_tokens=100).start()

    def submit_from_two_clients():
        mine = [b.jobs.submit_parts("k", [(p, 1)], client="10.0.0.1") for p in (2, 3)]
        with pytest.raises(Busy, match="limits.client_share"):
            b.jobs.submit_parts("k", [(4, 1)], client="10.0.0.1")  # its 2 of 4
        theirs = b.jobs.submit_parts("k", [(5, 1)], client="10.0.0.2")  # another's room
        with pytest.raises(Busy, match="its share"):  # work: 50 of 100 each
            b.jobs.submit_parts("k", [(6, 60)], client="10.0.0.2")
        return mine + [theirs]
    _, futures = while_busy(model, b, submit_from_two_clients)
    assert [f.result(TIMEOUT) for f in futures] == [[4], [6], [10]]
    assert b.jobs.submit_parts("k", [(7, 1)], client="10.0.0.1").result(TIMEOUT) == [14]
    b.stop(TIMEOUT)
