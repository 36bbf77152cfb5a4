"""An mtx run written as a CTranslate2 model directory: the spec (`mtx.deploy.spec`) converted,
quantized and written by a `ctranslate2.converters.Converter`, the run's tokenizer beside it and
``mtx_export.json`` (what was exported, `read_export_info`). The directory is built beside the
output and swapped into place in one step when whole (`_replace_dir`), so at every instant
``output=`` holds the earlier export or the new one, each complete.
"""
import dataclasses
import hashlib
import os
import re
import shutil
import time
from pathlib import Path

from ..data.corpus import DATA_FILE, TOKENIZER_FILES, tokenizer_file
from ..data.vocabularies import tokenizer_files
from ..errors import CheckpointError, ConfigError, FileWriteError
from ..runs import faults
from ..files import (atomic_write_json, exchange, fsync_dir, held_by_another_process, sha256_of,
                     temp_path)
from . import EXPORT_INFO, require
from .spec import transformer_spec, vocabulary_of

QUANTIZATIONS = ("float32", "int8", "int16")  # stored weights CTranslate2 runs on a CPU


def parameter_digest(model):
    """SHA-256 of the model's parameters (names, shapes, bytes): which weights were exported."""
    digest = hashlib.sha256()
    for name, param in sorted(model.collect_params().items()):
        value = param.data().asnumpy()
        digest.update(f"{name}{value.shape}{value.dtype}".encode() + value.tobytes())
    return digest.hexdigest()


def _check_quantization(quantization):
    if quantization not in QUANTIZATIONS:
        raise ConfigError(f"quantization={quantization}: choose one of {', '.join(QUANTIZATIONS)} "
                          f"(the weight types CTranslate2 runs on a CPU)")


def _prepare_output(output):
    """The output directory may be new, empty, or an earlier export (replaced); an absolute path
    (``output=.`` has no name to put a staging folder beside)."""
    output = Path(os.path.abspath(output))
    if output.exists() and not output.is_dir():
        raise FileWriteError(f"output={output} is a file; give a directory")
    if output.is_dir() and any(output.iterdir()) and not (output / EXPORT_INFO).is_file():
        raise FileWriteError(f"output={output} is a non-empty directory that is not an mtx "
                             f"export; give a new or empty directory")
    if not output.parent.is_dir() or not os.access(output.parent, os.W_OK | os.X_OK):
        raise FileWriteError(f"output={output}: {output.parent} is not a writable directory")
    return output


def _replace_dir(staging, output):
    """Put the finished ``staging`` directory at ``output``, every file on disk first
    (CTranslate2 writes without fsync). A new ``output`` is one rename; an earlier export is
    exchanged with the new one in one step, and then deleted from ``staging``. Where the file
    system cannot exchange (`mtx.files.exchange`: not Linux, some network file systems) it takes
    two renames, and a kill between them leaves the earlier export at ``staging``."""
    for path in (p for p in staging.iterdir() if p.is_file()):
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    fsync_dir(staging)
    faults.point("export_staged")
    if not output.exists():
        os.rename(staging, output)
    elif not exchange(staging, output):
        old = temp_path(output.with_name(output.name + ".old"))
        os.replace(output, old)
        os.replace(staging, output)
        staging = old
    fsync_dir(output.parent)
    faults.point("export_replaced")
    shutil.rmtree(staging, ignore_errors=True)


def _remove_leftovers(output):
    """Delete what killed exports into ``output`` left beside it (their staging folders, an
    earlier export swapped out), but a running export's."""
    ours = re.compile(rf"\.{re.escape(output.name)}(\.old)?\.\d+\.tmp")
    for path in output.parent.iterdir():
        if ours.fullmatch(path.name) and not held_by_another_process(path):
            shutil.rmtree(path, ignore_errors=True)


def export(model, tokenizer_file, output, quantization="float32", source=None):
    """Write CTranslate2 model directory ``output`` from an mtx `Transformer` and its tokenizer
    file (spm.model or toy_symbols.json, copied beside the model). ``source``: what to record
    of the run (mtx_export.json). Returns the export record."""
    from ..data.corpus import load_tokenizer
    ctranslate2 = require()
    _check_quantization(quantization)
    output = _prepare_output(output)
    tokenizer_file = Path(tokenizer_file)
    if tokenizer_file.name not in TOKENIZER_FILES:
        raise CheckpointError(f"{tokenizer_file}: not an mtx tokenizer file "
                              f"({' or '.join(TOKENIZER_FILES)})")
    tokenizer = load_tokenizer(tokenizer_file.parent)
    spec, padded = transformer_spec(
        model, vocabulary_of(tokenizer.target, model.cfg.vocab_size),
        vocabulary_of(tokenizer.source, model.cfg.src_vocab_size or model.cfg.vocab_size))

    class _Spec(ctranslate2.converters.Converter):
        def _load(self):
            return spec

    _remove_leftovers(output)
    staging = temp_path(output)
    try:
        _Spec().convert(str(staging), quantization=quantization)
        for path in tokenizer_files(tokenizer_file):  # both sides' of separate vocabularies
            shutil.copyfile(path, staging / path.name)
        if (tokenizer_file.parent / DATA_FILE).is_file():  # the source's case rule goes along
            shutil.copyfile(tokenizer_file.parent / DATA_FILE, staging / DATA_FILE)
        record = {"format": "ctranslate2", "quantization": quantization,
                  "ctranslate2_version": ctranslate2.__version__,
                  "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "parameters_sha256": parameter_digest(model),
                  "tokenizer": tokenizer_file.name,
                  "padded_heads": padded, **(source or {}),
                  "model": dataclasses.asdict(model.cfg)}
        atomic_write_json(staging / EXPORT_INFO, record)
        _replace_dir(staging, output)
    except OSError as err:
        raise FileWriteError(f"output={output}: {err.strerror or err}; give a writable "
                             f"directory with free space") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


def read_export_info(path):
    """mtx_export.json of an exported directory (CheckpointError if missing or damaged)."""
    from ..files import read_json
    info = read_json(Path(path) / EXPORT_INFO, CheckpointError, "export description")
    if info.get("format") != "ctranslate2" or "model" not in info:
        raise CheckpointError(f"{Path(path) / EXPORT_INFO}: not an mtx CTranslate2 export; "
                              f"export the run again with mtx-export")
    return info


def export_run(run_dir, output, quantization="float32", checkpoint="auto"):
    """Export checkpoint ``checkpoint`` of training run ``run_dir`` (`mtx.runs.rundir.load_run`)."""
    import mxnet as mx
    from ..runs.rundir import load_run
    _check_quantization(quantization)
    require()
    _prepare_output(output)
    model, _, data_cfg = load_run(run_dir, mx.cpu(), checkpoint)
    run_dir = Path(run_dir).resolve()
    tokenizer = tokenizer_file(run_dir)
    if tokenizer is None:
        raise CheckpointError(f"{run_dir} has no tokenizer ({' or '.join(TOKENIZER_FILES)})")
    source = {"run": str(run_dir), "checkpoint": str(checkpoint),
              "data": None if data_cfg is None else {"name": data_cfg.name,
                                                     "src_lang": data_cfg.src_lang,
                                                     "tgt_lang": data_cfg.tgt_lang}}
    run_json = run_dir / "run.json"
    if run_json.is_file():
        source["run_identity_sha256"] = sha256_of(run_json)
    return export(model, tokenizer, output, quantization, source)

