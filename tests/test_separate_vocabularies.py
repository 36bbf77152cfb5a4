"""data.vocab=separate: one SentencePiece model a side, learnt from that side's text (or given,
data.spm_model=[source, target]); the source gets its own embedding, the target's stays tied to
the output; training, translation, evaluation, export, serving and the head study read both."""
import json
import sys

import pytest

from conftest import ROOT, run_script
from mtx.bench.serve import ServerProcess
from mtx.config import ModelConfig
from mtx.data.corpus import load_corpus
from mtx.data.vocabularies import SeparateTokenizer
from mtx.errors import ConfigError
from servers import post
from test_cli import assert_one_line
from test_files_corpus import corpus_dir, files_config  # noqa: F401 (a fixture)
from test_files_end_to_end import lines_of, multi30k_lines, write_pair


def test_each_side_learns_its_own_vocabulary_from_its_own_text(corpus_dir):  # noqa: F811
    joint = load_corpus(files_config(corpus_dir), corpus_dir / "data", seed=0)
    corpus = load_corpus(files_config(corpus_dir, vocab="separate"), corpus_dir / "data", seed=0)
    tokenizer = corpus.tokenizer
    assert isinstance(tokenizer, SeparateTokenizer) and tokenizer.source is not tokenizer.target
    assert len(tokenizer.source) == len(tokenizer.target) == 60 == len(joint.tokenizer)
    # every source line starts with "en", every target line with "de" (files_config's corpus)
    assert tokenizer.source.has_piece("▁en") and not tokenizer.source.has_piece("▁de")
    assert tokenizer.target.has_piece("▁de") and not tokenizer.target.has_piece("▁en")
    src, tgt = corpus.train_pairs()
    text = corpus.training_text
    assert tokenizer.source.decode(src[:3]) == text.lines(0, 0, 3)
    assert tokenizer.decode(tgt[:3]) == text.lines(1, 0, 3)  # what the model writes: target
    assert corpus.ids["val"][0][0] == tokenizer.source.encode(corpus.text["val"][0][:1])[0]
    again = load_corpus(files_config(corpus_dir / "other", vocab="separate",
                                     spm_model=list(tokenizer.model_paths),
                                     train=str(corpus_dir / "train"),
                                     valid=str(corpus_dir / "dev")), corpus_dir / "data2", seed=0)
    assert again.tokenizer.definition() == tokenizer.definition()  # given, used as they are
    assert not (corpus_dir / "data2" / "spm").exists()


@pytest.mark.parametrize("settings, message", [
    ({"vocab": "separate", "spm_model": "one.model"}, r"^data\.spm_model=.*one\.model: give one "
                                                      r"model file with data\.vocab=joint, "
                                                      r"\[source model, target model\] with "
                                                      r"data\.vocab=separate$"),
    ({"spm_model": ["a.model", "b.model"]}, r"^data\.spm_model=.*give one model file"),
    ({"vocab": "shared"}, r"^data\.vocab=shared: give joint \(one SentencePiece model"),
])
def test_vocabulary_kinds_and_models_that_do_not_fit_are_one_line(tmp_path, settings, message):
    with pytest.raises(ConfigError, match=message):
        files_config(tmp_path, **settings)


def test_the_source_embedding_is_its_own_and_the_target_stays_tied_to_the_output(tiny_cfg):
    from mtx.model.transformer import Transformer
    cfg = ModelConfig(**{**tiny_cfg.__dict__, "src_vocab_size": 20})
    model = Transformer(cfg)
    model.initialize()
    assert model.src_embed.embedding.weight.shape == (20, 16)
    assert model.tgt_embed is not model.src_embed
    assert model.output.weight is model.tgt_embed.embedding.weight  # (30, 16), tied
    untied = Transformer(ModelConfig(**{**cfg.__dict__, "tie_embeddings": False}))
    assert untied.output.weight is not untied.tgt_embed.embedding.weight


# -- a separate-vocabulary run of two tagged and weighted corpora, from the outside -----------

TINY = ["model=tiny", "train.max_epochs=1", "train.precision=float32", "train.eval_bleu=false",
        "decode=greedy", "data.vocab_size=300"]


@pytest.fixture(scope="module")
def separate_run(tmp_path_factory, multi30k_dir):
    """``train.py data=files data.vocab=separate`` on 600 Multi30k pairs in two corpora, the
    second tagged <bt> and weighted up (about a minute)."""
    work = tmp_path_factory.mktemp("separate")
    en, de = multi30k_lines(multi30k_dir, 660)
    write_pair(work / "web", en[:400], de[:400])
    write_pair(work / "bt", en[400:600], de[400:600])
    write_pair(work / "dev", en[600:640], de[600:640])
    write_pair(work / "test_a", en[640:], de[640:])
    done = run_script("train", "data=files", "data.src_lang=en", "data.tgt_lang=xx",
                      "data.train=[web,bt]", "data.valid=dev", "data.test=test_a",
                      "data.vocab=separate", "data.train_weights=[1,1]",
                      "data.train_tags=[null,'<bt>']", *TINY,
                      f"hydra.run.dir={work / 'run'}", cwd=work,
                      env={"MTX_DATA_DIR": str(work / "data")})
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return work, (work / "run" / "train.log").read_text()


@pytest.mark.slow
def test_a_separate_run_keeps_both_models_and_counts_each_corpus(separate_run):
    work, log = separate_run
    run = work / "run"
    src, tgt = (run / "spm.src.model").read_bytes(), (run / "spm.tgt.model").read_bytes()
    assert src != tgt and not (run / "spm.model").exists()
    identity = json.loads((run / "run.json").read_text())
    assert identity["model"]["src_vocab_size"] == identity["model"]["vocab_size"] == 300
    web, bt = identity["corpora"]
    assert (web["pairs"], web["tag"], bt["tag"], bt["weight"]) == (400, None, "<bt>", 1)
    assert web["pairs_per_epoch"] == bt["pairs_per_epoch"] == 300  # equal shares of 600
    assert "bt, tag <bt>, weight 1): 200 pairs kept, 300 an epoch (1.50 times each)" in log


@pytest.mark.slow
def test_a_separate_run_translates_exports_and_serves(separate_run, tmp_path):
    work, _ = separate_run
    sources = lines_of(work / "test_a.en")[:3]
    text = ("\n".join(sources) + "\n").encode()
    done = run_script("translate", f"ckpt={work / 'run'}", "decode=greedy", stdin=text, cwd=work)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    ours = done.stdout.decode().split("\n")[:3]
    done = run_script("export", f"ckpt={work / 'run'}", f"output={tmp_path / 'ct2'}", cwd=work)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert (tmp_path / "ct2" / "spm.src.model").is_file()
    done = run_script("translate", f"ckpt={tmp_path / 'ct2'}", "decode=greedy", stdin=text,
                      cwd=work)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.decode().split("\n")[:3] == ours  # CTranslate2: the same greedy tokens
    done = run_script("evaluate", f"ckpt={work / 'run'}", "decode=greedy",
                      f"out_dir={tmp_path / 'eval'}", cwd=work)
    assert done.returncode == 0 and "test_a sacrebleu = " in done.stdout.decode()
    server = ServerProcess([f"ckpt={work / 'run'}", "decode=greedy"],
                           argv=(sys.executable, str(ROOT / "scripts" / "serve.py")))
    try:
        status, out, _ = post(server.url, "/translate", {"text": sources[:1]})
        assert status == 200 and out["translations"] == ours[:1], out
        status, out, _ = post(server.url, "/translate", {"text": ["<2fr> " + sources[0]]})
        assert status == 422 and "never saw in training" in out["error"], out
    finally:
        assert server.stop() == 0, server.log[-5:]


@pytest.mark.slow
def test_a_tag_the_run_never_saw_ends_translation_in_one_line(separate_run):
    work, _ = separate_run
    done = run_script("translate", f"ckpt={work / 'run'}", stdin=b"<bt> A dog runs.\n", cwd=work)
    assert done.returncode == 0 and done.stdout.decode().strip(), done.stderr.decode()[-3000:]
    done = run_script("translate", f"ckpt={work / 'run'}", stdin=b"<2fr> A dog runs.\n", cwd=work)
    line = assert_one_line(done.stderr, done.returncode, 2)
    assert "the tag <2fr>, which the model never saw in training (its tags: <bt>)" in line


def test_a_checkpoint_and_run_written_before_src_vocab_size_still_load(tiny_cfg, tmp_path):
    """Runs written before model.src_vocab_size existed (their manifests and run.json lack it)
    are joint-vocabulary runs: they load and resume as the setting's default."""
    import dataclasses

    import mxnet as mx
    from mtx.model.transformer import Transformer
    from mtx.runs.resume import check_identity
    from mtx.runs.rundir import RunDir, run_identity
    from mtx.config import DataConfig
    run = RunDir(tmp_path)
    run.write_json("model.json", dataclasses.asdict(tiny_cfg))
    model = Transformer(tiny_cfg)
    model.initialize()
    run.checkpoints.save("epoch_001", model)
    identity = run_identity(tiny_cfg, DataConfig(), "abc")
    for path, keys in ((run.checkpoints.folder / "epoch_001.json", ("config",)),
                       (tmp_path / "run.json", ("model",))):
        written = json.loads(path.read_text()) if path.is_file() else json.loads(
            json.dumps(identity))
        del written[keys[0]]["src_vocab_size"]
        path.write_text(json.dumps(written))
    run.checkpoints.load(run.checkpoints.verify("epoch_001"), Transformer(tiny_cfg), mx.cpu())
    check_identity(run, identity)  # no error: the same run
    with pytest.raises(Exception, match="other model.src_vocab_size"):
        check_identity(run, run_identity(dataclasses.replace(tiny_cfg, src_vocab_size=20),
                                         DataConfig(), "abc"))
