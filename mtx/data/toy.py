"""The synthetic toy task: random symbol sequences and their copy or reversal."""
import random

from .multi30k import SPLITS as TOY_SPLITS  # the same split names as Multi30k's


def toy_symbols(num_symbols):
    return [f"w{i}" for i in range(num_symbols)]


def make_toy(task, num_symbols, min_len, max_len, sizes, seed):
    """{split: (source lines, target lines)}: random symbol sequences and their copy/reversal
    (``task`` one of config.TOY_TASKS, which DataConfig checks)."""
    rng = random.Random(seed)
    symbols = toy_symbols(num_symbols)
    splits = {}
    for split, size in zip(TOY_SPLITS, sizes):
        src = [[rng.choice(symbols) for _ in range(rng.randint(min_len, max_len))]
               for _ in range(size)]
        tgt = [s if task == "copy" else s[::-1] for s in src]
        splits[split] = ([" ".join(s) for s in src], [" ".join(t) for t in tgt])
    return splits
