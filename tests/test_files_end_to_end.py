"""data=files from the outside, as a user runs it: a small corpus of parallel files (Multi30k's
English and German, the German side renamed ``xx``, a pair mtx has no config for; plain and
gzipped) trained by ``mtx-train`` and then translated, evaluated, exported, served and studied by
the installed commands; and every kind of bad file stopped by ``mtx-train`` with one line and
exit 2 before any training."""
import gzip
import json
import re
from pathlib import Path

import pytest

from conftest import run_command
from servers import get, post, start_server
from tests.test_cli import assert_one_line

pytestmark = pytest.mark.slow  # every test runs the installed commands (the bad files too)

SRC, TGT = "en", "xx"  # xx: Multi30k's German under a code mtx knows nothing of
TRAIN_PAIRS = 2000
# what the run is trained with: a tiny model for one epoch in float32, greedy, a small vocabulary
# (train.eval_bleu=false: the epoch ends with the val loss alone, the test sets still get BLEU)
TINY = ["model=tiny", "train.max_epochs=1", "train.precision=float32", "train.eval_bleu=false",
        "decode=greedy", "data.vocab_size=300"]


def write_side(path, lines, gz):
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)


def write_pair(prefix, src, tgt, gz=False):
    """``<prefix>.en`` and ``<prefix>.xx`` (``.gz`` with ``gz``), one line each per sentence."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for lang, lines in ((SRC, src), (TGT, tgt)):
        write_side(prefix.parent / f"{prefix.name}.{lang}{'.gz' if gz else ''}", lines, gz)


def multi30k_lines(multi30k_dir, count):
    from mtx.data.lines import read_lines
    return tuple(read_lines(Path(multi30k_dir) / f"train.{lang}.gz")[:count]
                 for lang in ("en", "de"))


def make_corpus(folder, multi30k_dir):
    """``folder``/corpus: part1 (gzipped) and part2 (plain), whose 2,000 usable pairs train, with
    three pairs the filters drop (an empty side, too long, too unequal); dev (plain, 40 pairs);
    test_a (plain, 20) and test_b (gzipped, 20, one with an empty source)."""
    en, de = multi30k_lines(multi30k_dir, TRAIN_PAIRS + 80)
    src, tgt = list(en[:TRAIN_PAIRS]), list(de[:TRAIN_PAIRS])
    long_en, long_de = " ".join(en[:12]), " ".join(de[:12])       # over data.max_len's 128
    dropped = [("A dog runs.", ""), (long_en, long_de), ("Hi", " ".join(de[100:103]))]
    for row, (s, t) in zip((7, 500, 1500), dropped):
        src.insert(row, s)
        tgt.insert(row, t)
    corpus = folder / "corpus"
    write_pair(corpus / "part1", src[:1000], tgt[:1000], gz=True)
    write_pair(corpus / "part2", src[1000:], tgt[1000:])
    write_pair(corpus / "dev", en[TRAIN_PAIRS:TRAIN_PAIRS + 40], de[TRAIN_PAIRS:TRAIN_PAIRS + 40])
    write_pair(corpus / "test_a", en[TRAIN_PAIRS + 40:TRAIN_PAIRS + 60],
               de[TRAIN_PAIRS + 40:TRAIN_PAIRS + 60])
    test_b = list(en[TRAIN_PAIRS + 60:TRAIN_PAIRS + 80])
    test_b[3] = ""  # a test set is kept whole: an empty source gets an empty translation
    write_pair(corpus / "test_b", test_b, de[TRAIN_PAIRS + 60:TRAIN_PAIRS + 80], gz=True)
    return corpus


def files_overrides(train="[corpus/part1,corpus/part2]", valid="corpus/dev",
                    test="[corpus/test_a,corpus/test_b]"):
    """The data=files part of the command, with prefixes relative to the working directory, as
    a user types them."""
    return ["data=files", f"data.src_lang={SRC}", f"data.tgt_lang={TGT}", f"data.train={train}",
            f"data.valid={valid}", f"data.test={test}"]


class FilesRun:
    """The trained files run: ``work`` (the directory the commands ran in, holding corpus/),
    ``run`` (the run directory), ``env`` (MTX_DATA_DIR: the preparation cache in tmp) and
    ``log`` (mtx-train's stderr; its log lines are in <run>/train.log)."""

    def __init__(self, work, run, env, log):
        self.work, self.run, self.env, self.log = work, run, env, log

    def command(self, name, *overrides, cwd=None, **kwargs):
        return run_command(name, *overrides, cwd=cwd or self.work, env=self.env, **kwargs)


@pytest.fixture(scope="module")
def files_run(tmp_path_factory, multi30k_dir):
    """``mtx-train data=files ...`` on the small corpus (about a minute on 2 free cores)."""
    work = tmp_path_factory.mktemp("files")
    make_corpus(work, multi30k_dir)
    env = {"MTX_DATA_DIR": str(work / "data")}
    done = run_command("train", *files_overrides(), *TINY, f"hydra.run.dir={work / 'run'}",
                       cwd=work, env=env)
    log = done.stderr.decode(errors="replace")
    assert done.returncode == 0, log[-3000:]
    return FilesRun(work, work / "run", env, log)


def as_shown(stderr):
    """stderr as a terminal shows it: of each line only what follows its last carriage return
    (a progress bar that ``leave=False`` erased with ``\\r`` is not a line of its own)."""
    return "\n".join(line.rsplit("\r", 1)[-1]
                     for line in stderr.decode(errors="replace").split("\n"))


def lines_of(path):
    return Path(path).read_text(encoding="utf-8").split("\n")[:-1]


def test_a_files_run_trains_on_the_kept_pairs_and_scores_each_test_set(files_run):
    report = json.loads((files_run.run / "report.json").read_text())
    assert (report["src_lang"], report["tgt_lang"], report["data"]) == (SRC, TGT, "files")
    assert set(report["scores"]) == {"test_a", "test_b"}
    for name in ("test_a", "test_b"):
        assert set(report["scores"][name]) >= {"sacrebleu", "chrf", "bleu_tok_lc"}
    # both parts read in order, the three bad pairs dropped and counted in the log
    log = (files_run.run / "train.log").read_text()
    assert (f"training split: {TRAIN_PAIRS + 3} pairs read, {TRAIN_PAIRS} kept (dropped: 1 "
            f"empty, 1 too long, 1 length ratio" in log), log[-3000:]
    assert f"trained on {TRAIN_PAIRS} sentences" in log
    data = json.loads((files_run.run / "data.json").read_text())
    corpus = files_run.work / "corpus"
    assert data["train"] == [str(corpus / "part1"), str(corpus / "part2")]  # absolute
    assert data["test"] == [str(corpus / "test_a"), str(corpus / "test_b")]
    hypotheses = lines_of(files_run.run / "test_b.hyp.xx")
    assert len(hypotheses) == 20 and hypotheses[3] == ""  # whole, the empty source empty
    # the preparation: one vocabulary index and one prepared split in the data directory
    data_dir = Path(files_run.env["MTX_DATA_DIR"])
    prepared = [p for p in (data_dir / "prepared").iterdir() if not p.name.startswith(".")]
    assert len(prepared) == 1 and (prepared[0] / "meta.json").is_file(), prepared
    assert json.loads((prepared[0] / "meta.json").read_text())["pairs"] == TRAIN_PAIRS
    assert len(list((data_dir / "spm" / "index").iterdir())) == 1


def test_translate_and_evaluate_take_a_files_run(files_run, tmp_path):
    sources = lines_of(files_run.work / "corpus" / "test_a.en")[:3]
    done = files_run.command("translate", f"ckpt={files_run.run}",
                             stdin=("\n".join(sources[:2] + ["", sources[2]]) + "\n").encode())
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out = done.stdout.decode().split("\n")
    assert len(out) == 5 and out[2] == "" and out[4] == ""  # one line per line, in order

    # split= finds a test set through the run's data.json, from any working directory
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = files_run.command("evaluate", f"ckpt={files_run.run}", "split=test_b",
                             "decode=greedy", f"out_dir={tmp_path / 'eval'}", cwd=elsewhere)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert "test_b sacrebleu = " in done.stdout.decode()
    hyp = tmp_path / "eval" / "test_b.beam1.lp0.0.hyp"
    assert lines_of(hyp) == lines_of(files_run.run / "test_b.hyp.xx")  # as the report decoded
    report = json.loads((files_run.run / "report.json").read_text())
    scores = json.loads(hyp.with_suffix(".json").read_text())
    assert scores["chrf"]["score"] == report["scores"]["test_b"]["chrf"]["score"]

    # no split=: the run's first test set
    done = files_run.command("evaluate", f"ckpt={files_run.run}", "decode=greedy",
                             f"out_dir={tmp_path / 'eval'}")
    assert done.returncode == 0 and "test_a sacrebleu = " in done.stdout.decode(), \
        done.stderr.decode()[-3000:]

    done = files_run.command("evaluate", f"ckpt={files_run.run}", "split=nope")
    line = assert_one_line(done.stderr, done.returncode, 2)
    assert "split=nope" in line and "val, test_a, test_b" in line, line


def test_a_files_run_exports_to_ctranslate2_and_translates_with_it(files_run, tmp_path):
    export = tmp_path / "ct2"
    done = files_run.command("export", f"ckpt={files_run.run}", f"output={export}")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert json.loads((export / "data.json").read_text())["tgt_lang"] == TGT
    sources = lines_of(files_run.work / "corpus" / "test_a.en")[:4]
    text = ("\n".join(sources[:2] + [""] + sources[2:]) + "\n").encode()
    translated = {}
    for name, ckpt in (("ct2", export), ("mtx", files_run.run)):
        done = files_run.command("translate", f"ckpt={ckpt}", "decode=greedy", stdin=text)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        translated[name] = done.stdout.decode().split("\n")
    assert len(translated["ct2"]) == 6 and translated["ct2"][2] == ""
    assert translated["ct2"] == translated["mtx"]  # greedy: the same tokens (docs/deploy.md)


def test_a_files_run_is_served(files_run):
    process = start_server(files_run.run, env=None)
    try:
        status, info, _ = get(process.url, "/info")
        assert status == 200 and (info["source_language"], info["target_language"]) == (SRC, TGT)
        sources = lines_of(files_run.work / "corpus" / "test_a.en")[:2]
        status, out, _ = post(process.url, "/translate", {"text": [sources[0], "", sources[1]],
                                                          "beam_size": 2})
        assert status == 200, out
        assert len(out["translations"]) == 3 and out["translations"][1] == ""
    finally:
        assert process.stop() == 0, process.log[-5:]


def test_the_head_study_runs_on_a_files_run_with_its_own_test_set(files_run, tmp_path):
    """mtx-heads' test_split defaults to Multi30k's test_2016_flickr: a files run names one of
    its own test sets."""
    done = files_run.command("heads", f"ckpt={files_run.run}", "test_split=test_b",
                             "leave_one_out=false", "random_orders=1", "iterative=false",
                             "iterative_loss=false", "timing_rounds=1", "decode=greedy",
                             "max_sentences=10", "prune_fraction=0.25",
                             f"out_dir={tmp_path / 'heads'}")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    speed = json.loads((tmp_path / "heads" / "speed.json").read_text())
    assert speed["removed_heads"] == 3  # a quarter of model=tiny's 3 attention layers x 4 heads
    pruned = tmp_path / "heads" / "pruned"
    assert (pruned / "spm.model").read_bytes() == (files_run.run / "spm.model").read_bytes()
    assert json.loads((pruned / "data.json").read_text())["tgt_lang"] == TGT


# -- bad files: one line, exit 2, before any training -------------------------------------------

@pytest.fixture
def bad_corpus(tmp_path, multi30k_dir):
    """A small corpus to damage: train (plain, 300 pairs), dev and test (plain, 20 pairs)."""
    en, de = multi30k_lines(multi30k_dir, 340)
    corpus = tmp_path / "corpus"
    write_pair(corpus / "train", en[:300], de[:300])
    write_pair(corpus / "dev", en[300:320], de[300:320])
    write_pair(corpus / "test", en[320:], de[320:])
    return corpus


def _damage(corpus, kind):
    """Damage ``corpus`` as ``kind`` says -> (extra overrides, what the error line says)."""
    if kind == "line counts differ":
        lines = lines_of(corpus / "train.xx")
        write_side(corpus / "train.xx", lines[:-1], gz=False)
        return [], r"train\.xx has 299 lines but .*train\.en has more: parallel files must align"
    if kind == "line counts differ, gzipped":
        lines = lines_of(corpus / "dev.en")
        write_side(corpus / "dev.en.gz", lines + ["one more"], gz=True)
        (corpus / "dev.en").unlink()
        return [], r"dev\.xx has 20 lines but .*dev\.en\.gz has more: parallel files must align"
    if kind == "missing file":
        (corpus / "test.xx").unlink()
        return [], (r"data\.test=.*test: neither .*test\.xx nor .*test\.xx\.gz is a file; give "
                    r"the prefix")
    if kind == "missing prefix":
        return ["data.valid=corpus/nowhere"], r"data\.valid=.*nowhere: neither .*nowhere\.en nor"
    if kind == "invalid UTF-8":
        data = (corpus / "train.xx").read_bytes().split(b"\n")
        data[41] = b"Ein Hund \xff\xfe l\xe4uft."
        (corpus / "train.xx").write_bytes(gzip.compress(b"\n".join(data)))
        (corpus / "train.xx").rename(corpus / "train.xx.gz")
        return [], r"train\.xx\.gz:42: not valid UTF-8; fix or remove that line"
    if kind == "invalid UTF-8 in a test set":
        data = (corpus / "test.en").read_bytes().split(b"\n")
        data[4] = b"\xc3\x28 a man"
        (corpus / "test.en").write_bytes(b"\n".join(data))
        return [], r"test\.en:5: not valid UTF-8; fix or remove that line"
    if kind == "damaged gzip":
        packed = gzip.compress((corpus / "train.en").read_bytes())
        (corpus / "train.en").unlink()
        (corpus / "train.en.gz").write_bytes(packed[:len(packed) // 2])  # cut short
        return [], r"train\.en\.gz is a damaged gzip file \(.*\); re-download or re-compress it"
    if kind == "UTF-16":
        (corpus / "dev.xx").write_bytes((corpus / "dev.xx").read_text().encode("utf-16"))
        return [], r"dev\.xx is UTF-16 text; convert it to UTF-8 first, e\.g\. iconv"
    if kind == "empty after the filters":
        return ["data.max_len=3"], (r"no training pair is left after the filters \(0 empty, 300 "
                                    r"too long, 0 length ratio, 0 copy, 0 duplicate of 300\): .*raise "
                                    r"data\.max_len")
    if kind == "no text at all":
        write_pair(corpus / "train", [""] * 300, [""] * 300)
        return [], r"have no pair with text on both sides; give non-empty parallel files"
    if kind == "no data.src_lang":
        return [], r"data=files needs data\.src_lang=<code>: the language code that ends"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", [
    "line counts differ", "line counts differ, gzipped", "missing file", "missing prefix",
    "invalid UTF-8", "invalid UTF-8 in a test set", "damaged gzip", "UTF-16",
    "empty after the filters", "no text at all",
    "no data.src_lang"])
def test_each_kind_of_bad_file_is_one_line_and_exit_2_before_training(bad_corpus, kind):
    work = bad_corpus.parent
    extra, message = _damage(bad_corpus, kind)
    overrides = files_overrides(train="corpus/train", test="[corpus/test]")
    if kind == "no data.src_lang":  # the key left as conf/data/files.yaml leaves it: null
        overrides = [o for o in overrides if not o.startswith("data.src_lang=")]
    done = run_command("train", *overrides, *extra, *TINY, f"hydra.run.dir={work / 'run'}",
                       cwd=work, env={"MTX_DATA_DIR": str(work / "data")})
    line = assert_one_line(as_shown(done.stderr), done.returncode, 2)
    assert re.search(message, line), line
    assert "epoch 1" not in done.stderr.decode(errors="replace")
    assert not (work / "run" / "checkpoints").exists() or not any(
        (work / "run" / "checkpoints").iterdir())
    assert not list((work / "data").glob("prepared/.*tmp"))  # nothing half-made is left
