#!/usr/bin/env python
"""Translate a split of the run's language pair (or any source/reference files) and score it.

    python scripts/evaluate.py ckpt=outputs/train/runs/<run> split=test_2016_flickr
    python scripts/evaluate.py ckpt=<run> source=my.en reference=my.de decode=greedy

Prints sacreBLEU and chrF with their signatures and the tokenized-lowercased BLEU; writes the
hypotheses and a JSON of the scores into <run>/eval/ (out_dir=DIR: there instead, e.g. for a
read-only run directory).
"""
from mtx.commands.evaluate import main

if __name__ == "__main__":
    main()
