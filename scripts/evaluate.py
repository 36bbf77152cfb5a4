#!/usr/bin/env python
"""Translate a split of the run's language pair (or any source/reference files) and score it.

    python scripts/evaluate.py ckpt=outputs/train/runs/<run> split=test_2016_flickr
    python scripts/evaluate.py ckpt=<run> source=my.en reference=my.de decode=greedy

Prints sacreBLEU and chrF with their signatures and the tokenized-lowercased BLEU; writes the
hypotheses and a JSON of the scores into <run>/eval/.
"""
import json
import logging
from pathlib import Path

import hydra
from mxnet import npx

from mtx.files import atomic_write_text
from mtx.cli import decoding_setup, one_line_errors
from mtx.errors import DataError
from mtx.lines import read_parallel
from mtx.multi30k import load_multi30k
from mtx.evaluation import translate_and_score

log = logging.getLogger("mtx")


def load_texts(cfg, data_cfg):
    """-> (name, source lines, reference lines, target language)."""
    if cfg.source or cfg.reference:
        if not (cfg.source and cfg.reference):
            raise DataError("give both source= and reference=, or neither (then split= is used)")
        src, ref = read_parallel(cfg.source, cfg.reference)
        return Path(cfg.source).name, src, ref, data_cfg.tgt_lang if data_cfg else "en"
    if data_cfg is None or data_cfg.name != "multi30k":
        raise DataError(f"{cfg.ckpt} was not trained on Multi30k: pass source= and reference=")
    splits = load_multi30k(data_cfg.src_lang, data_cfg.tgt_lang, cfg.raw_dir, cfg.cache_dir)
    if cfg.split not in splits:
        raise DataError(f"split={cfg.split}: choose one of {', '.join(splits)}")
    return cfg.split, *splits[cfg.split], data_cfg.tgt_lang


@hydra.main(config_path="../conf", config_name="evaluate", version_base="1.3")
def main(cfg):
    npx.set_np()
    with one_line_errors():
        decode_cfg, ctx, model, tokenizer, data_cfg = decoding_setup(cfg)
        name, sources, references, tgt_lang = load_texts(cfg, data_cfg)
    hypotheses, scores = translate_and_score(model, tokenizer, decode_cfg, ctx, sources,
                                             references, tgt_lang)
    out_dir = Path(cfg.ckpt) / "eval"
    out_dir.mkdir(exist_ok=True)
    stem = f"{name}.beam{decode_cfg.beam_size}.lp{decode_cfg.length_penalty}"
    atomic_write_text(out_dir / f"{stem}.hyp", "\n".join(hypotheses) + "\n")
    atomic_write_text(out_dir / f"{stem}.json", json.dumps(scores, indent=1))
    for metric in ("sacrebleu", "chrf", "bleu_tok_lc"):
        print(f"{name} {metric} = {scores[metric]['score']:.2f}  {scores[metric]['signature']}")
    print(f"{len(sources)} sentences in {scores['decode_seconds']:.1f} s "
          f"({scores['sentences_per_second']} sentences/s); hypotheses: {out_dir / stem}.hyp")


if __name__ == "__main__":
    main()
