"""scripts/evaluate.py: translate a split of the run's corpus (or any source/reference files) and
score it; sacreBLEU, chrF and tokenized-lowercased BLEU to stdout, hypotheses and a JSON of the
scores into <run>/eval/ (or out_dir=)."""
from pathlib import Path


from ..hardware.devices import use_numpy_interface
from ..config import DecodeConfig
from ..errors import DataError
from ..decoding.evaluation import score_line, translate_and_score
from ..files import atomic_write_json, atomic_write_text
from ..data.corpus import read_held
from ..data.lines import read_parallel
from ..data.multi30k import TEST_SPLIT, load_split
from ..data.sources import VALID, held_prefixes, prefix_pair
from ..runs.rundir import require_run
from ..runs.runlock import RunLock
from ..decoding.ensemble import ensemble_runs, load_decoders
from .entry import decoding_options, hydra_command
from .paths import writable_out_dir


def read_files(cfg):
    """(name, source lines, reference lines) of source=/reference=, or None (then split=)."""
    if not (cfg.source or cfg.reference):
        return None
    if not (cfg.source and cfg.reference):
        raise DataError("give both source= and reference=, or neither (then split= is used)")
    return (Path(cfg.source).name, *read_parallel(cfg.source, cfg.reference))


def read_split(cfg, data_cfg):
    """(name, source lines, reference lines) of split= of the run's corpus (null: its first test
    set): a Multi30k split of the run's language pair (downloaded into the data directory when
    it is not in raw_dir=), or a split of the run's own files (data=files), read as training
    read it for report.json (`mtx.data.corpus.read_held`: a test set whole, an empty source
    included; val without the pairs that have an empty side)."""
    if data_cfg is None or data_cfg.name not in ("multi30k", "files"):
        raise DataError(f"{cfg.ckpt} was not trained on Multi30k or files: pass source= and "
                        f"reference=")
    if data_cfg.name == "multi30k":
        split = cfg.split or TEST_SPLIT
        return (split, *load_split(split, data_cfg.src_lang, data_cfg.tgt_lang, cfg.raw_dir,
                                   cfg.data_dir))
    prefixes = held_prefixes(data_cfg)
    split = cfg.split or ([name for name in prefixes if name != VALID] or [VALID])[0]
    if split not in prefixes:
        raise DataError(f"split={split}: {cfg.ckpt}'s corpus has {', '.join(prefixes)}; choose "
                        f"one, or pass source= and reference=")
    pair = prefix_pair(prefixes[split], data_cfg, f"split={split}", cfg.data_dir)
    return (split, *read_held(split, pair, data_cfg.lowercase_source))


def decode_name(decode_cfg):
    """The part of the output files' names that tells decodes apart: beam5.lp1.5, with the
    output limit when it is not the default (beam5.lp1.5.len2.0x+5)."""
    name = f"beam{decode_cfg.beam_size}.lp{decode_cfg.length_penalty}"
    default = DecodeConfig()
    if (decode_cfg.max_len_a, decode_cfg.max_len_b) != (default.max_len_a, default.max_len_b):
        name += f".len{float(decode_cfg.max_len_a)}x+{decode_cfg.max_len_b}"
    return name


def evaluate(cfg):
    """Score the run ``cfg.ckpt`` on ``cfg.split`` or on ``cfg.source``/``cfg.reference``;
    returns the scores."""
    use_numpy_interface()
    # bad files, a wrong ckpt=, checkpoint=, decode.* or device=, a split the run cannot have and
    # an unwritable output fail before the model loads, a split is downloaded or anything is
    # created in the run
    texts = read_files(cfg)
    run = require_run(cfg.ckpt)
    runs = ensemble_runs(cfg.ckpt, cfg.ensemble)
    decode_cfg, ctx = decoding_options(cfg)
    run.locate_checkpoint(cfg.checkpoint)
    name, sources, references = texts or read_split(cfg, run.data_config())
    out_dir = writable_out_dir(cfg, "eval")
    with RunLock(out_dir):
        return evaluate_into(cfg, runs, out_dir, name, sources, references, decode_cfg, ctx)


def evaluate_into(cfg, runs, out_dir, name, sources, references, decode_cfg, ctx):
    """`evaluate` of ``runs`` (ckpt= and ensemble=) once its inputs are checked, writing into
    ``out_dir`` (held)."""
    model, tokenizer, data_cfg = load_decoders(runs, ctx, cfg.checkpoint, decode_cfg.precision)
    tgt_lang = data_cfg.tgt_lang if data_cfg else "en"
    hypotheses, scores = translate_and_score(model, tokenizer, decode_cfg, ctx, sources,
                                             references, tgt_lang,
                                             data_cfg.bleu_tokenize if data_cfg else None)
    checkpoint = "" if cfg.checkpoint == "auto" else f".{Path(str(cfg.checkpoint)).stem}"
    together = f".ensemble{len(runs)}" if len(runs) > 1 else ""
    stem = f"{name}{checkpoint}{together}.{decode_name(decode_cfg)}"
    atomic_write_text(out_dir / f"{stem}.hyp", "\n".join(hypotheses) + "\n")
    atomic_write_json(out_dir / f"{stem}.json", scores)
    for metric in ("sacrebleu", "chrf", "bleu_tok_lc"):
        print(score_line(name, metric, scores[metric]))
    print(f"{len(sources)} sentences in {scores['decode_seconds']:.1f} s "
          f"({scores['sentences_per_second']} sentences/s); hypotheses: {out_dir / stem}.hyp")
    return scores


# mtx-evaluate and scripts/evaluate.py
main = hydra_command("evaluate", evaluate)
