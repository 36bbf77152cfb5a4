#!/usr/bin/env python
"""Prepare a corpus of your own once, into a folder you name, before training:

    python scripts/prepare.py data.src_lang=en data.tgt_lang=xx data.train=corpus/train output=enxx
    python scripts/train.py data=files data.src_lang=en data.tgt_lang=xx data.prepared=enxx \
        data.valid=corpus/dev
    python scripts/prepare.py --list            # what the data directory holds, with sizes
    python scripts/prepare.py --prune enxx      # remove it (not while a run uses it)
"""
from mtx.commands.prepare import main

if __name__ == "__main__":
    main()
