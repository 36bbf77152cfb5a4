"""Reading text to translate: whole files, or stdin as lines arrive (so a terminal or a pipe
gets each translation as soon as its line is complete, and a burst of lines is one batch)."""
import os
import sys


def decode_line(raw, number, warn=sys.stderr):
    """bytes -> str without the newline; invalid UTF-8 is reported (with its line number) and
    becomes an empty line, so every input line still gets exactly one output line."""
    try:
        return raw.rstrip(b"\r\n").decode("utf-8")
    except UnicodeDecodeError as err:
        print(f"warning: line {number}: invalid UTF-8 ({err.reason} at byte {err.start}); "
              f"writing an empty line for it", file=warn)
        return ""


def file_chunks(path):
    """All lines of a file as one chunk: [(line number, text)]."""
    with open(path, "rb") as f:
        yield [(n, decode_line(raw, n)) for n, raw in enumerate(f, 1)]


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
