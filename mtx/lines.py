"""Reading text: parallel training/test files (strict: every line must be valid), and text to
translate, from files a chunk at a time or from stdin as lines arrive (so a terminal or a pipe
gets each translation as soon as its line is complete, and a burst of lines is one batch); and
the line-in, line-out frame every translator shares (`LineTranslator`)."""
import gzip
import os
import sys

from .errors import DataError

BOM = "\ufeff"           # a byte-order mark some editors put before a file's first line
FILE_CHUNK_LINES = 1000  # lines of a file read (and translated, and written) together


def _open(path):
    """A text file (``.gz`` or plain) opened for reading bytes."""
    return (gzip.open if str(path).endswith(".gz") else open)(path, "rb")


def _without_bom(text, number):
    return text[1:] if number == 1 and text.startswith(BOM) else text


def read_lines(path):
    """Lines of a UTF-8 text file (``.gz`` or plain), without newlines (nor a first line's
    byte-order mark); DataError names the line of any invalid UTF-8, or the file when it is
    missing or a directory."""
    lines = []
    try:
        with _open(path) as f:
            for number, raw in enumerate(f, 1):
                try:
                    lines.append(_without_bom(raw.decode("utf-8").rstrip("\r\n"), number))
                except UnicodeDecodeError:
                    raise DataError(f"{path}:{number}: not valid UTF-8; fix or remove that "
                                    f"line") from None
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read {path} ({getattr(err, 'strerror', None) or err}); "
                        f"give an existing, readable text file") from None
    return lines


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


def decode_line(raw, number, warn=sys.stderr):
    """bytes -> str without the newline (nor line 1's byte-order mark); invalid UTF-8 is reported
    (with its line number) and becomes an empty line, so every input line still gets exactly one
    output line."""
    try:
        return _without_bom(raw.rstrip(b"\r\n").decode("utf-8"), number)
    except UnicodeDecodeError as err:
        print(f"warning: line {number}: invalid UTF-8 ({err.reason} at byte {err.start}); "
              f"writing an empty line for it", file=warn)
        return ""


def file_chunks(path, chunk_lines=FILE_CHUNK_LINES):
    """The lines of a file (``.gz`` or plain) in chunks of ``chunk_lines``: [(line number,
    text)], none for an empty file. (A chunk is translated and written before the next is read:
    an interrupted translation keeps the lines it finished.)"""
    chunk = []
    try:
        with _open(path) as f:
            for number, raw in enumerate(f, 1):
                chunk.append((number, decode_line(raw, number)))
                if len(chunk) == chunk_lines:
                    yield chunk
                    chunk = []
    except (OSError, EOFError) as err:
        raise DataError(f"cannot read {path} ({getattr(err, 'strerror', None) or err}); "
                        f"give an existing, readable text file") from None
    if chunk:
        yield chunk


def stream_chunks(fd, read_size=1 << 16):
    """Complete lines from a file descriptor, grouped by what arrived together."""
    pending, number = b"", 0
    while True:
        data = os.read(fd, read_size)
        if not data:
            break
        pending += data
        *complete, pending = pending.split(b"\n")
        if complete:
            chunk = []
            for raw in complete:
                number += 1
                chunk.append((number, decode_line(raw, number)))
            yield chunk
    if pending:
        yield [(number + 1, decode_line(pending, number + 1))]


class LineTranslator:
    """Lines of text -> lines of text around a subclass's `translate_ids` (source ids -> per
    sentence [(ids, score)], best first): tokenize, cut lines longer than the model's positions,
    detokenize. Needs ``tokenizer`` and ``max_src_len``."""

    def translate(self, lines):
        """Lines -> best translation of each (str)."""
        return [nbest[0][0] for nbest in self.translate_nbest(lines)]

    def translate_nbest(self, lines, first_line=1):
        """Lines -> per line [(text, score)], nbest of them, best first, in input order. Lines
        longer than the model's positions are cut, with a warning naming the line (counted from
        first_line)."""
        src_ids = self.tokenizer.encode(lines)
        for number, ids in enumerate(src_ids, first_line):
            if len(ids) > self.max_src_len:
                print(f"warning: line {number} has {len(ids)} subwords; translating the first "
                      f"{self.max_src_len}", file=sys.stderr)
                del ids[self.max_src_len:]
        out = []
        for nbest in self.translate_ids(src_ids):
            texts = self.tokenizer.decode([ids for ids, _ in nbest])
            out.append([(text, score) for text, (_, score) in zip(texts, nbest)])
        return out
