"""Search and translation on a toy-trained model: greedy = beam 1, cached = recomputed,
batched = one at a time, and the scripts' behaviour on odd input."""
import json

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np, npx

from mtx.config import DecodeConfig
from mtx.run import load_run
from mtx.search import Translator, beam_search, greedy_search
from mtx.vocab import BOS, EOS
from tests.conftest import run_script


@pytest.fixture(scope="module")
def toy(toy_run):
    model, tokenizer, _ = load_run(toy_run, mx.cpu())
    rng = onp.random.RandomState(0)
    lines = [" ".join(f"w{i}" for i in rng.randint(0, 20, rng.randint(3, 12))) for _ in range(24)]
    return model, tokenizer, lines


def _batch(tokenizer, lines):
    ids = tokenizer.encode(lines)
    S = max(len(i) for i in ids) + 1
    src = onp.zeros((len(ids), S), "int32")
    for r, row in enumerate(ids):
        src[r, :len(row) + 1] = row + [EOS]
    return np.array(src), np.array([len(i) + 1 for i in ids], dtype="int32")


def test_greedy_equals_beam_of_one(toy):
    model, tokenizer, lines = toy
    src, src_len = _batch(tokenizer, lines)
    greedy = greedy_search(model, src, src_len)
    beam1 = [h[0][0] for h in beam_search(model, src, src_len, beam_size=1, length_penalty=0.0)]
    assert greedy == beam1
    assert sum(g == tokenizer.encode([line])[0][::-1] for g, line in zip(greedy, lines)) >= 20


def _greedy_recomputing_the_prefix(model, src, src_len, steps):
    """Reference: no cache, the whole prefix through the full forward at every step."""
    tgt = onp.full((src.shape[0], 1), BOS, "int32")
    scores = onp.zeros(src.shape[0])
    for _ in range(steps):
        logp = npx.log_softmax(model(src, src_len, np.array(tgt)), axis=-1)[:, -1].asnumpy()
        nxt = logp.argmax(-1)
        scores += logp[onp.arange(len(nxt)), nxt]
        tgt = onp.concatenate([tgt, nxt[:, None].astype("int32")], axis=1)
    return tgt[:, 1:], scores


def test_cached_decoding_equals_recomputing(toy):
    model, tokenizer, lines = toy
    src, src_len = _batch(tokenizer, lines[:6])
    state = model.init_state(src, src_len)
    tokens, scores = np.full((6,), BOS, dtype="int32"), onp.zeros(6)
    cached = []
    for _ in range(8):
        logp, _ = model.step(tokens, state)
        tokens = logp.argmax(axis=-1).astype("int32")
        scores += logp.asnumpy()[onp.arange(6), tokens.asnumpy()]
        cached.append(tokens.asnumpy())
    full_tokens, full_scores = _greedy_recomputing_the_prefix(model, src, src_len, 8)
    assert onp.array_equal(onp.stack(cached, 1), full_tokens)
    assert onp.allclose(scores, full_scores, atol=1e-5)


def test_batch_translation_equals_one_at_a_time(toy):
    model, tokenizer, lines = toy
    translator = Translator(model, tokenizer, DecodeConfig(beam_size=4), mx.cpu())
    batched = translator.translate_nbest(lines)
    for line, result in zip(lines[:8], batched):
        alone = translator.translate_nbest([line])[0]
        assert alone[0][0] == result[0][0]
        assert alone[0][1] == pytest.approx(result[0][1], abs=1e-4)


def test_nbest_is_sorted_and_respects_max_length(toy):
    model, tokenizer, lines = toy
    cfg = DecodeConfig(beam_size=4, nbest=3, max_len_a=0.0, max_len_b=3)
    for nbest in Translator(model, tokenizer, cfg, mx.cpu()).translate_nbest(lines[:5]):
        assert len(nbest) == 3
        assert [s for _, s in nbest] == sorted((s for _, s in nbest), reverse=True)
        assert all(len(text.split()) <= 3 for text, _ in nbest)


def test_translate_script_keeps_one_line_per_input(toy_run):
    lines = [b"w1 w2 w3", b"", b"w4 \xff\xfe w5", b"w3 " * 400, b"w7 w8 w9 w10"]
    done = run_script("translate", f"ckpt={toy_run}", "decode=greedy",
                      stdin=b"\n".join(lines) + b"\n")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    out = done.stdout.decode().split("\n")
    assert len(out) == len(lines) + 1 and out[-1] == ""
    assert out[0] == "w3 w2 w1" and out[1] == "" and out[2] == "" and out[4] == "w10 w9 w8 w7"
    err = done.stderr.decode()
    assert "line 3: invalid UTF-8" in err and "line 4 has 400 subwords" in err


def test_translate_script_files_and_nbest(toy_run, tmp_path):
    (tmp_path / "in.txt").write_text("w1 w2 w3\nw5 w6\n")
    done = run_script("translate", f"ckpt={toy_run}", f"input={tmp_path / 'in.txt'}",
                      f"output={tmp_path / 'out.txt'}", "decode.nbest=2",
                      f"attention_png={tmp_path / 'png'}")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    rows = [r.split("\t") for r in (tmp_path / "out.txt").read_text().splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("1", "1"), ("1", "2"), ("2", "1"), ("2", "2")]
    assert rows[0][3] == "w3 w2 w1" and float(rows[0][2]) >= float(rows[1][2])
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == ["decoder_cross_layer1.png", "decoder_cross_layer2.png",
                    "decoder_self_layer1.png", "decoder_self_layer2.png",
                    "encoder_self_layer1.png", "encoder_self_layer2.png"]


def test_translate_script_bad_checkpoint_is_one_line(toy_run, tmp_path):
    done = run_script("translate", f"ckpt={tmp_path / 'missing'}", stdin=b"w1\n")
    assert done.returncode == 2 and "Traceback" not in done.stderr.decode()
    assert done.stderr.decode().strip().splitlines()[-1].startswith("error: ckpt=")


def test_evaluate_script_scores_files(toy_run, tmp_path):
    (tmp_path / "src.txt").write_text("w1 w2 w3\nw5 w6 w7 w8\n")
    (tmp_path / "ref.txt").write_text("w3 w2 w1\nw8 w7 w6 w5\n")
    done = run_script("evaluate", f"ckpt={toy_run}", f"source={tmp_path / 'src.txt'}",
                      f"reference={tmp_path / 'ref.txt'}", "decode.beam_size=3")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    out = done.stdout.decode()
    assert "src.txt sacrebleu = 100.00  nrefs:1|case:mixed" in out and "chrf" in out
    scores = json.loads((toy_run / "eval" / "src.txt.beam3.lp1.0.json").read_text())
    assert scores["exact_match"] == 100.0


def test_corrupted_sentencepiece_model_is_one_line(toy_run, tmp_path):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(toy_run, run, ignore=shutil.ignore_patterns("heads", "eval"))
    (run / "spm.model").write_bytes(b"\x00garbage")  # takes precedence over the toy word list
    done = run_script("translate", f"ckpt={run}", stdin=b"w1\n")
    err = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr.decode()
    assert err[-1].startswith("error: ") and "spm.model: not a readable SentencePiece model" in err[-1]
