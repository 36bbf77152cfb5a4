"""mtx.deploy: the CTranslate2 export is exact (teacher-forced log-probabilities equal mtx's for
post- and pre-norm, tied and untied embeddings, word and SentencePiece vocabularies, and a pruned
model whose heads are zero-padded), decodes the trained toy run's test sentences as mtx does, keeps
every promise of mtx-translate, and says in one line what it cannot do or how to install it."""
import json
import subprocess
import sys

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np, npx

from conftest import model_config, run_command
from mtx.bench.__main__ import main as bench_main
from mtx.config import DataConfig, DecodeConfig
from mtx.deploy import EXPORT_INFO, require
from mtx.deploy.backend import CTranslate2Translator
from mtx.deploy.export import export, export_run
from mtx.errors import ConfigError, FileWriteError
from mtx.model.transformer import Transformer
from mtx.runs.rundir import RunDir, load_run, run_identity
from mtx.decoding.search import Translator
from mtx.data.toy import make_toy, toy_symbols
from mtx.data.vocab import BOS, EOS, PAD, WordTokenizer

SYMBOLS = toy_symbols(20)  # the toy task's words: vocabulary 24 with the 4 specials
GREEDY = DecodeConfig(beam_size=1, length_penalty=0.0)
BEAM = DecodeConfig(beam_size=5, length_penalty=1.0, nbest=5)


def random_model(cfg):
    """``cfg``'s Transformer with every parameter random (biases and LayerNorms included), so a
    parameter mapped to the wrong place changes the numbers."""
    model = Transformer(cfg)
    model.initialize(mx.init.Xavier())
    rng = onp.random.RandomState(3)
    for name, param in model.collect_params().items():
        if not name.endswith("positions"):
            param.set_data(np.array(rng.normal(0, 0.3, param.shape).astype("float32")))
    return model


def small_cfg(**changes):
    return model_config(**{**dict(num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                                  dropout=0.0, attention_dropout=0.0, max_len=32,
                                  vocab_size=len(SYMBOLS) + 4), **changes})


def word_tokenizer_file(tmp_path):
    path = tmp_path / "tok" / "toy_symbols.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(SYMBOLS))
    return path


def mtx_log_probs(model, src_ids, tgt_ids):
    """Teacher-forced log-probabilities of tgt_ids + EOS given src_ids + EOS, per sentence."""
    S, T = max(map(len, src_ids)) + 1, max(map(len, tgt_ids)) + 1
    src = onp.full((len(src_ids), S), PAD, "int32")
    tgt_in = onp.full((len(tgt_ids), T), PAD, "int32")
    for r, (s, t) in enumerate(zip(src_ids, tgt_ids)):
        src[r, :len(s) + 1] = s + [EOS]
        tgt_in[r, :len(t) + 1] = [BOS] + t
    src_len = np.array([len(s) + 1 for s in src_ids], dtype="int32")
    logp = npx.log_softmax(model(np.array(src), src_len, np.array(tgt_in)), axis=-1).asnumpy()
    return [onp.array([logp[r, i, y] for i, y in enumerate(t + [EOS])])
            for r, t in enumerate(tgt_ids)]


def ct2_log_probs(model_dir, tokenizer, src_ids, tgt_ids):
    translator = require().Translator(str(model_dir), device="cpu", intra_threads=2)
    pieces = tokenizer.pieces(range(len(tokenizer)))
    results = translator.score_batch([[pieces[i] for i in s] for s in src_ids],
                                     [[pieces[i] for i in t] for t in tgt_ids])
    return [onp.array(r.log_probs) for r in results]


def sentences(vocab_size, count, seed=0):
    rng = onp.random.RandomState(seed)
    return [[int(i) for i in rng.randint(4, vocab_size, rng.randint(1, 9))] for _ in range(count)]


@pytest.mark.parametrize("changes", [
    dict(),                                            # post-norm, tied (the default run)
    dict(pre_norm=True, tie_embeddings=False),
    dict(heads_per_layer=[1, 4, 2, 3, 1, 4]),          # pruned: zero heads added
], ids=["post-norm-tied", "pre-norm-untied", "pruned"])
def test_export_gives_mtx_log_probabilities(changes, tmp_path):
    model = random_model(small_cfg(**changes))
    record = export(model, word_tokenizer_file(tmp_path), tmp_path / "ct2")
    src, tgt = sentences(model.cfg.vocab_size, 6), sentences(model.cfg.vocab_size, 6, seed=1)
    expected = mtx_log_probs(model, src, tgt)
    got = ct2_log_probs(tmp_path / "ct2", WordTokenizer(SYMBOLS), src, tgt)
    for e, g in zip(expected, got):
        assert onp.allclose(e, g, atol=2e-4), (e, g)
    assert record["padded_heads"] == (4 * 6 - 15 if "heads_per_layer" in changes else 0)


def test_sentencepiece_vocabulary_maps_by_piece(tmp_path):
    from mtx.data.vocab import SentencePieceTokenizer, train_sentencepiece
    rng = onp.random.RandomState(0)
    words = ["a", "man", "rides", "bike", "down", "the", "street", "dog", "runs", "green"]
    texts = [" ".join(rng.choice(words, rng.randint(3, 9))) for _ in range(300)]
    spm_file = train_sentencepiece(texts, 40, tmp_path / "spm")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "spm.model").write_bytes(spm_file.read_bytes())
    tokenizer = SentencePieceTokenizer(tmp_path / "run" / "spm.model")
    model = random_model(small_cfg(vocab_size=len(tokenizer)))
    export(model, tmp_path / "run" / "spm.model", tmp_path / "ct2")
    src = tokenizer.encode(texts[:4])
    expected = mtx_log_probs(model, src, src)
    for e, g in zip(expected, ct2_log_probs(tmp_path / "ct2", tokenizer, src, src)):
        assert onp.allclose(e, g, atol=2e-4)
    out = CTranslate2Translator(tmp_path / "ct2", GREEDY).translate(["a man rides", "", "dog"])
    assert len(out) == 3 and out[1] == ""


def test_int8_export_of_a_pruned_model_translates(tmp_path):
    """Zero-padded heads are all-zero rows: int8 quantization must not turn them into NaN."""
    model = random_model(small_cfg(heads_per_layer=[1, 4, 2, 3, 1, 4]))
    export(model, word_tokenizer_file(tmp_path), tmp_path / "ct2", quantization="int8")
    src = sentences(model.cfg.vocab_size, 3)
    scores = ct2_log_probs(tmp_path / "ct2", WordTokenizer(SYMBOLS), src, src)
    assert all(onp.isfinite(g).all() for g in scores)


def test_unsupported_settings_are_one_line(tmp_path):
    model = random_model(small_cfg())
    with pytest.raises(ConfigError, match="float32, int8, int16"):
        export(model, word_tokenizer_file(tmp_path), tmp_path / "a", quantization="float16")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(FileWriteError, match="not an mtx export"):
        export(model, word_tokenizer_file(tmp_path), tmp_path / "other")
    model.cast("float16")
    with pytest.raises(ConfigError, match="float16"):
        export(model, word_tokenizer_file(tmp_path), tmp_path / "b")


def test_without_ctranslate2_the_message_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` fails
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[deploy\]'"):
        require()


def make_run(path, model, data_cfg=DataConfig(name="toy")):
    """A run directory with ``model`` as its best checkpoint and the toy task's words."""
    run = RunDir(path)
    run.start(run_identity(model.cfg, data_cfg, "none"), model.cfg, data_cfg, None)
    run.checkpoints.save("best", model)
    (path / "toy_symbols.json").write_text(json.dumps(SYMBOLS))
    return path


def test_bench_decode_puts_ctranslate2_beside_mtx_on_a_run(tmp_path, capsys):
    """``mtx-bench decode --run``: each implementation translates the run's test sentences with
    beam 5 and greedily; a CTranslate2 row exports in another process and never loads MXNet."""
    run = make_run(tmp_path / "run", random_model(small_cfg()))
    code = ("import json, sys; from types import SimpleNamespace as N; "
            "from mtx.bench.measure import measure; "
            f"r = measure('decode', 'ct2-int8', N(run={str(run)!r}, max_sentences=4, rounds=1)); "
            "print(json.dumps({**r['decode']['ct2-int8'], 'mxnet': 'mxnet' in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    ct2 = json.loads(done.stdout.decode().splitlines()[-1])
    assert ct2["mxnet"] is False and ct2["precision"] == "int8" and ct2["sentences"] == 4
    bench_main(["decode", "--run", str(run), "--impl", "mtx", "--max-sentences", "4",
                "--out", str(tmp_path / "mtx.json")])
    mtx_row = json.loads((tmp_path / "mtx.json").read_text())["decode"]["mtx"]
    for key in ("beam5_seconds", "beam5_subwords_s", "beam5_sacrebleu", "greedy_sent_s",
                "greedy_subwords_s", "greedy_sacrebleu"):
        assert key in mtx_row and key in ct2, key
    assert "peak_rss_mb" in mtx_row
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # a CTranslate2 row needs a trained run
        bench_main(["decode", "--impl", "ct2-int8"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "--impl ct2-int8 translates a trained run: give --run RUN_DIR" in err


@pytest.mark.slow
def test_export_command_and_the_backend_keep_translate_s_promises(tmp_path):
    run = make_run(tmp_path / "run", random_model(small_cfg()))
    done = run_command("export", f"ckpt={run}", f"output={tmp_path / 'ct2'}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    info = json.loads((tmp_path / "ct2" / EXPORT_INFO).read_text())
    assert info["run"] == str(run.resolve()) and info["quantization"] == "float32"
    assert (tmp_path / "ct2" / "toy_symbols.json").is_file()
    assert (tmp_path / "ct2" / "data.json").read_bytes() == (run / "data.json").read_bytes()
    lines = b"w1 w2 w3\n\n\xff\xfe bad\nw4 w5\n"
    mtx_out = run_command("translate", f"ckpt={run}", "decode.nbest=3", stdin=lines, cwd=tmp_path)
    ct2_out = run_command("translate", f"ckpt={tmp_path / 'ct2'}", "decode.nbest=3", stdin=lines,
                          cwd=tmp_path)
    assert ct2_out.returncode == 0, ct2_out.stderr.decode()[-2000:]
    rows = [line.split("\t") for line in ct2_out.stdout.decode().splitlines()]
    assert [r[:2] for r in rows] == [[str(line), str(rank)] for line in range(1, 5)
                                     for rank in range(1, 4)]  # N rows for every input line
    assert rows[3:9] == [[str(line), str(rank), "0.0000", ""] for line in (2, 3)
                         for rank in range(1, 4)]  # the empty and the invalid line: empty rows
    assert all(float(a[2]) >= float(b[2]) for a, b in zip(rows[9:], rows[10:]))  # best first
    assert "line 3: invalid UTF-8" in ct2_out.stderr.decode()
    assert [r[0] for r in rows] == [line.split("\t")[0]
                                    for line in mtx_out.stdout.decode().splitlines()]
    greedy = run_command("translate", f"ckpt={tmp_path / 'ct2'}", "decode=greedy", stdin=lines,
                         cwd=tmp_path)
    assert len(greedy.stdout.decode().split("\n")) == 5  # 4 lines and the final newline
    on_the_fly = run_command("translate", f"ckpt={run}", "backend=ctranslate2", "decode=greedy",
                             stdin=lines, cwd=tmp_path)  # the training run, exported for it
    assert on_the_fly.returncode == 0, on_the_fly.stderr.decode()[-2000:]
    assert on_the_fly.stdout == greedy.stdout


@pytest.mark.parametrize("overrides, message", [
    (["quantization=float16"], "choose one of float32, int8, int16"),
    (["format=onnx"], "format=onnx: choose one of ctranslate2"),
])
def test_export_command_refuses_in_one_line(overrides, message, tmp_path):
    run = make_run(tmp_path / "run", random_model(small_cfg()))
    done = run_command("export", f"ckpt={run}", f"output={tmp_path / 'x'}", *overrides,
                       cwd=tmp_path)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1 and message in err, err


def test_commands_without_ctranslate2_say_how_to_install(tmp_path):
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "ctranslate2.py").write_text("raise ImportError('simulated: not installed')\n")
    env = {"PYTHONPATH": str(fake)}
    for name, overrides in (("export", [f"output={tmp_path / 'x'}"]),
                            ("translate", ["backend=ctranslate2"])):
        done = run_command(name, f"ckpt={tmp_path}", *overrides, stdin=b"w1\n", cwd=tmp_path,
                           env=env)
        err = done.stderr.decode()
        assert done.returncode == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert "pip install -e '.[deploy]'" in err


def test_toy_run_decodes_the_same_with_ctranslate2(toy_run, tmp_path):
    """The trained toy run exported to float32 gives mtx's tokens for every test sentence, greedy
    and with beam 5 (GNMT length penalties 1 and 0.6, as in mtx), also where max_len_a/b cut the
    output, and the same best scores."""
    export_run(toy_run, tmp_path / "ct2")
    model, tokenizer, data_cfg = load_run(toy_run, mx.cpu())
    src = make_toy(data_cfg.task, data_cfg.num_symbols, data_cfg.min_len, data_cfg.max_toy_len,
                   data_cfg.sizes, 1)["test_2016_flickr"][0]
    short = dict(max_len_a=0.0, max_len_b=3)
    for decode_cfg in (GREEDY, BEAM, DecodeConfig(beam_size=5, length_penalty=0.6),
                       DecodeConfig(beam_size=1, length_penalty=0.0, **short),
                       DecodeConfig(beam_size=5, length_penalty=1.0, **short)):
        expected = Translator(model, tokenizer, decode_cfg, mx.cpu()).translate_nbest(src)
        got = CTranslate2Translator(tmp_path / "ct2", decode_cfg).translate_nbest(src)
        assert [e[0][0] for e in expected] == [g[0][0] for g in got], decode_cfg
        assert onp.allclose([e[0][1] for e in expected], [g[0][1] for g in got], atol=1e-3)


def test_bad_export_outputs_and_backends_are_one_line(tmp_path, monkeypatch):

    from mtx.deploy import backend_of
    from mtx.deploy.export import _prepare_output
    a_file, other = tmp_path / "model.txt", tmp_path / "other"
    a_file.write_text("x")
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileWriteError, match="is a file; give a directory"):
        _prepare_output(a_file)
    with pytest.raises(FileWriteError, match="is a non-empty directory that is not an mtx export"):
        _prepare_output(other)
    with pytest.raises(FileWriteError, match="is not a writable directory"):
        _prepare_output(tmp_path / "no" / "such" / "dir")
    assert _prepare_output(tmp_path / "new") == tmp_path / "new"  # new, empty: fine
    exported = tmp_path / "exported"
    exported.mkdir()
    (exported / EXPORT_INFO).write_text("{}")
    assert _prepare_output(exported) == exported  # an earlier export is replaced
    empty = tmp_path / "empty"
    empty.mkdir()
    with monkeypatch.context() as patch:  # output=. inside an empty directory: its full path
        patch.chdir(empty)
        assert _prepare_output(".") == empty
    with pytest.raises(ConfigError, match="backend=foo: choose one of"):
        backend_of("foo", str(other))
    with pytest.raises(ConfigError, match="is a CTranslate2 export, which mtx's decoder does not"):
        backend_of("mtx", str(exported))
    assert backend_of("auto", str(exported)) == "ctranslate2"
    assert backend_of("auto", str(other)) == "mtx"


@pytest.mark.parametrize("flags, cap, quantization, device, expected", [
    ({"avx2", "avx512f", "avx512_vnni"}, None, "int8", "cpu", "default"),  # VNNI: int8 products
    ({"avx2", "avx_vnni"}, None, "int8", "cpu", "default"),                # AVX-VNNI client CPUs
    ({"fma", "avx", "avx2"}, None, "int8", "cpu", "float32"),              # AVX2 only
    ({"avx2", "avx512f", "avx512_vnni"}, "AVX2", "int8", "cpu", "float32"),  # capped
    ({"avx2", "avx512f", "avx512_vnni"}, "AVX512", "int8", "cpu", "default"),
    ({"fma", "avx", "avx2"}, None, "float32", "cpu", "default"),
    ({"fma", "avx", "avx2"}, None, "int8", "gpu", "default"),
])
def test_int8_computes_in_int8_only_where_the_cpu_has_dot_products(monkeypatch, flags, cap,
                                                                    quantization, device, expected):
    from mtx.hardware import cpu
    from mtx.deploy import backend
    monkeypatch.setattr(cpu, "cpu_flags", lambda: set(flags))
    if cap:
        monkeypatch.setenv("CT2_FORCE_CPU_ISA", cap)
    else:
        monkeypatch.delenv("CT2_FORCE_CPU_ISA", raising=False)
    assert backend.compute_type(quantization, device) == expected
