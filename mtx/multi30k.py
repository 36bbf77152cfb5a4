"""The Multi30k corpus (task 1): its files, their SHA-256 sums, download and verification.

Files come from a local copy (``data.raw_dir`` / MTX_MULTI30K_DIR) or are downloaded from the
public repository into the cache directory; either way each file's SHA-256 is checked before use.
"""
import urllib.error
import urllib.request
from pathlib import Path

from .errors import DataError
from .files import sha256_of
from .lines import read_parallel

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MULTI30K_LANGS = ("en", "de", "fr")
SPLITS = ("train", "val", "test_2016_flickr")
DOWNLOAD_TIMEOUT_SECONDS = 60
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
    from .files import atomic_write_bytes
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as err:
        raise DataError(f"cannot download {url} ({err}); with no network, set MTX_MULTI30K_DIR "
                        f"or data.raw_dir to a local copy of the Multi30k task1/raw files") from None
    import hashlib
    if hashlib.sha256(data).hexdigest() != expected:
        raise DataError(f"{url} downloaded with a wrong SHA256; try again later")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)


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
