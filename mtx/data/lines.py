"""Reading text: parallel training/test files (strict: every line must be valid), and text to
translate, from files a chunk at a time or from stdin as lines arrive (so a terminal or a pipe
gets each translation as soon as its line is complete, and a burst of lines is one batch). The
line-in, line-out frame every translator shares is `mtx.decoding.lines.LineTranslator`."""
import contextlib
import gzip
import logging
import os
import zlib

from ..errors import DataError

log = logging.getLogger(__name__)

BOM = "\ufeff"           # a byte-order mark some editors put before a file's first line
FILE_CHUNK_LINES = 1000  # lines of a file read (and translated, and written) together
GZIP_MAGIC = b"\x1f\x8b"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
STDIN = "standard input"


@contextlib.contextmanager
def _open(path):
    """A text file open for reading bytes: gzip-compressed (by its first bytes, whatever its
    name) or plain. The first bytes are looked at, not read, so a pipe loses nothing."""
    with open(path, "rb") as f:
        if f.peek(2)[:2] == GZIP_MAGIC:
            with gzip.GzipFile(fileobj=f) as unpacked:
                yield unpacked
        else:
            yield f


def _check_start(head, what):
    """DataError when the first bytes ``head`` of ``what`` show text that is not UTF-8 (UTF-16),
    or, for standard input, compressed."""
    if head.startswith(UTF16_BOMS):
        raise DataError(f"{what} is UTF-16 text; convert it to UTF-8 first, e.g. iconv -f UTF-16 "
                        f"-t UTF-8")
    if what == STDIN and head.startswith(GZIP_MAGIC):
        raise DataError("standard input is gzip-compressed; pipe it through zcat, or give the "
                        "file as input=")


def _without_bom(text, number):
    return text[1:] if number == 1 and text.startswith(BOM) else text


def _numbered_lines(path):
    """(line number from 1, bytes with the newline) of a file (gzip-compressed or plain);
    DataError names the file when it is missing, a directory, unreadable, UTF-16, or damaged
    gzip (cut short or corrupted)."""
    try:
        with _open(path) as f:
            for number, raw in enumerate(f, 1):
                if number == 1:
                    _check_start(raw, str(path))
                yield number, raw
    except (zlib.error, EOFError, gzip.BadGzipFile) as err:
        raise DataError(f"{path} is a damaged gzip file ({err}); re-download or re-compress "
                        f"it") from None
    except OSError as err:
        raise DataError(f"cannot read {path} ({err.strerror or err}); give an existing, "
                        f"readable text file") from None


def read_lines(path):
    """Lines of a UTF-8 text file (gzip-compressed or plain), without newlines (nor a first line's
    byte-order mark); DataError names the line of any invalid UTF-8, or the file when it is
    missing or a directory."""
    return [text for _, text in numbered_text(path)]


def numbered_text(path):
    """(line number from 1, text) of `read_lines`'s lines, one at a time."""
    for number, raw in _numbered_lines(path):
        yield number, _decoded(path, number, raw)


def _decoded(path, number, raw):
    try:
        return _without_bom(raw.decode("utf-8").rstrip("\r\n"), number)
    except UnicodeDecodeError:
        raise DataError(f"{path}:{number}: not valid UTF-8; fix or remove that line") from None


def stream_pairs(src_path, tgt_path):
    """(line number, source, target) of two parallel files, read together a line at a time
    (memory does not grow with the files); DataError as `read_lines` does, and when one file
    ends before the other (both counts named)."""
    src, tgt = _numbered_lines(src_path), _numbered_lines(tgt_path)
    number = 0
    for number, src_raw in src:
        tgt_line = next(tgt, None)
        if tgt_line is None:
            raise DataError(f"{tgt_path} has {number - 1} lines but {src_path} has more: "
                            f"parallel files must align line by line")
        yield number, _decoded(src_path, number, src_raw), _decoded(tgt_path, number,
                                                                    tgt_line[1])
    rest = sum(1 for _ in tgt)
    if rest:
        raise DataError(f"{src_path} has {number} lines but {tgt_path} has {number + rest}: "
                        f"parallel files must align line by line")


def read_parallel(src_path, tgt_path):
    """Aligned (source, target) line lists; DataError on different lengths, no lines, or an
    empty line."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: parallel "
                        f"files must align line by line")
    if not src:
        raise DataError(f"{src_path} and {tgt_path} have no lines; give non-empty parallel files")
    for path, lines in ((src_path, src), (tgt_path, tgt)):
        for number, line in enumerate(lines, 1):
            if not line.strip():
                raise DataError(f"{path}:{number}: empty line in parallel data; remove the pair")
    return src, tgt


def decode_line(raw, number):
    """bytes -> str without the newline (nor line 1's byte-order mark); invalid UTF-8 is reported
    (with its line number) and becomes an empty line, so every input line still gets exactly one
    output line."""
    try:
        return _without_bom(raw.rstrip(b"\r\n").decode("utf-8"), number)
    except UnicodeDecodeError as err:
        log.warning("line %d: invalid UTF-8 (%s at byte %d); writing an empty line for it",
                    number, err.reason, err.start)
        return ""


def file_chunks(path, chunk_lines=FILE_CHUNK_LINES):
    """The lines of a file (gzip-compressed or plain) in chunks of ``chunk_lines``: [(line number,
    text)], none for an empty file. (A chunk is translated and written before the next is read:
    an interrupted translation keeps the lines it finished.)"""
    chunk = []
    for number, raw in _numbered_lines(path):
        chunk.append((number, decode_line(raw, number)))
        if len(chunk) == chunk_lines:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def stream_chunks(fd, read_size=1 << 16):
    """Complete lines from a file descriptor (standard input), grouped by what arrived
    together. (A line's parts are joined once it ends: a long line costs its length.)"""
    parts, number = [], 0
    while True:
        data = os.read(fd, read_size)
        if not data:
            break
        if number == 0 and not parts:
            _check_start(data, STDIN)
        if b"\n" not in data:
            parts.append(data)
            continue
        *complete, rest = (b"".join(parts) + data).split(b"\n")
        parts = [rest] if rest else []
        chunk = []
        for raw in complete:
            number += 1
            chunk.append((number, decode_line(raw, number)))
        yield chunk
    if parts:
        yield [(number + 1, decode_line(b"".join(parts), number + 1))]
