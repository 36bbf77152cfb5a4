"""scripts/translate.py: translate text with a trained run, one output line per input line, in
input order (decode.nbest=N>1: N lines ``LINE<TAB>RANK<TAB>SCORE<TAB>TEXT`` per input line)."""
import logging
import os
import stat
import sys
from pathlib import Path

from ..hardware.devices import use_numpy_interface
from ..errors import ConfigError, FileWriteError
from ..data.lines import file_chunks, stream_chunks
from ..decoding.ensemble import ensemble_runs, load_decoders
from ..decoding.search import Translator
from .entry import decoding_options, hydra_command, typed
from .paths import readable_file, writable_file

log = logging.getLogger("mtx")


def format_nbest(number, nbest):
    return "".join(f"{number}\t{rank}\t{score:.4f}\t{text}\n"
                   for rank, (text, score) in enumerate(nbest, 1))


def check_paths(cfg):
    """input= readable, output= writable and not the input itself, attention_png= a directory
    we can draw into: before the model loads."""
    if cfg.input:
        readable_file(cfg.input, "input")
    if cfg.attention_png:
        check_attention_png(cfg)
    if cfg.output:
        writable_file(cfg.output, "output")
        if reads_output(cfg.input or 0, cfg.output):  # 0: standard input
            what = "the input file" if cfg.input else "the file standard input reads"
            raise ConfigError(f"output={cfg.output} is {what}; writing would erase it before it "
                              f"is read: choose another output file")


def reads_output(source, output):
    """Whether ``source`` (a path, or a file descriptor such as stdin's) is the existing regular
    file ``output``."""
    try:
        out, src = os.stat(output), os.stat(source)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(out.st_mode) and os.path.samestat(src, out)


def check_attention_png(cfg):
    """attention_png= draws the first line of input= with mtx's own decoder into a directory."""
    from ..deploy import backend_of
    if not cfg.input:
        raise ConfigError("attention_png= draws the first line of a file: give input=FILE too")
    if backend_of(cfg.backend, cfg.ckpt) != "mtx":
        raise ConfigError("attention_png= needs mtx's decoder: give the training run as ckpt= "
                          "(a CTranslate2 export has no attention weights to draw)")
    if cfg.ensemble:
        raise ConfigError("attention_png= draws one model's attention: drop ensemble=")
    path = Path(cfg.attention_png)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise FileWriteError(f"attention_png={path}: {err.strerror}; give a directory that can "
                             f"be created and written") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise FileWriteError(f"attention_png={path} is not writable; give another directory")


def open_output(path):
    """The output file opened for writing (stdout when ``path`` is null)."""
    if not path:
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as err:
        raise FileWriteError(f"output={path}: {err.strerror}; give a file in an existing, "
                             f"writable directory") from None


def attention_png(cfg, translator, line):
    """attention_png=DIR: heatmaps of the attention over ``line`` (the first input line) and
    its best translation (as decode.* found it, cut like the translation), written into DIR."""
    from ..runs.pictures import attention_pictures
    from ..decoding.search import attention_axes, attention_of
    src_ids = translator.tokenizer.encode_source([line.strip()])[0][:translator.max_src_len]
    out_ids = translator.translate_ids([src_ids])[0][0][0]
    weights = attention_of(translator.model, src_ids, out_ids, translator.ctx)
    attention_pictures(weights, translator.model.cfg.attention_layers(),
                       *attention_axes(translator.tokenizer, src_ids, out_ids), cfg.attention_png)


def make_translator(cfg):
    """The translator of ``backend=`` (auto: CTranslate2 for an mtx-export directory, mtx's own
    decoder for a training run) -> (translator, DecodeConfig)."""
    from ..deploy import backend_of
    if backend_of(cfg.backend, cfg.ckpt) == "ctranslate2":
        if cfg.ensemble:
            raise ConfigError("ensemble= needs mtx's decoder: give training runs (backend=mtx)")
        from ..deploy.backend import translator_for
        decode_cfg = typed(cfg, "decode")
        return translator_for(cfg.ckpt, cfg.checkpoint, cfg.device, decode_cfg), decode_cfg
    decode_cfg, ctx = decoding_options(cfg)
    model, tokenizer, _ = load_decoders(ensemble_runs(cfg.ckpt, cfg.ensemble), ctx,
                                        cfg.checkpoint, decode_cfg.precision)
    return Translator(model, tokenizer, decode_cfg, ctx), decode_cfg


def translate(cfg):
    """Translate ``cfg.input`` (or stdin) into ``cfg.output`` (or stdout)."""
    use_numpy_interface()
    check_paths(cfg)
    translator, decode_cfg = make_translator(cfg)
    log.info("translating %s with %s", cfg.input or "standard input, line by line", cfg.ckpt)
    chunks = file_chunks(cfg.input) if cfg.input else stream_chunks(sys.stdin.fileno())
    out, lines_read, first_line = open_output(cfg.output), 0, None
    try:
        for chunk in chunks:
            lines_read += len(chunk)
            numbers, lines = zip(*chunk)
            first_line = lines[0] if first_line is None else first_line
            results = translator.translate_nbest(list(lines), first_line=numbers[0])
            for number, nbest in zip(numbers, results):
                out.write(format_nbest(number, nbest) if decode_cfg.nbest > 1
                          else nbest[0][0] + "\n")
            out.flush()
        if not lines_read:
            log.warning("%s has no lines: nothing to translate", cfg.input or "standard input")
        elif cfg.attention_png:
            attention_png(cfg, translator, first_line)  # an mtx Translator (check_attention_png)
    finally:
        if out is not sys.stdout:
            out.close()


# mtx-translate and scripts/translate.py
main = hydra_command("translate", translate)
