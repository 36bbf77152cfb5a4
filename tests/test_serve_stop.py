"""mtx-serve stopping and failing, over real sockets (the installed command on a free loopback
port, serving the toy run): a stop signal that lands while the event loop holds the queue's lock,
a stop bounded by shutdown_seconds while a batch runs for longer, and a model thread that is
alive but finishes no batch (liveness fails, so that a supervisor restarts the server)."""
import os
import signal
import threading
import time

import fastapi  # noqa: F401  the serve extra, which make install installs
from servers import connect, get, post, start_server, until  # noqa: E402

SENTENCE = {"text": ["w1 w2 w3"], "beam_size": 1, "length_penalty": 1.0}
# one part of a request (batching.max_batch_tokens=65536: parts of 8,192), a batch of several
# seconds on the toy model: 8 sentences of 60 subwords at beam 16 (7,808 subwords x beam)
HEAVY = {"text": [" ".join(f"w{(i * 7 + k * 3) % 20}" for k in range(60)) for i in range(8)],
         "beam_size": 16}
LONG_BATCHES = ("batching.max_batch_tokens=65536", "limits.request_seconds=600")


def _in_thread(function, *args, **kwargs):
    """Run ``function`` in a thread -> (the thread, a list that gets its result or error)."""
    out = []

    def run():
        try:
            out.append(function(*args, **kwargs))
        except OSError as err:  # a dropped connection: the tests fail on it
            out.append((None, None, repr(err).encode()))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_stop_signal_while_the_event_loop_holds_the_queue_s_lock_stops_the_server(toy_run):
    """MTX_KILL_AT=queue_locked:1:SIGTERM: the server sends itself SIGTERM while its event loop
    holds the queue's lock (admitting a request). The handler only notes it; the request is
    answered, and the server stops and exits 0. (When the handler closed the queue itself, it
    waited for that lock forever: the process never ended.)"""
    env = {**os.environ, "MTX_KILL_AT": "queue_locked:1:SIGTERM"}
    process = start_server(toy_run, "shutdown_seconds=10", env=env)
    try:
        thread, out = _in_thread(post, process.url, "/translate", SENTENCE)
        thread.join(60)
        assert out and out[0][0] in (200, 503), out
        process.process.wait(30)
    finally:
        process.stop()
    assert process.process.returncode == 0, process.log[-5:]
    assert any("stopping" in line for line in process.log)


def test_the_stop_takes_at_most_shutdown_seconds_and_answers_everything_in_flight(toy_run):
    """SIGTERM while a batch runs (for longer than shutdown_seconds), a request waits behind it
    and another's body is still coming: each of them gets 503 (or 200), and the process exits 0
    within shutdown_seconds of the signal, not waiting for the batch. (Before, uvicorn waited
    shutdown_seconds + 2 s and then the model thread another shutdown_seconds.)"""
    shutdown = 3
    process = start_server(toy_run, f"shutdown_seconds={shutdown}", *LONG_BATCHES)
    slow = connect(process.url)
    try:
        heavy = [_in_thread(post, process.url, "/translate", HEAVY) for _ in range(2)]
        assert until(lambda: get(process.url, "/health")[1]["running"] > 0, 60)
        waiting = _in_thread(post, process.url, "/translate", SENTENCE)
        assert until(lambda: get(process.url, "/health")[1]["queued"] > 0, 30)
        slow.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100\r\n\r\n{")
        time.sleep(0.3)
        start = time.monotonic()
        process.process.send_signal(signal.SIGTERM)
        process.process.wait(60)
        seconds = time.monotonic() - start
        answer = slow.recv(65536)
    finally:
        slow.close()
        process.stop()
    assert process.process.returncode == 0, process.log[-5:]
    assert seconds < shutdown + 1.5, seconds
    for thread, out in [*heavy, waiting]:
        thread.join(30)
        assert out and out[0][0] in (200, 503), out
    assert answer.startswith(b"HTTP/1.1 503") and b"stopped before" in answer, answer[:300]


def test_a_model_thread_that_finishes_no_batch_in_time_fails_liveness(toy_run):
    """limits.batch_seconds=1 and a model thread that stalls for 8 s on its first work
    (MTX_KILL_AT=model_round:1:SLEEP8, whatever the host's speed): meanwhile /health answers
    503 "failed" (a supervisor restarts the server), /ready 503 and new work is refused; once a
    batch finishes, liveness comes back."""
    env = {**os.environ, "MTX_KILL_AT": "model_round:1:SLEEP8"}
    process = start_server(toy_run, "limits.batch_seconds=1", env=env)
    try:
        thread, out = _in_thread(post, process.url, "/translate", SENTENCE)
        assert until(lambda: get(process.url, "/health")[0] == 503, 7)
        status, health, _ = get(process.url, "/health")
        assert status == 503 and health["status"] == "failed", health
        assert "finished no batch" in health["reason"]
        assert get(process.url, "/ready")[0] == 503
        status, data, _ = post(process.url, "/translate", SENTENCE)
        assert status == 503 and "finished no batch" in data["error"]
        thread.join(120)
        assert out and out[0][0] == 200, out
        assert get(process.url, "/health")[0] == 200  # a batch finished: alive again
        assert post(process.url, "/translate", SENTENCE)[0] == 200
    finally:
        assert process.stop() == 0, process.log[-5:]
