"""mtx-serve's API against the real server: the installed command on a free loopback port,
serving the toy run (it reverses sequences of w0..w19). Every bad input gets a 4xx JSON error
that names the problem and the next request is served; concurrent requests are batched and
each gets its own answer; SIGTERM and Ctrl-C answer or refuse what is in flight."""
import json
import signal
import threading
import time
from pathlib import Path

import pytest

import fastapi  # noqa: E402,F401  the serve extra, which make install installs: missing, these fail
from servers import get, post, request, start_server  # noqa: E402

# toy run (conf/experiment/toy.yaml): 2 encoder and 2 decoder layers, 4 heads, 255 positions;
# attention rows: enc0 self, enc1 self, dec0 self, dec0 cross, dec1 self, dec1 cross
ROWS, HEADS, CROSS = 6, 4, (3, 5)


@pytest.fixture(scope="module")
def server(toy_run):
    process = start_server(toy_run, "batching.max_wait_ms=20", "limits.max_sentences=8",
                           "limits.max_body_bytes=20000", "limits.max_attention_subwords=8")
    yield process.url
    assert process.stop() == 0, process.log[-5:]
    assert not any("Traceback" in line for line in process.log), process.log[-20:]  # bad input


def gates(off=()):
    rows = [[1] * HEADS for _ in range(ROWS)]
    for a, h in off:
        rows[a][h] = 0
    return rows


def test_health_and_info(server, toy_run):
    assert server.startswith("http://127.0.0.1:")  # loopback unless host= says otherwise
    status, health, _ = get(server, "/health")
    assert status == 200 and health["status"] == "ok" and health["queued"] == 0
    status, info, _ = get(server, "/info")
    assert status == 200
    assert (info["source_language"], info["target_language"]) == ("src", "tgt")
    assert [layer["name"] for layer in info["layers"]] == [
        "enc0 self", "enc1 self", "dec0 self", "dec0 cross", "dec1 self", "dec1 cross"]
    assert {layer["heads"] for layer in info["layers"]} == {HEADS} and info["num_heads"] == HEADS
    report = json.loads((Path(toy_run) / "report.json").read_text())
    assert info["parameters"] == report["parameters"] and info["precision"] == "float32"
    assert info["checkpoint"]["run"] == Path(toy_run).resolve().name  # no path of the machine
    where = str(Path(toy_run).resolve().parent)
    assert where not in json.dumps(info) and where not in json.dumps(get(server, "/heads")[1])
    assert info["checkpoint"]["checkpoint"] in ("best", "average")  # what the run chose
    has_study = (Path(toy_run) / "heads" / "importance.json").is_file()  # test_heads writes one
    assert get(server, "/heads")[1]["available"] is has_study


@pytest.mark.parametrize("beam", [1, 5])
def test_translations_come_back_in_order(server, beam):
    status, out, _ = post(server, "/translate", {"text": ["w1 w2 w3", "", "w4 w5 w6 w7"],
                                                 "beam_size": beam, "length_penalty": 1.0})
    assert status == 200, out
    assert out["translations"] == ["w3 w2 w1", "", "w7 w6 w5 w4"]
    assert len(out["scores"]) == 3 and "nbest" not in out


def test_nbest_lists_are_best_first(server):
    status, out, _ = post(server, "/translate", {"text": ["w1 w2 w3", "w9 w8"], "beam_size": 4,
                                                 "nbest": 3})
    assert status == 200, out
    for hyps, best in zip(out["nbest"], out["translations"]):
        scores = [h["score"] for h in hyps]
        assert len(hyps) == 3 and hyps[0]["text"] == best and scores == sorted(scores)[::-1]


def test_gates_switch_heads_off(server):
    """With every cross-attention head off the decoder cannot see the source: two sources of
    the same length get the same output (and the all-ones gates are the plain model)."""
    sources = ["w1 w2 w3", "w4 w5 w6"]
    plain = post(server, "/translate", {"text": sources, "gates": gates(), "beam_size": 1})
    assert plain[1]["translations"] == ["w3 w2 w1", "w6 w5 w4"]
    blind = gates([(a, h) for a in CROSS for h in range(HEADS)])
    status, out, _ = post(server, "/translate", {"text": sources, "gates": blind, "beam_size": 1})
    assert status == 200 and out["translations"][0] == out["translations"][1]


def test_attention_of_one_sentence(server):
    status, out, _ = post(server, "/attention", {"text": "w1 w2 w3", "beam_size": 1})
    assert status == 200, out
    assert out["translation"] == "w3 w2 w1"
    assert out["source"] == ["w1", "w2", "w3", "</s>"]
    assert out["target"] == ["<s>", "w3", "w2", "w1"]
    shapes = {layer["name"]: (len(layer["weights"]), len(layer["weights"][0]),
                              len(layer["weights"][0][0])) for layer in out["layers"]}
    assert shapes == {"enc0 self": (4, 4, 4), "enc1 self": (4, 4, 4), "dec0 self": (4, 4, 4),
                      "dec0 cross": (4, 4, 4), "dec1 self": (4, 4, 4), "dec1 cross": (4, 4, 4)}
    for layer in out["layers"]:
        for head in layer["weights"]:
            assert all(abs(sum(row) - 1) < 0.01 for row in head)  # softmax rows
    causal = out["layers"][2]["weights"][0]  # dec0 self: no weight on later positions
    assert all(causal[q][k] == 0 for q in range(4) for k in range(q + 1, 4))


BIG = ("w1 " * 7000).encode()  # 21,000 bytes: over limits.max_body_bytes=20000
BAD = [  # (path, body bytes or object, expected status, words of the error)
    ("/translate", b'{"text": ["w1"', 422, "not valid JSON"),
    ("/translate", b'\xff\xfe{"text": 1}', 422, "not valid JSON"),
    ("/translate", [1, 2], 422, "the body must be a JSON object"),
    ("/translate", {"text": "w1 w2"}, 422, "text: Input should be a valid list"),
    ("/translate", {"text": ["w1", 7]}, 422, "text[1]: Input should be a valid string"),
    ("/translate", {"text": ["w1"], "beam_size": "5"}, 422, "beam_size: Input should be"),
    ("/translate", {"text": ["w1"], "file": "/etc/passwd"}, 422, "file: Extra inputs"),
    ("/translate", {"text": []}, 422, "text is an empty list"),
    ("/translate", {"text": ["w1"] * 9}, 413, "text has 9 sentences; give at most 8"),
    ("/translate", {"text": [" ".join(["w1"] * 300)]}, 413, "text[0] has 300 subwords"),
    ("/translate", b'{"text": ["w1"], "length_penalty": NaN}', 422, "length_penalty=nan"),
    ("/translate", {"text": ["w1"], "beam_size": 0}, 422, "beam_size=0"),
    ("/translate", {"text": ["w1"], "beam_size": 2, "nbest": 3}, 422, "nbest=3"),
    ("/translate", {"text": ["w1"], "gates": [[1] * 4] * 5}, 422, "gates has 5 rows"),
    ("/translate", {"text": ["w1"], "gates": [[1] * 3] * 6}, 422, "gates[0] (enc0 self) has 3"),
    ("/translate", {"text": ["w1"], "gates": [[1, 2, 1, 1]] * 6}, 422, "gates[0][1]=2.0"),
    ("/translate", b'{"text": ["w1", "w2 \\ud800"]}', 422, "text[1] is not valid Unicode"),
    ("/attention", {"text": ""}, 422, "text is empty"),
    ("/attention", {"text": " ".join(["w1"] * 9)}, 413, "text has 9 subwords; /attention shows "
                                                        "sentences of at most 8"),
    ("/attention", {"text": ["w1"]}, 422, "text: Input should be a valid string"),
    ("/translate", b'{"text": ["' + BIG + b'"]}', 413, "body is over 20000 bytes"),
    ("/translate", b"[" * 5000 + b"]" * 5000, 422, "nested too deeply"),
]


@pytest.mark.parametrize("path, body, status, words", BAD, ids=[b[3] for b in BAD])
def test_bad_input_gets_a_json_error_and_the_next_request_is_served(server, path, body, status,
                                                                     words):
    headers = {"Content-Type": "application/json"}
    got, data, raw = post(server, path, body, headers=headers)
    assert got == status, raw[:300]
    assert set(data) == {"error"} and words in data["error"], data
    status, out, _ = post(server, "/translate", {"text": ["w1 w2 w3"], "beam_size": 1})
    assert status == 200 and out["translations"] == ["w3 w2 w1"]  # 3-12 symbols: as trained


def test_a_streamed_body_over_the_limit_is_refused(server):
    status, data, _ = post(server, "/translate", b'{"text": ["' + BIG + b'"]}', chunked=True,
                           headers={"Content-Type": "application/json"})
    assert status == 413 and "over 20000 bytes" in data["error"]


@pytest.mark.parametrize("method, path, status", [("GET", "/translate", 405),
                                                  ("POST", "/nothing", 404)])
def test_unknown_routes_are_json_errors(server, method, path, status):
    got, data, _ = request(server, method, path, {} if method == "POST" else None)
    assert got == status and path in data["error"]


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(server):
    words = [f"w{i}" for i in range(20)]
    jobs = [[" ".join(words[(c + k) % 20: (c + k) % 20 + 3]) for k in range(3)] for c in range(16)]
    # what each job gets alone: the trained toy model reverses nearly every input, not all (a
    # fresh run once gave "w4 w3 w3 w2" for "w2 w3 w4"), so the truth is its own answer
    alone = [post(server, "/translate", {"text": job, "beam_size": 1})[1]["translations"]
             for job in jobs]
    assert sum(a == [" ".join(s.split()[::-1]) for s in job]
               for a, job in zip(alone, jobs)) >= len(jobs) // 2  # a model that learned the task
    start, answers = threading.Barrier(len(jobs)), [None] * len(jobs)
    before = get(server, "/health")[1]

    def client(c):
        start.wait()
        answers[c] = post(server, "/translate", {"text": jobs[c], "beam_size": 1})

    threads = [threading.Thread(target=client, args=(c,)) for c in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for own, (status, out, _) in zip(alone, answers):
        assert status == 200
        assert out["translations"] == own
    after = get(server, "/health")[1]
    assert after["jobs"] - before["jobs"] == len(jobs)
    assert after["batches"] - before["batches"] < len(jobs)  # some model calls served several


# (sentences, words, beam) per request, six requests a wave: up to the request work limit
# (sentences x subwords with EOS x beam <= limits.max_request_work, 8192)
WAVES = [(16, 10, 4), (64, 10, 4), (64, 20, 6)]


@pytest.mark.parametrize("sig, exit_code", [(signal.SIGTERM, 0), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "Ctrl-C"])
def test_stopping_answers_or_refuses_every_request_in_flight(toy_run, sig, exit_code):
    """The signal comes while requests are in flight (queued or running): each is answered or
    refused, none dropped. The work grows wave by wave until a wave is still in flight when all
    its requests are in, so the test does not depend on the machine's speed."""
    process = start_server(toy_run)
    requests = 6
    for sentences, words, beam in WAVES:
        text = [" ".join(f"w{(i + k) % 20}" for k in range(words)) for i in range(sentences)]
        answers, threads = [None] * requests, []
        answered_before = get(process.url, "/health")[1]["jobs"]

        def client(c, text=text, beam=beam, answers=answers):
            try:
                answers[c] = post(process.url, "/translate", {"text": text, "beam_size": beam})
            except OSError as err:  # a dropped request: the test fails on it below
                answers[c] = (None, None, repr(err).encode())
        threads = [threading.Thread(target=client, args=(c,)) for c in range(requests)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # every request is in: queued, running or answered
            health = get(process.url, "/health")[1]
            answered = health["jobs"] - answered_before
            if health["queued"] + health["running"] + answered >= requests:
                break
            time.sleep(0.01)
        if answered < requests:
            break  # this wave is in flight: stop the server now
        for thread in threads:
            thread.join(60)
    else:
        pytest.fail("every wave was answered before the signal could come")
    code = process.stop(sig=sig)
    for thread in threads:
        thread.join(60)
    statuses = [status for status, _, _ in answers]
    assert all(status in (200, 503) for status in statuses), [a[2][:200] for a in answers]
    assert statuses.count(200) >= 1
    for status, out, _ in answers:
        if status == 200:
            assert len(out["translations"]) == sentences
        else:
            assert "shutting down" in out["error"] or "stopped" in out["error"]
    assert code == exit_code, process.log[-5:]
    assert any("stopping" in line for line in process.log)
    assert any("interrupted" in line for line in process.log) == (sig == signal.SIGINT)
