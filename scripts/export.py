#!/usr/bin/env python
"""Write a trained run as a CTranslate2 model directory (the run's tokenizer and
mtx_export.json beside it):

    python scripts/export.py ckpt=outputs/train/runs/<run> output=exported/de quantization=int8
    python scripts/translate.py ckpt=exported/de input=test.en output=test.de
"""
from mtx.commands.export import main

if __name__ == "__main__":
    main()
