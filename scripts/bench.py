#!/usr/bin/env python
"""Throughput of mtx against its peers (`make bench`); see `python -m mtx.bench --help`."""
from mtx.bench.__main__ import main

if __name__ == "__main__":
    main()
