"""Odd input to translation: whatever bytes come in, one line out per line in (property-based);
files read in chunks, gzipped or with a byte-order mark; N rows per line for decode.nbest=N."""
import copy
import dataclasses
import functools
import gzip
import os

import mxnet as mx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from mtx.config import DecodeConfig
from mtx.errors import DataError
from mtx.data.lines import GZIP_MAGIC, UTF16_BOMS, file_chunks, read_lines, stream_chunks
from mtx.model.transformer import Transformer
from mtx.decoding.search import Translator
from mtx.data.vocab import SentencePieceTokenizer, train_sentencepiece
from tests.conftest import model_config


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    texts = [f"ein {w} sitzt auf der Matte {i} und liest" for i, w in
             enumerate(["Hund", "Katze", "Vogel", "Mann", "Frau"] * 40)]
    tokenizer = SentencePieceTokenizer(train_sentencepiece(texts, 80, tmp_path_factory.mktemp("spm")))
    cfg = model_config(ffn_num_hiddens=16, max_len=48, vocab_size=len(tokenizer))
    model = Transformer(cfg)
    model.initialize(mx.init.Xavier())
    model.hybridize(static_alloc=True)
    return Translator(model, tokenizer, DecodeConfig(beam_size=2, max_len_a=0.5, max_len_b=4,
                                                     batch_tokens=256), mx.cpu())


line = st.one_of(
    st.text(max_size=40).map(lambda t: t.replace("\n", " ").replace("\r", " ").encode()),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b" ")),
    st.just(b""),
    st.text(alphabet=st.characters(max_codepoint=31), max_size=10).map(
        lambda t: t.replace("\n", "").replace("\r", "").encode()),
    st.integers(60, 300).map(lambda n: "Hund " .encode() * n))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line, min_size=1, max_size=8))
def test_one_output_line_per_input_line(translator, lines, tmp_path_factory):
    data = b"\n".join(lines) + b"\n"
    assume(not data.startswith(UTF16_BOMS + (GZIP_MAGIC,)))  # refused whole (the test below)
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    chunks = list(stream_chunks(read))
    os.close(read)
    path = tmp_path_factory.mktemp("in") / "in.txt"
    path.write_bytes(data)
    for source in (chunks, list(file_chunks(path))):
        numbers = [n for chunk in source for n, _ in chunk]
        assert numbers == list(range(1, len(lines) + 1))
        outputs = []
        for chunk in source:
            numbers_, texts = zip(*chunk)
            outputs += translator.translate_nbest(list(texts), first_line=numbers_[0])
        assert len(outputs) == len(lines)
        for raw, nbest in zip(lines, outputs):
            assert "\n" not in nbest[0][0]
            if not raw.strip():
                assert nbest[0][0] == ""


@pytest.mark.parametrize("data, expected", [(b"eins\nzwei", ["eins", "zwei"]),
                                            (b"eins\nzwei\n", ["eins", "zwei"]),
                                            (b"eins\n\n", ["eins", ""]),
                                            (b"solo", ["solo"])])
def test_a_last_line_without_a_newline_is_still_a_line(data, expected, tmp_path):
    """Files and streams agree: the text after the last newline is one more line (and a file
    ending in a newline has no extra empty line)."""
    path = tmp_path / "in.txt"
    path.write_bytes(data)
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    streamed = [text for chunk in stream_chunks(read) for _, text in chunk]
    os.close(read)
    from_file = [text for chunk in file_chunks(path) for _, text in chunk]
    assert streamed == from_file == expected


def test_file_chunks_reads_gzip_drops_a_first_line_byte_order_mark_and_numbers_on(tmp_path):
    text = "\ufeffeins\nzwei\n\ufeffdrei\nvier\nfünf\n".encode()
    (tmp_path / "in.txt").write_bytes(text)
    with gzip.open(tmp_path / "in.txt.gz", "wb") as f:
        f.write(text)
    expected = [[(1, "eins"), (2, "zwei")], [(3, "\ufeffdrei"), (4, "vier")], [(5, "fünf")]]
    for name in ("in.txt", "in.txt.gz"):
        assert list(file_chunks(tmp_path / name, chunk_lines=2)) == expected
        assert read_lines(tmp_path / name) == ["eins", "zwei", "\ufeffdrei", "vier", "fünf"]
    read, write = os.pipe()
    os.write(write, text)
    os.close(write)
    assert [line for chunk in stream_chunks(read) for line in chunk] == sum(expected, [])
    os.close(read)
    (tmp_path / "empty.txt").write_bytes(b"")
    assert list(file_chunks(tmp_path / "empty.txt")) == []
    (tmp_path / "bad.gz").write_bytes(gzip.compress(text)[:12])  # cut short
    with pytest.raises(DataError, match="bad.gz is a damaged gzip file .*; re-download or "
                                        "re-compress it"):
        list(file_chunks(tmp_path / "bad.gz"))


def _stream(data, read_size=1 << 16):
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    try:
        return [line for chunk in stream_chunks(read, read_size) for line in chunk]
    finally:
        os.close(read)


def test_text_is_read_by_its_bytes_not_its_name(tmp_path):
    """Compressed or not is what the first bytes say (a .gz name is not needed, nor enough);
    UTF-16 text, and compressed standard input, are one clear error, not lines of warnings."""
    text = "eins\nzwei\n"
    (tmp_path / "packed.txt").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "plain.gz").write_text(text)
    for name in ("packed.txt", "plain.gz"):
        assert read_lines(tmp_path / name) == ["eins", "zwei"]
        assert list(file_chunks(tmp_path / name)) == [[(1, "eins"), (2, "zwei")]]
    (tmp_path / "utf16.txt").write_bytes(text.encode("utf-16"))
    for read in (read_lines, lambda path: list(file_chunks(path))):
        with pytest.raises(DataError, match="utf16.txt is UTF-16 text; convert it to UTF-8"):
            read(tmp_path / "utf16.txt")
    with pytest.raises(DataError, match="standard input is UTF-16 text; convert it to UTF-8"):
        _stream(text.encode("utf-16"))
    with pytest.raises(DataError, match="standard input is gzip-compressed; pipe it through "
                                        "zcat"):
        _stream(gzip.compress(text.encode()))


def test_a_line_arriving_in_many_reads_is_one_line():
    assert _stream(b"abcdefghij\nkl\nmnopq", read_size=3) == [(1, "abcdefghij"), (2, "kl"),
                                                                (3, "mnopq")]
    assert _stream(b"x" * 100 + b"\n\n", read_size=7) == [(1, "x" * 100), (2, "")]


def test_an_interrupted_file_translation_keeps_the_chunks_it_finished(tmp_path, monkeypatch):
    """Each chunk of a file is translated and written before the next is read: Ctrl-C in the
    third chunk leaves the first two chunks' translations in output=."""
    from omegaconf import OmegaConf
    from mtx.commands import translate as command

    class Upper:
        def translate_nbest(self, lines, first_line):
            if first_line > 4:
                raise KeyboardInterrupt
            return [[(line.upper(), 0.0)] for line in lines]

    (tmp_path / "in.txt").write_text("".join(f"line {i}\n" for i in range(1, 8)))
    monkeypatch.setattr(command, "make_translator", lambda cfg: (Upper(), DecodeConfig()))
    monkeypatch.setattr(command, "file_chunks", functools.partial(file_chunks, chunk_lines=2))
    cfg = OmegaConf.create({"input": str(tmp_path / "in.txt"), "output": str(tmp_path / "out.txt"),
                            "attention_png": None, "ckpt": "run"})
    with pytest.raises(KeyboardInterrupt):
        command.translate(cfg)
    assert (tmp_path / "out.txt").read_text() == "LINE 1\nLINE 2\nLINE 3\nLINE 4\n"


def test_an_empty_line_gets_nbest_empty_rows(translator):
    nbest = copy.copy(translator)
    nbest.cfg = dataclasses.replace(translator.cfg, nbest=2)
    rows = nbest.translate_nbest(["", "ein Hund sitzt", ""])
    assert [len(r) for r in rows] == [2, 2, 2]
    assert rows[0] == rows[2] == [("", 0.0), ("", 0.0)]
