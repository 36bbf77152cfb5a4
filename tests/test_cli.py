"""Every script ends bad input with one line and an exit code, never a traceback.

Exit codes (`mtx.errors`): 2 a user error (``error: <what and how to fix>``), 130 Ctrl-C
(``interrupted``), 1 a bug (``error: internal error (...); this is a bug, ...``).

"One line" is checked by `assert_one_line`: among the non-empty lines of stderr, every line
except logging and warning lines is the last line. A logging/warning line is one that starts
with ``[`` (a Python logging record, ``[INFO] ...`` or ``[<time>][<logger>][INFO] - ...``, or
MXNet's C++ log ``[02:05:18] src/...``), or with ``warning: `` (mtx's own warnings), or contains
``Warning: `` (Python's warnings module: ``<file>:<line>: <Category>Warning: <message>``), or
starts with whitespace (the source line the warnings module prints under its warning). A
traceback is ruled out separately: stderr must not contain ``Traceback``.
"""
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from mtx.commands.entry import run, typed
from mtx.config import ConfigError, DataConfig, DecodeConfig, ModelConfig, TrainConfig
from mtx.typecheck import from_dict
from mtx.errors import BUG, INTERRUPTED, USER_ERROR, DataError
from tests.conftest import ROOT, run_script


def is_log_line(line):
    """A logging or warning line (module docstring)."""
    return (line.startswith(("[", "warning: ")) or "Warning: " in line
            or line[:1].isspace())


def assert_one_line(stderr, returncode, code, first_words="error: "):
    """``returncode`` is ``code``, no traceback, and stderr's only line that is not a
    logging/warning line is its last one, which starts with ``first_words``: that line."""
    err = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    assert returncode == code, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith(first_words), err[-3000:]
    assert [line for line in lines if not is_log_line(line)] == [lines[-1]], err[-3000:]
    return lines[-1]


# -- the error handling itself, in this process ----------------------------------------------

def _raise(err):
    def main():
        raise err
    return main


def test_user_error_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        run(_raise(DataError("data.txt has no lines; give a file with lines")))
    line = assert_one_line(capsys.readouterr().err, exit_.value.code, USER_ERROR)
    assert line == "error: data.txt has no lines; give a file with lines"


def test_missing_file_is_a_user_error(capsys, tmp_path):
    def main():
        open(tmp_path / "missing.txt")
    with pytest.raises(SystemExit) as exit_:
        run(main)
    line = assert_one_line(capsys.readouterr().err, exit_.value.code, USER_ERROR)
    assert "missing.txt: No such file or directory" in line


def test_ctrl_c_is_interrupted_exit_130(capsys):
    with pytest.raises(SystemExit) as exit_:
        run(_raise(KeyboardInterrupt()))
    assert_one_line(capsys.readouterr().err, exit_.value.code, INTERRUPTED, "interrupted")


def test_a_bug_is_one_line_exit_1_and_the_traceback_goes_to_a_file(capsys):
    with pytest.raises(SystemExit) as exit_:
        run(_raise(RuntimeError("boom\nsecond line")))
    line = assert_one_line(capsys.readouterr().err, exit_.value.code, BUG)
    assert line.startswith("error: internal error (RuntimeError: boom; second line); this is a "
                           "bug, please report it with the log")
    traceback_file = line.rsplit("traceback in ", 1)[1].rstrip(")")
    try:
        text = open(traceback_file).read()
        assert "Traceback" in text and "RuntimeError: boom" in text
    finally:
        os.unlink(traceback_file)


@pytest.mark.parametrize("cls, key, value, expected", [
    (ModelConfig, "num_heads", "abc", "model.num_heads='abc' has type str; expected int"),
    (ModelConfig, "num_heads", True, "model.num_heads=True has type bool; expected int"),
    (TrainConfig, "lr", "fast", "train.lr='fast' has type str; expected float"),
    (TrainConfig, "max_minutes", "soon", "expected float or null"),
    (TrainConfig, "eval_bleu", "yes", "train.eval_bleu='yes' has type str; expected bool"),
    (TrainConfig, "devices", [0], "expected a list of str or null"),
    (DataConfig, "sizes", [10, "x", 10], "expected a list of int"),
])
def test_typed_values_are_checked(cls, key, value, expected):
    section = {ModelConfig: "model", TrainConfig: "train", DataConfig: "data"}[cls]
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("(", r"\(")):
        from_dict(cls, {key: value}, section)


@pytest.mark.parametrize("cls, values, expected", [
    (TrainConfig, {"max_minutes": -5}, "train.max_minutes=-5: give the wall-clock budget in "
                                      "minutes, > 0"),
    (TrainConfig, {"max_epochs": 0}, "train.max_epochs=0: give 1 or more epochs"),
    (TrainConfig, {"patience": -1}, "train.patience=-1: give validations without a better val BLEU"),
    (TrainConfig, {"max_nonfinite_steps": 0}, "train.max_nonfinite_steps=0: give non-finite "),
    (TrainConfig, {"label_smoothing": 1.0}, "train.label_smoothing=1.0: give a smoothing in "
                                             "[0, 1)"),
    (DataConfig, {"name": "toy", "min_len": 9, "max_toy_len": 4}, "need min_len <= max_toy_len"),
    (DataConfig, {"name": "toy", "sizes": [100, 10]}, "three sizes, [train, val, test]"),
    (DataConfig, {"name": "toy", "sizes": [100, 0, 10]}, "give three positive sizes"),
    (DataConfig, {"name": "toy", "task": "sort"}, "data.task=sort: give the toy task, one of "
                                                   "copy, "),
    (DataConfig, {"name": "wmt14"}, "data.name=wmt14: give one of multi30k, files, toy "),
    (DataConfig, {"vocab_size": 8}, "data.vocab_size=8: give the SentencePiece vocabulary's "
                                     "size (each side's when separate), at least 16"),
    (ModelConfig, {"num_encoder_layers": 0}, "model.num_encoder_layers=0: give 1 or more layers"),
    (ModelConfig, {"max_len": 1}, "model.max_len=1: give the positions the positional table"),
    (ModelConfig, {"dropout": 1.0}, "model.dropout=1.0: give the dropout on embeddings and "
                                     "sublayer outputs, in [0, 1)"),
    (ModelConfig, {"heads_per_layer": [4, 4]}, "model.heads_per_layer has 2 entries; the model "
                                               "has 9 attention layers"),
    (TrainConfig, {"devices": []}, "train.devices=[] is empty"),
    (TrainConfig, {"batch_tokens": 4}, "train.batch_tokens=4: give target-side padded tokens"),
    (TrainConfig, {"log_every": 0}, "train.log_every=0: give steps between reads"),
    (TrainConfig, {"lr": 0, "warmup_steps": 800}, "train.lr=0: give the peak learning rate, > 0"),
    (TrainConfig, {"lr": float("nan")}, "train.lr=nan: give the peak learning rate, > 0"),
    (TrainConfig, {"save_every_minutes": float("nan")}, "train.save_every_minutes=nan: give "
                                                        "minutes between resume points"),
    (TrainConfig, {"epsilon": -1e-09}, "train.epsilon=-1e-09: give Adam's epsilon"),
    (TrainConfig, {"rdrop_alpha": -1}, "train.rdrop_alpha=-1: give > 0 (e.g. 5): R-Drop"),
    (TrainConfig, {"warmup_steps": 0}, "train.warmup_steps=0: give linear warm-up steps"),
    (TrainConfig, {"max_minutes": float("nan")}, "train.max_minutes=nan: give the wall-clock"),
    (TrainConfig, {"max_minutes": float("inf")}, "train.max_minutes=inf: give the wall-clock"),
    (TrainConfig, {"clip_norm": -1}, "train.clip_norm=-1: give the global gradient norm, >= 0"),
    (DecodeConfig, {"beam_size": 0}, "decode.beam_size=0: give 1 or more hypotheses"),
    (DecodeConfig, {"beam_size": 2, "nbest": 3}, "decode.nbest=3 must be between 1 and "
                                                 "decode.beam_size"),
    (DecodeConfig, {"max_len_a": 0, "max_len_b": 0}, "needs one of them > 0"),
    (DecodeConfig, {"max_len_b": -1}, "decode.max_len_b=-1: give b >= 0 of the output limit"),
    (DecodeConfig, {"max_len_a": float("nan")}, "decode.max_len_a=nan: give a >= 0"),
    (DecodeConfig, {"max_len_a": float("inf")}, "decode.max_len_a=inf: give a >= 0"),
    (DecodeConfig, {"length_penalty": -0.5}, "decode.length_penalty=-0.5: give GNMT's alpha "
                                             "(`gnmt_penalty`), from 0 (no penalty) to 10"),
    (DecodeConfig, {"length_penalty": float("nan")}, "decode.length_penalty=nan: give"),
    (DecodeConfig, {"length_penalty": 10.5}, "decode.length_penalty=10.5: give GNMT's alpha"),
    (DecodeConfig, {"batch_tokens": 0}, "decode.batch_tokens=0: give source subwords per batch"),
])
def test_values_that_cannot_work_are_refused_before_any_work(cls, values, expected):
    section = {TrainConfig: "train", DataConfig: "data", ModelConfig: "model",
               DecodeConfig: "decode"}[cls]
    with pytest.raises(ConfigError, match=re.escape(expected)):
        from_dict(cls, values, section)


@pytest.mark.parametrize("token", [12345678901234567890, ["a-secret-token-in-a-list"]])
def test_a_secret_setting_of_the_wrong_type_is_refused_without_its_value(token):
    """access.token (a secret `setting`): the type error names the key, never the value, which
    would otherwise reach a terminal's scroll-back or a CI log."""
    from mtx.serving.access import Access
    from mtx.typecheck import SECRET_SHOWN
    with pytest.raises(ConfigError) as refused:
        from_dict(Access, {"token": token}, "access")
    message = str(refused.value)
    assert message.startswith(f"access.token={SECRET_SHOWN} has type ")
    assert str(token).strip("[]'") not in message


def test_typed_accepts_what_the_configs_hold():
    train = from_dict(TrainConfig, {"lr": 1, "max_minutes": None, "devices": ["cpu"]}, "train")
    assert train.lr == 1
    assert from_dict(ModelConfig, {"heads_per_layer": [2] * 9, "num_heads": 2}, "model")


# -- the scripts, run as a user would ----------------------------------------------------------

RUN = "{run}"  # the trained toy run (the session fixture, trained once)
CASES = {
    # id: (script, overrides, words of the error line)
    "train-int-not-a-number": ("train", ["model.num_heads=abc"],
                               "model.num_heads='abc' has type str; expected int"),
    "train-float-not-a-number": ("train", ["train.lr=fast"],
                                 "train.lr='fast' has type str; expected float"),
    "train-unknown-key": ("train", ["model.num_layer=6"], "unknown key model.num_layer"),
    "train-malformed-override": ("train", ["model.num_heads=["], "cannot parse the override"),
    "train-missing-config-option": ("train", ["model=huge"], "choose one of base, narrow, small, tiny"),
    "serve-group-given-a-value": ("serve", ["ckpt=x", "limits=5"], "limits=5: that is a group "
                                                                  "of settings"),
    "serve-group-given-no-preset": ("serve", ["ckpt=x", "limits=few"], "Could not find "
                                    "'limits/few': that is a group of settings: give one of"),
    "train-group-given-a-value": ("train", ["model=5"], "model=5: that is a group of settings"),
    "train-no-gpu": ("train", ["device=gpu"], "device=gpu but MXNet sees 0 GPU(s)"),
    "train-unknown-device": ("train", ["device=tpu"], "device=tpu is not a device name"),
    "train-seed-not-an-integer": ("train", ["seed=1.5"], "seed=1.5 has type float; expected int"),
    "train-max-len-leaves-no-pair": ("train", ["data.max_len=2"],
                                     "data.max_len=2 leaves no training pair"),
    "translate-no-ckpt": ("translate", [], "ckpt= is required: pass a training run directory"),
    "translate-ckpt-missing": ("translate", ["ckpt={tmp}/nothing"], "is not a directory"),
    "translate-no-gpu": ("translate", [f"ckpt={RUN}", "device=gpu"], "device=gpu but MXNet"),
    "evaluate-no-gpu": ("evaluate", [f"ckpt={RUN}", "source={src}", "reference={src}",
                                     "device=gpu"], "device=gpu but MXNet"),
    "heads-no-gpu": ("heads", [f"ckpt={RUN}", "device=gpu"], "device=gpu but MXNet"),
    "translate-int-not-a-number": ("translate", [f"ckpt={RUN}", "decode.beam_size=abc"],
                                   "decode.beam_size='abc' has type str; expected int"),
    "translate-input-missing": ("translate", [f"ckpt={RUN}", "input={tmp}/missing.txt"],
                                "input={tmp}/missing.txt: No such file or directory"),
    "translate-input-is-a-directory": ("translate", [f"ckpt={RUN}", "input={tmp}"],
                                       "input={tmp}: Is a directory"),
    "translate-output-directory-missing": (
        "translate", [f"ckpt={RUN}", "input={src}", "output={tmp}/no/such/out.txt"],
        "the directory {tmp}/no/such does not exist"),
    "translate-output-is-a-directory": ("translate", [f"ckpt={RUN}", "input={src}",
                                                      "output={tmp}"], "is a directory"),
    "translate-output-is-the-input": ("translate", [f"ckpt={RUN}", "input={src}",
                                                    "output={src}"], "is the input file"),
    "evaluate-empty-files": ("evaluate", [f"ckpt={RUN}", "source={empty}", "reference={empty}"],
                             "have no lines"),
    "evaluate-different-lengths": ("evaluate", [f"ckpt={RUN}", "source={src}",
                                                "reference={short}"], "lines but"),
    "evaluate-source-without-reference": ("evaluate", [f"ckpt={RUN}", "source={src}"],
                                          "give both source= and reference="),
    "evaluate-ckpt-not-a-run": ("evaluate", ["ckpt={tmp}"], "is not a training run"),
    "evaluate-out-dir-is-a-file": ("evaluate", [f"ckpt={RUN}", "source={src}", "reference={src}",
                                                "out_dir={src}"],
                                   "out_dir={src} is a file; give a directory as out_dir="),
    "evaluate-toy-run-without-files": ("evaluate", [f"ckpt={RUN}"],
                                       "was not trained on Multi30k or files: pass source= and reference="),
    "translate-attention-png-without-input": ("translate", [f"ckpt={RUN}",
                                                            "attention_png={tmp}/png"],
                                              "give input=FILE too"),
    "heads-split-not-in-the-corpus": ("heads", [f"ckpt={RUN}", "test_split=test_2017_flickr"],
                                      "test_split=test_2017_flickr: the run's corpus has"),
    "translate-ckpt-null": ("translate", ["ckpt=null"], "ckpt=null: translate needs ckpt=<a path>"),
    "heads-data-dir-null": ("heads", [f"ckpt={RUN}", "data_dir=null"],
                            "data_dir=null: heads needs data_dir=<a path>; leave it out"),
    "export-output-null": ("export", [f"ckpt={RUN}", "output=null"],
                           "output=null: export needs output=<a path>"),
    "evaluate-source-missing": ("evaluate", [f"ckpt={RUN}", "source={tmp}/missing.txt",
                                             "reference={src}"], "cannot read"),
}


@pytest.fixture
def files(tmp_path):
    """{placeholder: path} for the overrides: a 3-line source, a 2-line reference, an empty
    file, and the test's directory."""
    (tmp_path / "src.txt").write_text("w1 w2 w3\nw4 w5\nw6\n")
    (tmp_path / "short.txt").write_text("w3 w2 w1\nw5 w4\n")
    (tmp_path / "empty.txt").write_text("")
    return {"tmp": tmp_path, "src": tmp_path / "src.txt", "short": tmp_path / "short.txt",
            "empty": tmp_path / "empty.txt"}


def _fill(texts, request, files):
    values = dict(files)
    if any(RUN in text for text in texts):
        values["run"] = request.getfixturevalue("toy_run")
    return [text.format(**values) for text in texts]


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2(case, request, files):
    script, overrides, words = CASES[case]
    if case.endswith("-no-gpu"):
        import mxnet as mx
        if mx.context.num_gpus() > 0:
            pytest.skip("this machine has a GPU: device=gpu is not an error here")
    overrides, (words,) = _fill(overrides, request, files), _fill([words], request, files)
    if script == "train":
        overrides += ["experiment=smoke", f"hydra.run.dir={files['tmp']}/run"]
    done = run_script(script, *overrides)
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert words in line


@pytest.mark.slow
@pytest.mark.parametrize("below, fix", [
    ("", "something is in the way at that path (a file where a directory should be?)"),
    ("/run", "a part of that path is a file, not a directory; give another path")])
def test_run_directory_through_a_file_is_one_line_with_the_fix(below, fix, files):
    """hydra.run.dir= a file, or a folder below one: Hydra's mkdir fails (EEXIST, ENOTDIR)."""
    done = run_script("train", "experiment=smoke", f"hydra.run.dir={files['src']}{below}")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert f"{files['src']}{below}: " in line and fix in line


def run_read_only(directory, name, *overrides):
    """run_script with ``directory`` read-only for the script: chmod a-w for a normal user;
    root ignores permissions, so for root a read-only bind mount that only the script's own
    mount namespace sees (unshare; the test is skipped where that is not allowed)."""
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(mode & ~0o222)
        try:
            return run_script(name, *overrides)
        finally:
            directory.chmod(mode)
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare cannot make a directory read-only")
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount --bind -o ro "$0" "$0" && exec "$@"', str(directory), sys.executable,
         str(ROOT / "scripts" / f"{name}.py"), *overrides],
        capture_output=True, cwd=ROOT, env=env, timeout=600)
    if done.stderr.startswith((b"unshare:", b"mount:")):
        pytest.skip(f"cannot make a read-only mount here: {done.stderr.decode().strip()}")
    return done


@pytest.fixture
def read_only_run(toy_run, tmp_path):
    """A copy of the toy run to make read-only (the session's run stays writable), without
    what other tests' commands wrote into the session's run (its eval/ and heads/)."""
    return shutil.copytree(toy_run, tmp_path / "run",
                           ignore=shutil.ignore_patterns("eval", "heads"))


@pytest.mark.slow
@pytest.mark.parametrize("script, extra", [
    ("evaluate", ["source={src}", "reference={src}"]),
    ("heads", ["max_sentences=4"]),
])
def test_read_only_run_directory_is_one_line_exit_2(script, extra, read_only_run, files):
    overrides = [f"ckpt={read_only_run}", *(x.format(**files) for x in extra)]
    done = run_read_only(read_only_run, script, *overrides)
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert f"cannot write into {read_only_run}/" in line
    assert "the run directory is not writable; pass out_dir=" in line and "resume" not in line


@pytest.mark.slow
def test_output_in_a_read_only_directory_is_one_line_exit_2(toy_run, files):
    read_only = files["tmp"] / "read_only"
    read_only.mkdir()
    done = run_read_only(read_only, "translate", f"ckpt={toy_run}", f"input={files['src']}",
                         f"output={read_only}/out.txt")
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert f"output={read_only}/out.txt: the directory {read_only} is not writable" in line


@pytest.mark.slow
@pytest.mark.parametrize("override, words", [
    ("checkpoint=bset", "has no checkpoint bset; choose checkpoint= one of"),
    ("checkpoint=average_last_99", "checkpoint=average_last_99: "),
    ("decode.beam_size=0", "decode.beam_size=0: give 1 or more hypotheses"),
    ("device=gpu:7", "device=gpu:7 but MXNet sees")])
def test_evaluate_refuses_bad_settings_before_writing_into_the_run(override, words,
                                                                    read_only_run, files):
    done = run_script("evaluate", f"ckpt={read_only_run}", f"source={files['src']}",
                      f"reference={files['src']}", override)
    line = assert_one_line(done.stderr, done.returncode, USER_ERROR)
    assert words in line
    assert not (read_only_run / "eval").exists()


@pytest.mark.slow
def test_evaluate_writes_to_out_dir(toy_run, files):
    done = run_script("evaluate", f"ckpt={toy_run}", f"source={files['src']}",
                      f"reference={files['src']}", f"out_dir={files['tmp']}/eval")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    written = (files["tmp"] / "eval").iterdir()  # and .lock, which evaluate held
    assert sorted(p.suffix for p in written if p.name != ".lock") == [".hyp", ".json"]


@pytest.mark.slow
def test_ctrl_c_while_translating_is_interrupted_exit_130(toy_run):
    """Ctrl-C while translate waits for input on stdin: ``interrupted``, exit 130. (The child
    starts with SIGINT's default action, as from a terminal: a job started in the background by
    a non-interactive shell inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt.)"""
    env = dict(os.environ, OMP_NUM_THREADS="2")
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "translate.py"),
                             f"ckpt={toy_run}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = b""
        while b"translating standard input" not in seen:  # logged once the model is loaded
            line = proc.stderr.readline()
            assert line, seen.decode()
            seen += line
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert_one_line(seen + rest, proc.returncode, INTERRUPTED, "interrupted")


def test_typed_reads_a_composed_section():
    from mtx.commands.declared import compose
    cfg = compose("train", ["model.num_heads=abc"])
    with pytest.raises(ConfigError, match="model.num_heads='abc'"):
        typed(cfg, "model")
