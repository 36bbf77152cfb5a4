#!/usr/bin/env python
"""Translate text with a trained run: one output line per input line, in input order.

    python scripts/translate.py ckpt=outputs/train/runs/<run> < input.en > output.de
    python scripts/translate.py ckpt=<run> input=test.en output=test.de decode.beam_size=5

With decode.nbest=N>1 each input line gives N lines ``LINE<TAB>RANK<TAB>SCORE<TAB>TEXT`` (line
and rank from 1, score the length-normalised log-probability), best first.
"""
import hydra

from mtx.commands.common import one_line_errors, run
from mtx.commands.translate import translate


@hydra.main(config_path="../conf", config_name="translate", version_base="1.3")
def main(cfg):
    with one_line_errors():
        translate(cfg)


if __name__ == "__main__":
    run(main)
