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
from mtx.commands.heads import main

if __name__ == "__main__":
    main()
