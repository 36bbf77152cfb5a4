"""The Multi30k corpus (task 1): its files, their SHA-256 sums, download and verification.

A file comes from a local copy (``data.raw_dir`` / MTX_MULTI30K_DIR) or from the data directory
(`mtx.datadir`, ``<data>/multi30k/``), where it is downloaded from the public repository when it
is missing; either way its SHA-256 is checked before use. A local copy must hold the training
splits (`SPLITS`); the later test sets may be missing from it and are then looked up in, or
downloaded into, the data directory.
"""
import hashlib
import http.client
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import DataError
from ..files import atomic_write_bytes, sha256_of
from .lines import read_parallel

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
MULTI30K_LANGS = ("en", "de", "fr")
SPLITS = ("train", "val", "test_2016_flickr")    # what training needs (every local copy has them)
TEST_SPLIT = "test_2016_flickr"                  # the test set results are reported on
TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco", "test_2018_flickr")
ALL_SPLITS = ("train", "val") + TEST_SETS
DOWNLOAD_TIMEOUT_SECONDS = 60
# SHA256 of the gzipped files in multi30k/dataset data/task1/raw/ (branch master).
MULTI30K_SHA256 = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.fr.gz": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}


# where a local copy is given: the key differs by command
RAW_DIR_KEYS = "data.raw_dir= (raw_dir= for evaluate, heads and download) or MTX_MULTI30K_DIR"


def file_name(split, lang):
    return f"{split}.{lang}.gz"


def multi30k_file(name, raw_dir, data_dir, download=True):
    """Path of the verified Multi30k file ``name`` (module docstring for where it is looked
    for); ``download=False`` never downloads. Raises DataError naming the problem and the fix."""
    expected = MULTI30K_SHA256[name]
    path = None
    if raw_dir:
        if not Path(raw_dir).is_dir():
            raise DataError(f"the Multi30k folder {raw_dir} is not a readable directory; point "
                            f"{RAW_DIR_KEYS} at the Multi30k task1/raw files, or unset them to "
                            f"download the files")
        if (Path(raw_dir) / name).is_file():
            path = Path(raw_dir) / name
        elif name.split(".")[0] in SPLITS:
            raise DataError(f"{Path(raw_dir) / name} is missing; the Multi30k folder "
                            f"({RAW_DIR_KEYS}) must hold the train, val and test_2016_flickr .gz "
                            f"files of Multi30k task 1")
    if path is None:
        path = Path(data_dir) / "multi30k" / name
        if not path.is_file():
            if not download:
                where = (f"the Multi30k folder {raw_dir} nor {path.parent}" if raw_dir
                         else str(path.parent))
                raise DataError(f"{name} is not in {where}; `make data` downloads it")
            _download(MULTI30K_URL + name, path, expected)
    actual = sha256_of(path)
    if actual != expected:
        fix = (f"{RAW_DIR_KEYS} must hold Multi30k's own files, unchanged; unset them to "
               f"download the files" if raw_dir and path.parent == Path(raw_dir) else
               "delete it and fetch it again")
        raise DataError(f"{path} has SHA256 {actual[:12]}…, expected {expected[:12]}…: the file "
                        f"is corrupted or not Multi30k; {fix}")
    return path


def _download(url, path, expected):
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_SECONDS) as response:
            data = response.read()
    except (urllib.error.URLError, http.client.HTTPException, OSError) as err:  # or cut off
        raise DataError(f"cannot download {url} ({err}); with no network, point {RAW_DIR_KEYS} "
                        f"at a local copy of the Multi30k task1/raw files") from None
    if hashlib.sha256(data).hexdigest() != expected:
        raise DataError(f"{url} downloaded with a wrong SHA256; try again later")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)


def check_pair(src_lang, tgt_lang):
    for lang in (src_lang, tgt_lang):
        if lang not in MULTI30K_LANGS:
            raise DataError(f"data.src_lang/tgt_lang={lang}: Multi30k has {', '.join(MULTI30K_LANGS)}")
    if src_lang == tgt_lang:
        raise DataError(f"data.src_lang and data.tgt_lang are both {src_lang}")


def load_split(split, src_lang, tgt_lang, raw_dir, data_dir, download=True):
    """(source lines, target lines) of ``split`` (one of `ALL_SPLITS`)."""
    if split not in ALL_SPLITS:
        raise DataError(f"split={split}: Multi30k task 1 has {', '.join(ALL_SPLITS)}")
    check_pair(src_lang, tgt_lang)
    return read_parallel(multi30k_file(file_name(split, src_lang), raw_dir, data_dir, download),
                         multi30k_file(file_name(split, tgt_lang), raw_dir, data_dir, download))


def load_multi30k(src_lang, tgt_lang, raw_dir, data_dir):
    """{split: (source lines, target lines)} for the splits training needs (`SPLITS`)."""
    check_pair(src_lang, tgt_lang)
    return {split: load_split(split, src_lang, tgt_lang, raw_dir, data_dir) for split in SPLITS}


def training_folder(raw_dir, data_dir, langs=MULTI30K_LANGS):
    """The folder holding the training splits (`SPLITS`) of ``langs``, each verified (downloaded
    into ``<data_dir>/multi30k/`` when missing and no local copy is given), as `make data`
    gets them. DataError, one line, when a file cannot be had."""
    paths = {multi30k_file(file_name(split, lang), raw_dir, data_dir).parent
             for split in SPLITS for lang in langs}
    return paths.pop()  # one folder: a local copy must hold every training split


def fetch_all(raw_dir, data_dir, langs=MULTI30K_LANGS):
    """Every file of the registry in ``langs``, verified (downloaded when missing):
    [(name, path or None, problem or None)]. A training split that cannot be had raises."""
    results = []
    for split in ALL_SPLITS:
        for lang in langs:
            name = file_name(split, lang)
            try:
                results.append((name, multi30k_file(name, raw_dir, data_dir), None))
            except DataError as err:
                if split in SPLITS:
                    raise
                results.append((name, None, str(err)))
    return results
