#!/usr/bin/env python
"""Train a Transformer: `python scripts/train.py [model.num_heads=8 data=multi30k_en_fr ...]`.

Sweeps: `python scripts/train.py -m model.num_heads=1,2,4,8` or `sweep=heads`.
The run directory (printed at the end) keeps the config, tokenizer, checkpoints, metrics.jsonl
and report.json. Returns the validation BLEU (for Hydra sweepers).
"""
import hydra

from mtx.commands.common import one_line_errors, run
from mtx.commands.train import train


@hydra.main(config_path="../conf", config_name="train", version_base="1.3")
def main(cfg):
    with one_line_errors():
        return train(cfg)


if __name__ == "__main__":
    run(main)
