#!/usr/bin/env python
"""Download and verify the Multi30k files without training (`make data`):

    python scripts/download.py              # into the data directory (data/ of the checkout)
    MTX_DATA_DIR=/big/disk python scripts/download.py
"""
from mtx.commands.download import main

if __name__ == "__main__":
    main()
