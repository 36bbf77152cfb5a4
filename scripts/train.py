#!/usr/bin/env python
"""Train a Transformer: `python scripts/train.py [model.num_heads=8 data=multi30k_en_fr ...]`.

Sweeps: `python scripts/train.py -m model.num_heads=1,2,4,8` or `sweep=heads`.
The run directory (printed at the end) keeps the config, tokenizer, checkpoints, metrics.jsonl
and report.json. Returns the validation BLEU (for Hydra sweepers).
"""
from mtx.commands.train import main

if __name__ == "__main__":
    main()
