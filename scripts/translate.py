#!/usr/bin/env python
"""Translate text with a trained run: one output line per input line, in input order.

    python scripts/translate.py ckpt=outputs/train/runs/<run> < input.en > output.de
    python scripts/translate.py ckpt=<run> input=test.en output=test.de decode.beam_size=5

With decode.nbest=N>1 each input line gives N lines ``LINE<TAB>RANK<TAB>SCORE<TAB>TEXT`` (line
and rank from 1, score the length-normalised log-probability), best first.
"""
import sys

import hydra
from mxnet import npx

from mtx.cli import decoding_setup, one_line_errors
from mtx.lines import file_chunks, stream_chunks
from mtx.search import Translator


def format_nbest(number, nbest):
    return "".join(f"{number}\t{rank}\t{score:.4f}\t{text}\n"
                   for rank, (text, score) in enumerate(nbest, 1))


@hydra.main(config_path="../conf", config_name="translate", version_base="1.3")
def main(cfg):
    npx.set_np()
    with one_line_errors():
        decode_cfg, ctx, model, tokenizer, _ = decoding_setup(cfg)
        translator = Translator(model, tokenizer, decode_cfg, ctx)
        chunks = file_chunks(cfg.input) if cfg.input else stream_chunks(sys.stdin.fileno())
        out = open(cfg.output, "w", encoding="utf-8") if cfg.output else sys.stdout
    for chunk in chunks:
        numbers, lines = zip(*chunk)
        results = translator.translate_nbest(list(lines), first_line=numbers[0])
        for number, nbest in zip(numbers, results):
            out.write(format_nbest(number, nbest) if decode_cfg.nbest > 1 else nbest[0][0] + "\n")
        out.flush()
    if cfg.attention_png and cfg.input:
        from mtx.pictures import attention_pictures
        with open(cfg.input, encoding="utf-8", errors="replace") as f:
            attention_pictures(model, tokenizer, f.readline().strip(), cfg.attention_png, ctx)
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
