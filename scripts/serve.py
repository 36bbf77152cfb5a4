#!/usr/bin/env python
"""Serve a trained run over HTTP: a page that shows each head's attention and switches heads
off, and a JSON API (docs/serving.md).

    python scripts/serve.py ckpt=outputs/train/runs/<run>            # http://127.0.0.1:8000/
    python scripts/serve.py ckpt=<run> port=0 decode=greedy          # a free port, logged
"""
from mtx.commands.serve import main

if __name__ == "__main__":
    main()
