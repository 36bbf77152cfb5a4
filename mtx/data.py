"""Parallel data: Multi30k (verified, downloaded when needed) and a synthetic toy task, turned into
length-bucketed batches of subword ids.

A `Batch` holds host (numpy) int32 arrays:
    src_tokens (B, S)  source ids + EOS, padded with PAD    src_valid_len (B,)
    tgt_in     (B, T)  BOS + target ids                     tgt_valid_len (B,)
    tgt_out    (B, T)  target ids + EOS                     ids (B,) sentence indices
"""
import gzip
import hashlib
import os
import random
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as onp

from .vocab import BOS, EOS, PAD

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MULTI30K_LANGS = ("en", "de", "fr")
SPLITS = ("train", "val", "test_2016_flickr")
# SHA256 of the gzipped files in multi30k/dataset data/task1/raw/ (branch master).
MULTI30K_SHA256 = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}


class DataError(ValueError):
    """Bad or missing data; the message names the file and what to do."""


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def multi30k_file(name, raw_dir, cache_dir):
    """Path of a verified Multi30k file: from ``raw_dir`` if given, else downloaded into
    ``cache_dir`` (atomically, checksum first). Raises DataError naming the problem."""
    expected = MULTI30K_SHA256[name]
    if raw_dir:
        path = Path(raw_dir) / name
        if not Path(raw_dir).is_dir():
            raise DataError(f"data.raw_dir={raw_dir} is not a readable directory; point it (or "
                            f"MTX_MULTI30K_DIR) at the Multi30k task1/raw files, or unset both "
                            f"to download them")
        if not path.is_file():
            raise DataError(f"{path} is missing; data.raw_dir must hold the 9 Multi30k .gz files")
    else:
        path = Path(cache_dir) / "multi30k" / name
        if not path.is_file():
            _download(MULTI30K_URL + name, path, expected)
    actual = sha256_of(path)
    if actual != expected:
        raise DataError(f"{path} has SHA256 {actual[:12]}…, expected {expected[:12]}…: the file "
                        f"is corrupted or not Multi30k; delete it and fetch it again")
    return path


def _download(url, path, expected):
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
            out.write(response.read())
    except (urllib.error.URLError, OSError) as err:
        tmp.unlink(missing_ok=True)
        raise DataError(f"cannot download {url} ({err}); with no network, set MTX_MULTI30K_DIR "
                        f"or data.raw_dir to a local copy of the Multi30k task1/raw files") from None
    if sha256_of(tmp) != expected:
        tmp.unlink(missing_ok=True)
        raise DataError(f"{url} downloaded with a wrong SHA256; try again later")
    os.replace(tmp, path)


def read_lines(path):
    """Lines of a UTF-8 text file (``.gz`` or plain), without newlines; DataError names the line
    of any invalid UTF-8."""
    opener = gzip.open if str(path).endswith(".gz") else open
    lines = []
    with opener(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                lines.append(raw.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError:
                raise DataError(f"{path}:{number}: not valid UTF-8; fix or remove that line") from None
    return lines


def read_parallel(src_path, tgt_path):
    """Aligned (source, target) line lists; DataError on different lengths or an empty line."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: parallel "
                        f"files must align line by line")
    for path, lines in ((src_path, src), (tgt_path, tgt)):
        for number, line in enumerate(lines, 1):
            if not line.strip():
                raise DataError(f"{path}:{number}: empty line in parallel data; remove the pair")
    return src, tgt


def load_multi30k(src_lang, tgt_lang, raw_dir, cache_dir):
    """{split: (source lines, target lines)} for the three Multi30k task 1 splits."""
    for lang in (src_lang, tgt_lang):
        if lang not in MULTI30K_LANGS:
            raise DataError(f"data.src_lang/tgt_lang={lang}: Multi30k has {', '.join(MULTI30K_LANGS)}")
    if src_lang == tgt_lang:
        raise DataError(f"data.src_lang and data.tgt_lang are both {src_lang}")
    return {split: read_parallel(multi30k_file(f"{split}.{src_lang}.gz", raw_dir, cache_dir),
                                 multi30k_file(f"{split}.{tgt_lang}.gz", raw_dir, cache_dir))
            for split in SPLITS}


def toy_symbols(num_symbols):
    return [f"w{i}" for i in range(num_symbols)]


def make_toy(task, num_symbols, min_len, max_len, sizes, seed):
    """{split: (source lines, target lines)}: random symbol sequences and their copy/reversal."""
    if task not in ("copy", "reverse"):
        raise DataError(f"data.task={task}: the toy task is 'copy' or 'reverse'")
    rng = random.Random(seed)
    symbols = toy_symbols(num_symbols)
    splits = {}
    for split, size in zip(SPLITS, sizes):
        src = [[rng.choice(symbols) for _ in range(rng.randint(min_len, max_len))]
               for _ in range(size)]
        tgt = [s if task == "copy" else s[::-1] for s in src]
        splits[split] = ([" ".join(s) for s in src], [" ".join(t) for t in tgt])
    return splits


@dataclass
class Batch:
    src_tokens: onp.ndarray
    src_valid_len: onp.ndarray
    tgt_in: onp.ndarray
    tgt_out: onp.ndarray
    tgt_valid_len: onp.ndarray
    ids: onp.ndarray

    @property
    def num_tgt_tokens(self):
        return int(self.tgt_valid_len.sum())


def _pad(rows, round_to):
    from gluonnlp.data import batchify
    return batchify.Pad(pad_val=PAD, ret_length=True, dtype="int32", round_to=round_to)(rows)


def collate(src_ids, tgt_ids, ids, round_to=None):
    """Sentences (lists of ids, no specials) -> a padded `Batch`. ``round_to`` rounds the padded
    lengths up to a multiple (fewer distinct shapes, but on Multi30k rounding to 8 pads 20% more
    tokens and costs more than the shapes it saves: buckets already keep shapes few)."""
    src, src_len = _pad([onp.array(src_ids[i] + [EOS], "int32") for i in ids], round_to)
    tgt_in, tgt_len = _pad([onp.array([BOS] + tgt_ids[i], "int32") for i in ids], round_to)
    tgt_out, _ = _pad([onp.array(tgt_ids[i] + [EOS], "int32") for i in ids], round_to)
    return Batch(src.asnumpy(), src_len.asnumpy().astype("int32"), tgt_in.asnumpy(),
                 tgt_out.asnumpy(), tgt_len.asnumpy().astype("int32"), onp.array(ids, "int64"))


def bucket_batches(src_ids, tgt_ids, batch_tokens, shuffle, seed, num_buckets=16):
    """Token-budget batches from gluonnlp's FixedBucketSampler (exponential-width buckets of the
    longer side, about ``batch_tokens`` padded tokens each). Every pair appears exactly once;
    with ``shuffle`` the order within buckets and of batches depends only on ``seed``."""
    from gluonnlp.data import ExpWidthBucket, FixedBucketSampler
    lengths = [max(len(s), len(t)) + 1 for s, t in zip(src_ids, tgt_ids)]
    sampler = FixedBucketSampler(lengths, batch_size=batch_tokens,
                                 num_buckets=min(num_buckets, max(1, len(set(lengths)))),
                                 shuffle=shuffle, use_average_length=True,
                                 bucket_scheme=ExpWidthBucket(bucket_len_step=1.2))
    state = onp.random.get_state()
    onp.random.seed(seed % (2 ** 32))
    try:
        groups = list(sampler)
    finally:
        onp.random.set_state(state)
    return [collate(src_ids, tgt_ids, group) for group in groups]


def sorted_batches(src_ids, batch_tokens, max_sentences=256):
    """For translation: sentence indices grouped by source length (longest first) so each group
    has about ``batch_tokens`` source tokens; returns a list of index lists."""
    order = sorted(range(len(src_ids)), key=lambda i: -len(src_ids[i]))
    groups, current, longest = [], [], 0
    for i in order:
        longest_if_added = max(longest, len(src_ids[i]) + 1)
        if current and (longest_if_added * (len(current) + 1) > batch_tokens
                        or len(current) >= max_sentences):
            groups.append(current)
            current, longest_if_added = [], len(src_ids[i]) + 1
        current.append(i)
        longest = longest_if_added
    if current:
        groups.append(current)
    return groups
