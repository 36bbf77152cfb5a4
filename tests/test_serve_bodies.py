"""What a request to mtx-serve may hold (mtx/serving/bodies.py) and how a run's head study is
read for the page (mtx/heads/files.py): each problem named in one line."""
import dataclasses
import json
import re
import socket
from types import SimpleNamespace

import pytest

import fastapi  # noqa: E402,F401  the serve extra, which make install installs: missing, these fail
from pydantic import ValidationError  # noqa: E402  (pydantic comes with FastAPI)

from mtx.commands.serve import check_address  # noqa: E402
from mtx.config import DecodeConfig  # noqa: E402
from mtx.errors import ConfigError  # noqa: E402
from mtx.serving.answers import RequestError  # noqa: E402
from mtx.serving.bodies import (AttentionBody, TranslateBody, check_gates,  # noqa: E402
                                sentence_ids, settings, validation_message)
from mtx.serving.limits import check_decode_defaults, check_work  # noqa: E402
from mtx.serving.server import bind  # noqa: E402
from mtx.serving.settings import Limits  # noqa: E402
from mtx.heads.files import head_study  # noqa: E402
from mtx.data.vocab import WordTokenizer  # noqa: E402
from tests.conftest import model_config  # noqa: E402

# 1 encoder and 1 decoder layer: rows enc0 self, dec0 self, dec0 cross; 2 heads each
CFG = model_config(num_hiddens=8, ffn_num_hiddens=8, max_len=6, vocab_size=10)
DECODE = DecodeConfig(beam_size=4, length_penalty=0.6)
LIMITS = Limits(max_sentences=3, max_beam_size=8)


class Engine:
    """The part of `mtx.serving.engine.Engine` the checks use: tokenization and positions."""
    tokenizer = WordTokenizer(["a", "b", "c"])
    max_src_len = CFG.max_len - 1

    def encode(self, lines):
        return self.tokenizer.encode(lines)


def test_defaults_come_from_the_decode_config_and_all_ones_gates_are_no_gates():
    s = settings(TranslateBody(text=["a"], gates=[[1, 1]] * 3), LIMITS, DECODE, CFG)
    assert (s.beam_size, s.length_penalty, s.nbest, s.gates) == (4, 0.6, 1, None)
    s = settings(TranslateBody(text=["a"], beam_size=2, nbest=2, length_penalty=0,
                               gates=[[1, 0], [1, 1], [0.5, 1]]), LIMITS, DECODE, CFG)
    assert s == (2, 0.0, 2, ((1.0, 0.0), (1.0, 1.0), (0.5, 1.0)))


@pytest.mark.parametrize("fields, message", [
    ({"beam_size": 0}, "beam_size=0: give 1 to 8"),
    ({"beam_size": 9}, "beam_size=9: give 1 to 8"),
    ({"nbest": 5}, r"nbest=5 must be between 1 and beam_size"),
    ({"length_penalty": float("nan")}, "length_penalty=nan"),
    ({"length_penalty": -1.0}, "length_penalty=-1.0"),
    ({"gates": [[1, 1]] * 2}, r"gates has 2 rows; this model has 3 attention layers \(enc0 self, "
                              r"dec0 self, dec0 cross\)"),
    ({"gates": [[1, 1], [1], [1, 1]]}, r"gates\[1\] \(dec0 self\) has 1 entries; give 2"),
    ({"gates": [[1, 1], [1, 1], [1, 2]]}, r"gates\[2\]\[1\]=2.0: give a number from 0"),
    ({"gates": [[1, 1], [1, float("inf")], [1, 1]]}, r"gates\[1\]\[1\]=inf"),
])
def test_settings_that_do_not_fit_the_model_or_the_limits(fields, message):
    with pytest.raises(RequestError, match=message) as caught:
        settings(TranslateBody(text=["a"], **fields), LIMITS, DECODE, CFG)
    assert caught.value.status == 422


@pytest.mark.parametrize("lines, status, message", [
    ([], 422, "text is an empty list"),
    (["a"] * 4, 413, "text has 4 sentences; give at most 3"),
    (["a", "a b c a b c"], 413, r"text\[1\] has 6 subwords; this server takes sentences of at "
                                r"most 5 \(limits.max_sentence_subwords\)"),
])
def test_sentences_over_the_limits(lines, status, message):
    with pytest.raises(RequestError, match=message) as caught:
        sentence_ids(Engine(), lines, LIMITS)
    assert caught.value.status == status


def test_a_pruned_layer_s_gates_may_stop_at_its_heads():
    """/info gives each layer's heads: a row of that length is padded with ones (slots the
    pruned layer does not read); a row of the full width is taken as it is."""
    pruned = dataclasses.replace(CFG, heads_per_layer=[2, 1, 2])
    gates = check_gates([[1, 0], [0], [1, 1]], pruned)
    assert gates == ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0))
    assert check_gates([[1, 0], [0, 1], [1, 1]], pruned) == ((1.0, 0.0), (0.0, 1.0), (1.0, 1.0))
    with pytest.raises(RequestError, match=r"gates\[0\] \(enc0 self\) has 1 entries; give 2, "
                                           r"one per head$"):
        check_gates([[1], [0], [1, 1]], pruned)
    with pytest.raises(RequestError, match=r"gates\[1\] \(dec0 self\) has 3 entries; give 1, "
                                           r"one per head \(or 2\)"):
        check_gates([[1, 1], [1, 1, 1], [1, 1]], pruned)


def test_text_that_is_not_unicode_is_named():
    with pytest.raises(RequestError, match=r"text\[1\] is not valid Unicode \(surrogates not "
                                           r"allowed at character 2\)") as caught:
        sentence_ids(Engine(), ["a", "ab\ud800"], LIMITS)
    assert caught.value.status == 422


def test_nbest_defaults_to_the_server_s_at_most_the_beam():
    three = DecodeConfig(beam_size=4, nbest=3)
    assert settings(TranslateBody(text=["a"]), LIMITS, three, CFG).nbest == 3
    assert settings(TranslateBody(text=["a"], beam_size=2), LIMITS, three, CFG).nbest == 2
    assert settings(TranslateBody(text=["a"], nbest=1), LIMITS, three, CFG).nbest == 1


def test_a_long_list_of_wrong_items_makes_one_error():
    with pytest.raises(ValidationError) as caught:
        TranslateBody.model_validate({"text": list(range(1000)), "gates": [["x"] * 50] * 50})
    errors = [{**e, "loc": ("body", *e["loc"])} for e in caught.value.errors()]
    assert validation_message(errors) == ("gates[0][0]: Input should be a valid number; "
                                          "text[0]: Input should be a valid string")


def test_three_errors_and_a_count_of_the_rest_make_the_line():
    errors = [{"loc": ("body", f"f{i}"), "msg": "wrong"} for i in range(10)]
    assert validation_message(errors) == "f0: wrong; f1: wrong; f2: wrong; and 7 more"


def test_sentences_within_the_limits_become_ids():
    assert sentence_ids(Engine(), ["a b", "", "c a b c x"], LIMITS) == [[4, 5], [], [6, 4, 5, 6, 1]]


@pytest.mark.parametrize("body, message", [
    ({"text": "a"}, "text: Input should be a valid list"),
    ({"text": ["a", 3]}, r"text\[1\]: Input should be a valid string"),
    ({"text": ["a"], "beam_size": "5"}, "beam_size: Input should be a valid integer"),
    ({"text": ["a"], "beam_size": True}, "beam_size: Input should be a valid integer"),
    ({"text": ["a"], "gates": [[1, "0"]]}, r"gates\[0\]\[1\]: Input should be a valid number"),
    ({"text": ["a"], "path": "/etc/passwd"}, "path: Extra inputs are not permitted"),
    ({}, "text: Field required"),
])
def test_the_shape_of_a_body_is_checked_strictly(body, message):
    with pytest.raises(ValidationError) as caught:
        TranslateBody.model_validate(body)
    errors = [{**e, "loc": ("body", *e["loc"])} for e in caught.value.errors()]  # as FastAPI
    assert re.search(message, validation_message(errors))


def test_integers_are_numbers_and_attention_takes_one_sentence():
    assert TranslateBody(text=["a"], length_penalty=1, gates=[[1, 0]]).gates == [[1.0, 0.0]]
    with pytest.raises(ValidationError):
        AttentionBody.model_validate({"text": ["a"]})


def test_invalid_json_is_named():
    errors = [{"type": "json_invalid", "loc": ("body", 3), "msg": "JSON decode error",
               "ctx": {"error": "Expecting value"}}]
    assert validation_message(errors) == "the body is not valid JSON (Expecting value)"


def write_study(run, layers=("enc0 self", "dec0 self", "dec0 cross"), speed_order=None):
    heads = run / "heads"
    heads.mkdir(parents=True)
    gradient = [[0.9, 0.1], [0.6, 0.8], [0.2, 0.98]]
    (heads / "importance.json").write_text(json.dumps({"layers": list(layers),
                                                       "gradient": gradient}))
    (heads / "pruning.json").write_text(json.dumps({
        "orders": {"importance": [[0, 1], [2, 0], [1, 0]], "iterative": [[2, 0], [0, 1]]},
        "curves": {"importance": [[0, 30.0], [1, 29.5], [2, 20.0]],
                   "iterative": [[0, 30.0], [1, 29.9]]}}))
    if speed_order:
        (heads / "speed.json").write_text(json.dumps({"order": speed_order}))
    return gradient


def test_a_head_study_is_read_with_the_order_the_study_pruned_with(tmp_path):
    gradient = write_study(tmp_path, speed_order="iterative")
    study = head_study(tmp_path, CFG)
    assert study == {"available": True, "score": "gradient", "importance": gradient,
                     "order_name": "iterative", "order": [[2, 0], [0, 1]],
                     "steps": [[0, 30.0], [1, 29.9]]}


def test_a_missing_damaged_or_foreign_study_is_not_shown(tmp_path):
    study = head_study(tmp_path, CFG)
    assert study["available"] is False and "mtx-heads" in study["reason"]
    write_study(tmp_path / "other", layers=("enc0 self", "enc1 self", "dec0 self"))
    assert "another model" in head_study(tmp_path / "other", CFG)["reason"]
    write_study(tmp_path / "broken")
    (tmp_path / "broken" / "heads" / "pruning.json").write_text("{")
    assert "pruning.json is not valid JSON" in head_study(tmp_path / "broken", CFG)["reason"]
    odd_files = [("importance.json", "[]"), ("pruning.json", "3"),
                 ("importance.json", json.dumps({"layers": ["enc0 self", "dec0 self", "dec0 cross"],
                                                 "gradient": [[1, "x"], [1, 1], [1, 1]]}))]
    for i, (name, text) in enumerate(odd_files):  # valid JSON, not what mtx-heads writes
        write_study(tmp_path / f"odd{i}")
        (tmp_path / f"odd{i}" / "heads" / name).write_text(text)
        assert head_study(tmp_path / f"odd{i}", CFG)["available"] is False
    write_study(tmp_path / "odd_order", speed_order=["not", "a", "name"])
    assert head_study(tmp_path / "odd_order", CFG)["order_name"] == "importance"  # the default


def test_a_busy_port_is_one_line_before_the_model_loads():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port} .*choose another "
                                              f"port=, or port=0 for a free one"):
            bind("127.0.0.1", port)
    with bind("127.0.0.1", 0) as free:  # port=0: a free port
        assert free.getsockname()[1] > 0
    with pytest.raises(ConfigError, match="host=192.0.2.1 is not an address of this machine"):
        bind("192.0.2.1", 0)  # TEST-NET-1: never this machine's


@pytest.mark.parametrize("host, port, shutdown, words", [
    ("127.0.0.1", 70000, 5, "port=70000: give a port number 1-65535, or 0"),
    ("127.0.0.1", "http", 5, "port=http: give a port number"),
    ("", 8000, 5, "host=: give an address such as 127.0.0.1"),
    ("127.0.0.1", 8000, -1, "shutdown_seconds=-1: give 0 to 3600 seconds"),
    ("127.0.0.1", 8000, "abc", "shutdown_seconds=abc: give 0 to 3600 seconds"),
    ("127.0.0.1", 8000, None, "shutdown_seconds=None: give 0 to 3600 seconds"),
    ("127.0.0.1", 8000, float("inf"), "shutdown_seconds=inf: give 0 to 3600 seconds")])
def test_bad_addresses_are_refused(host, port, shutdown, words):
    cfg = SimpleNamespace(host=host, port=port, shutdown_seconds=shutdown)
    with pytest.raises(ConfigError, match=re.escape(words)):
        check_address(cfg)
    check_address(SimpleNamespace(host="127.0.0.1", port=0, shutdown_seconds=0))  # all fine


def test_decode_defaults_a_request_could_not_ask_for_are_refused_at_start():
    """Else the server would start and refuse every request that gives no settings of its own
    (a length penalty above 10 is refused by DecodeConfig itself, for every command)."""
    with pytest.raises(ConfigError, match=re.escape("decode.beam_size=20 is above "
                                                    "limits.max_beam_size=16")):
        check_decode_defaults(DecodeConfig(beam_size=20), Limits())
    check_decode_defaults(DecodeConfig(beam_size=16, length_penalty=10.0), Limits())  # the edge


def test_a_request_s_work_is_its_subwords_times_the_beam():
    limits = Limits(max_request_work=24)
    ids = [[4, 5, 6], [4]]  # 4 + 2 subwords with their EOS
    assert check_work(ids, 4, limits) == 24
    with pytest.raises(RequestError, match=r"the request is 30 subwords x beam of work .* at most "
                                           r"24 \(limits.max_request_work\)") as caught:
        check_work(ids, 5, limits)
    assert caught.value.status == 413


def test_the_sentence_limit_defaults_to_the_run_s_training_filter():
    assert Limits().for_run(128, 1023).max_sentence_subwords == 128
    assert Limits().for_run(2000, 1023).max_sentence_subwords == 1023  # at most the positions
    assert Limits(max_sentence_subwords=40).for_run(128, 1023).max_sentence_subwords == 40
    with pytest.raises(ConfigError, match=re.escape("limits.max_request_work=0: give source "
                                                    "subwords (with EOS)")):
        Limits(max_request_work=0)
