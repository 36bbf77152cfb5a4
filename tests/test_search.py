"""Search and translation on a toy-trained model: greedy = beam 1, cached = recomputed,
batched = one at a time, and the scripts' behaviour on odd input. Beam search against an
exhaustive search (and a host-side reference beam) on random models small enough to enumerate."""
import dataclasses
import gzip
import itertools
import json
import subprocess
import sys

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np, npx

from mtx.config import DecodeConfig
from mtx.model.transformer import Transformer
from mtx.runs.rundir import load_run
from mtx.decoding.search import Translator, beam_search
from mtx.decoding.search_rules import output_limits
from mtx.data.vocab import BOS, EOS, PAD, SPECIALS
from tests.conftest import ROOT, run_script


def test_output_limits_are_a_times_the_source_plus_b_rounded_up_within_the_model():
    """One function for mtx's search and the CTranslate2 backend: ceil(a * (ids + EOS) + b),
    never more than the model's positions; a number or an array."""
    assert output_limits(4, 1.5, 10, 100) == 16 and output_limits(3, 0.5, 0, 100) == 2
    assert list(output_limits(onp.array([1, 20, 90]), 1.5, 10, 100)) == [12, 40, 100]
    assert output_limits(7, 0.0, 3, 100) == 3


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


def test_greedy_search_reverses_the_toy_inputs(toy):
    model, tokenizer, lines = toy
    src, src_len = _batch(tokenizer, lines)
    greedy = [h[0][0] for h in beam_search(model, src, src_len, beam_size=1, length_penalty=0.0)]
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
    """A gzipped input with a byte-order mark and an empty line: every input line gets its N
    rows (empty ones for the empty line), the mark is not part of the first line."""
    with gzip.open(tmp_path / "in.txt.gz", "wb") as f:
        f.write("\ufeffw1 w2 w3\n\nw5 w6\n".encode())
    done = run_script("translate", f"ckpt={toy_run}", f"input={tmp_path / 'in.txt.gz'}",
                      f"output={tmp_path / 'out.txt'}", "decode.nbest=2",
                      f"attention_png={tmp_path / 'png'}")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    rows = [r.split("\t") for r in (tmp_path / "out.txt").read_text().splitlines()]
    assert [(r[0], r[1]) for r in rows] == [("1", "1"), ("1", "2"), ("2", "1"), ("2", "2"),
                                            ("3", "1"), ("3", "2")]
    assert rows[0][3] == "w3 w2 w1" and float(rows[0][2]) >= float(rows[1][2])
    assert rows[2][3] == rows[3][3] == ""
    pngs = sorted(p.name for p in (tmp_path / "png").glob("*.png"))
    assert pngs == ["decoder_cross_layer1.png", "decoder_cross_layer2.png",
                    "decoder_self_layer1.png", "decoder_self_layer2.png",
                    "encoder_self_layer1.png", "encoder_self_layer2.png"]


def test_translate_script_empty_input_and_stdin_as_output(toy_run, tmp_path):
    (tmp_path / "empty.txt").write_text("")
    done = run_script("translate", f"ckpt={toy_run}", f"input={tmp_path / 'empty.txt'}",
                      f"output={tmp_path / 'out.txt'}")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert (tmp_path / "out.txt").read_text() == ""
    assert "empty.txt has no lines: nothing to translate" in done.stderr.decode()
    data = tmp_path / "data.txt"  # output= the very file standard input reads: refused
    data.write_text("w1 w2\n")
    with open(data, "rb") as stdin:
        done = subprocess.run([sys.executable, str(ROOT / "scripts" / "translate.py"),
                               f"ckpt={toy_run}", f"output={data}"], stdin=stdin,
                              capture_output=True, cwd=ROOT)
    assert done.returncode == 2 and "Traceback" not in done.stderr.decode()
    assert f"output={data} is the file standard input reads" in done.stderr.decode()
    assert data.read_text() == "w1 w2\n"


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
    lp = DecodeConfig().length_penalty  # decode=beam's (the dataclass default is the same)
    scores = json.loads((toy_run / "eval" / f"src.txt.beam3.lp{lp}.json").read_text())
    assert scores["exact_match"] == 100.0


def test_evaluate_names_each_output_limit_apart():
    from mtx.commands.evaluate import decode_name
    default = DecodeConfig()
    assert decode_name(default) == f"beam5.lp{default.length_penalty}"
    longer = dataclasses.replace(default, max_len_a=2, max_len_b=5)
    assert decode_name(longer) == f"beam5.lp{default.length_penalty}.len2.0x+5"
    assert decode_name(dataclasses.replace(default, max_len_b=20)) != decode_name(default)


def test_corrupted_sentencepiece_model_is_one_line(toy_run, tmp_path):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(toy_run, run, ignore=shutil.ignore_patterns("heads", "eval"))
    (run / "spm.model").write_bytes(b"\x00garbage")  # takes precedence over the toy word list
    done = run_script("translate", f"ckpt={run}", stdin=b"w1\n")
    err = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr.decode()
    assert err[-1].startswith("error: ") and "spm.model: not a readable SentencePiece model" in err[-1]


# -- exhaustive search on random models small enough to enumerate ------------------------------
# V = the 4 specials + 2 symbols; every id may be emitted (the model's softmax covers them all).
# With max_len_a=0 one sentence's limit is L = max_len_b: beam_search runs L steps, so the outputs
# are w + [EOS] with len(w) < L (length len(w) + 1) and the L-token sequences cut at the limit
# (length L, no EOS, nothing added to the score).
ALPHAS = (0.0, 0.6, 1.0, 2.0)
SRC_IDS = [4, 5, 4, EOS]


def _penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha  # GNMT, written out again as the reference


def _tiny_vocab_model(tiny_cfg, seed):
    mx.random.seed(seed)
    model = Transformer(dataclasses.replace(tiny_cfg, vocab_size=len(SPECIALS) + 2))
    model.initialize()
    return model


def _source(ids=SRC_IDS):
    return np.array([ids], dtype="int32"), np.array([len(ids)], dtype="int32")


def _next_log_probs(model, src, src_len, L):
    """{prefix (tuple of non-EOS ids, len < L): log-probabilities (V,) of the next token}, from
    full teacher-forced forwards (not the cached `step` beam_search uses)."""
    alive = [v for v in range(model.cfg.vocab_size) if v != EOS]
    table = {}
    for n in range(L):
        prefixes = list(itertools.product(alive, repeat=n))
        tgt_in = np.array([[BOS, *p] for p in prefixes], dtype="int32")
        rows = len(prefixes)
        logits = model(np.repeat(src, rows, axis=0), np.repeat(src_len, rows, axis=0), tgt_in)
        log_probs = npx.log_softmax(logits, axis=-1)[:, -1].asnumpy().astype("float64")
        table.update(zip(prefixes, log_probs))
    return table


def _exhaustive(table, L, alpha):
    """Every output sequence [(ids without EOS, normalised score)], best first."""
    def raw(ids):
        return sum(table[tuple(ids[:i])][ids[i]] for i in range(len(ids)))
    seqs = []
    for prefix, log_probs in table.items():
        with_eos = raw(prefix) + log_probs[EOS]
        seqs.append((list(prefix), with_eos / _penalty(len(prefix) + 1, alpha)))
        if len(prefix) == L - 1:
            seqs += [([*prefix, v], raw([*prefix, v]) / _penalty(L, alpha))
                     for v in range(len(log_probs)) if v != EOS]
    return sorted(seqs, key=lambda s: -s[1])


def _reference_beam(table, L, K, alpha):
    """Beam search on the host with every hypothesis's true length: at each step all
    continuations (a finished hypothesis has one: itself) ranked by normalised score, top K kept."""
    beams = [((), 0.0, 0, False)]  # (ids, sum of log-probabilities, length incl. EOS, finished)
    for _ in range(L):
        cands = []
        for ids, raw, length, done in beams:
            cands += ([(ids, raw, length, True)] if done else
                      [(ids + (v,), raw + lp, length + 1, v == EOS)
                       for v, lp in enumerate(table[ids])])
        beams = sorted(cands, key=lambda c: -c[1] / _penalty(c[2], alpha))[:K]
    hyps = [([i for i in ids if i != EOS], raw / _penalty(length, alpha))
            for ids, raw, length, _ in beams]
    return sorted(hyps, key=lambda h: -h[1])


def _assert_same(got, want):
    assert [ids for ids, _ in got] == [ids for ids, _ in want]
    assert onp.allclose([s for _, s in got], [s for _, s in want], atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("L", [2, 3])
def test_beam_search_against_exhaustive_search(tiny_cfg, seed, L):
    """What holds for any beam: every hypothesis returned is a real output with its true score, so
    the best is never better than the exhaustive best, and it equals it (the whole n-best list
    equals the enumeration, best first) when the beam holds as many hypotheses as there are outputs
    (N = 1 + 5 + ... + 5**L here): no candidate can then be pruned, since every candidate at a
    step is the prefix of a different output. Not asserted: that a larger beam never returns a
    worse best than a smaller one. Beam search does not guarantee it (with K=2 both survivors of a
    step can extend the runner-up of step 1 and all end badly, while K=1 kept the prefix whose
    continuation was good)."""
    model = _tiny_vocab_model(tiny_cfg, seed)
    src, src_len = _source()
    table = _next_log_probs(model, src, src_len, L)
    for alpha in ALPHAS:
        every = _exhaustive(table, L, alpha)
        score_of = {tuple(ids): score for ids, score in every}
        N = len(every)
        assert N == sum(5 ** n for n in range(L + 1))
        for K in (1, 2, 5, N):
            hyps = beam_search(model, src, src_len, K, alpha, 0.0, L, nbest=K)[0]
            for ids, score in hyps:
                assert score == pytest.approx(score_of[tuple(ids)], abs=1e-4)
            assert hyps[0][1] <= every[0][1] + 1e-4
        _assert_same(hyps, every)


@pytest.mark.parametrize("seed", [0, 1, 3, 4])
@pytest.mark.parametrize("L", [3, 4])
def test_beam_search_equals_reference_beam(tiny_cfg, seed, L):
    """Where the beam prunes, beam_search keeps exactly the hypotheses a host-side beam that scores
    each by its true length keeps. Before the fix (length t + 1 - finished while choosing beams) a
    hypothesis that had ended two or more steps earlier was scored as longer, hence better under
    a length penalty, and survived in place of a better one: e.g. seed 1, L 3, alpha 0.6, K 6
    kept [] (EOS first, length 1 scored as 2) instead of [2, 2, 0]; also seed 1 L 4, seed 3 L 3
    and L 4, seed 4 L 3."""
    model = _tiny_vocab_model(tiny_cfg, seed)
    src, src_len = _source()
    table = _next_log_probs(model, src, src_len, L)
    for alpha in ALPHAS:
        for K in (2, 3, 6):
            _assert_same(beam_search(model, src, src_len, K, alpha, 0.0, L, nbest=K)[0],
                         _reference_beam(table, L, K, alpha))


def test_a_sentence_scores_the_same_whatever_its_batch(tiny_cfg):
    """A sentence whose limit (here 2) is below its batch-mate's (4) is forced to EOS at its
    limit while the batch goes on; that EOS is not counted in the length, so its hypotheses and
    scores are those of the sentence alone (and of the reference beam); before the fix the forced
    EOS lengthened every hypothesis cut at the limit."""
    model = _tiny_vocab_model(tiny_cfg, 1)
    src = np.array([[4, EOS, PAD, PAD], [5, 4, 5, EOS]], dtype="int32")
    src_len = np.array([2, 4], dtype="int32")
    alone_src, alone_len = _source([4, EOS])
    table = _next_log_probs(model, alone_src, alone_len, 2)
    for alpha in ALPHAS:
        batched = beam_search(model, src, src_len, 3, alpha, 1.0, 0, nbest=3)[0]
        alone = beam_search(model, alone_src, alone_len, 3, alpha, 1.0, 0, nbest=3)[0]
        _assert_same(batched, alone)
        _assert_same(alone, _reference_beam(table, 2, 3, alpha))


def test_sentences_that_end_leave_the_batch_without_changing_the_others(toy):
    """Sentences of very different lengths in one batch: the short ones end first and leave it
    (their rows are dropped from the cache); every sentence's n-best list and scores are those it
    gets alone, whatever the order of the batch."""
    model, tokenizer, _ = toy
    lines = ["w1", "w2 w3 w4 w5 w6 w7 w8 w9 w10 w11", "w4 w5", "w12 w13 w14 w15 w16 w17"]
    for order in (lines, lines[::-1]):
        src, src_len = _batch(tokenizer, order)
        batched = beam_search(model, src, src_len, 4, 1.0, 1.5, 2, nbest=4)
        for line, hyps in zip(order, batched):
            alone = beam_search(model, *_batch(tokenizer, [line]), 4, 1.0, 1.5, 2, nbest=4)[0]
            _assert_same(hyps, alone)


def test_a_zero_length_limit_gives_empty_outputs(toy):
    model, tokenizer, lines = toy
    src, src_len = _batch(tokenizer, lines[:3])
    for K in (1, 3):
        hyps = beam_search(model, src, src_len, K, 1.0, 0.0, 0, nbest=1)
        assert [h[0][0] for h in hyps] == [[], [], []]


def test_an_ensemble_of_one_and_of_two_copies_decodes_as_the_model_alone(toy):
    from mtx.decoding.ensemble import Ensemble
    model, tokenizer, lines = toy
    cfg = DecodeConfig(beam_size=4, nbest=2)
    alone = Translator(model, tokenizer, cfg, mx.cpu()).translate_nbest(lines)
    for models in ([model], [model, model]):  # the mean of equal log-probabilities is theirs
        together = Translator(Ensemble(models), tokenizer, cfg, mx.cpu()).translate_nbest(lines)
        assert [[t for t, _ in n] for n in together] == [[t for t, _ in n] for n in alone]
        assert onp.allclose([[s for _, s in n] for n in together],
                            [[s for _, s in n] for n in alone], atol=1e-5)


def test_ensembles_from_translate_and_evaluate_and_a_mismatched_vocabulary_is_one_line(
        toy_run, tmp_path):
    import shutil
    lines = b"w1 w2 w3\nw4 w5 w6 w7\n"
    alone = run_script("translate", f"ckpt={toy_run}", "decode=greedy", stdin=lines)
    twice = run_script("translate", f"ckpt={toy_run}", "decode=greedy", f"ensemble=[{toy_run}]",
                       stdin=lines)
    assert twice.returncode == 0, twice.stderr.decode()[-2000:]
    assert twice.stdout == alone.stdout and twice.stdout.decode().count("\n") == 2
    (tmp_path / "src.txt").write_bytes(lines)
    (tmp_path / "ref.txt").write_bytes(b"w3 w2 w1\nw7 w6 w5 w4\n")
    scored = run_script("evaluate", f"ckpt={toy_run}", "decode=greedy", f"ensemble=[{toy_run}]",
                        f"source={tmp_path / 'src.txt'}", f"reference={tmp_path / 'ref.txt'}",
                        f"out_dir={tmp_path / 'eval'}")
    assert scored.returncode == 0, scored.stderr.decode()[-2000:]
    assert list((tmp_path / "eval").glob("*.ensemble2.*.hyp"))
    other = tmp_path / "other_vocabulary"
    shutil.copytree(toy_run, other, ignore=shutil.ignore_patterns("eval", "heads"))
    symbols = json.loads((other / "toy_symbols.json").read_text())
    (other / "toy_symbols.json").write_text(json.dumps([f"x{s}" for s in symbols]))
    mixed = run_script("translate", f"ckpt={toy_run}", f"ensemble=[{other}]", stdin=lines)
    err = mixed.stderr.decode().strip().splitlines()
    assert mixed.returncode == 2 and "another vocabulary" in err[-1] and "Traceback" not in \
        mixed.stderr.decode()
    assert not mixed.stdout


def test_a_translation_batch_holds_at_most_640_hypotheses(toy, monkeypatch):
    """Sentences per batch: at most 640 // beam (the caches grow with the hypotheses), and 256."""
    from mtx.decoding import search
    model, tokenizer, lines = toy
    sizes = []

    def recorded(model, src, *args, **kwargs):
        sizes.append(src.shape[0])
        return beam_search(model, src, *args, **kwargs)

    monkeypatch.setattr(search, "beam_search", recorded)
    short = ["w1 w2"] * 300  # 3 subwords with EOS: batch_tokens alone would allow all 300
    for beam, most in ((5, 128), (1, 256), (8, 80)):
        sizes.clear()
        cfg = DecodeConfig(beam_size=beam, batch_tokens=100000)
        assert len(Translator(model, tokenizer, cfg, mx.cpu()).translate(short)) == 300
        assert max(sizes) == most and sum(sizes) == 300
