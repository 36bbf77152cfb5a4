#!/usr/bin/env python
"""Translate text with a trained run: one output line per input line, in input order.

    python scripts/translate.py ckpt=outputs/train/runs/<run> < input.en > output.de
    python scripts/translate.py ckpt=<run> input=test.en output=test.de decode.beam_size=5

With decode.nbest=N>1 each input line gives N lines ``LINE<TAB>RANK<TAB>SCORE<TAB>TEXT`` (line
and rank from 1, score the length-normalised log-probability), best first.
"""
from mtx.commands.translate import main

if __name__ == "__main__":
    main()
