#!/usr/bin/env python
"""Which heads matter in a trained run, and how much faster the model gets without the rest.

    python scripts/heads.py ckpt=outputs/train/runs/<run> [leave_one_out=false max_sentences=500]
    python scripts/heads.py ckpt=... prune_fraction=0.5 finetune.minutes=10   # prune, then recover

Writes into <run>/heads/ (out_dir=DIR: there instead, e.g. for a read-only run directory):
importance.json and importance.png (gradient sensitivity, attention confidence, leave-one-out
BLEU per layer and head), pruning.json and pruning.png (BLEU vs heads removed, importance orders
against random orders), pruned/ (a smaller run directory that scripts/translate.py loads;
fine-tuned there when finetune.minutes > 0) and speed.json (full vs pruned decoding, interleaved
in one process).
"""
import hydra

from mtx.commands.common import one_line_errors, run
from mtx.commands.heads import study_heads


@hydra.main(config_path="../conf", config_name="heads", version_base="1.3")
def main(cfg):
    with one_line_errors():
        study_heads(cfg)


if __name__ == "__main__":
    run(main)
