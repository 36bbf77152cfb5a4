"""What every toolkit of the quality bench trains and translates: mtx's corpus of a data config
(its kept training pairs, validation split and first test set) cut by mtx's joint SentencePiece
model, written as files of space-separated pieces, with the vocabulary in mtx's id order."""
import json
from dataclasses import dataclass
from pathlib import Path
from typing import List

from ..files import atomic_write_json

READY = "inputs.json"   # written last: the folder is complete


@dataclass
class SharedInputs:
    """``folder`` holds train.src/.tgt, valid.src/.tgt and test.src (pieces, one sentence a line),
    test.txt (the test sources as text, for mtx), vocab.txt (one piece a line, id order: pad,
    unk, bos, eos first); ``references`` are the test targets as text."""
    folder: Path
    test_name: str
    src_lang: str
    tgt_lang: str
    references: List[str]
    tokenizer_path: str

    def path(self, name):
        return self.folder / name

    def training_pairs(self):
        with open(self.path("train.src"), "rb") as lines:
            return sum(1 for _ in lines)

    def vocabulary(self):
        """The pieces in id order."""
        return self.path("vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]

    def text(self, pieces_file):
        """The sentences of a file of space-separated pieces, decoded by the SentencePiece model
        (a piece the vocabulary lacks becomes unk)."""
        from ..data.vocab import SentencePieceTokenizer
        ids = {piece: i for i, piece in enumerate(self.vocabulary())}
        unk = ids["<unk>"]
        lines = Path(pieces_file).read_text(encoding="utf-8").split("\n")[:len(self.references)]
        return SentencePieceTokenizer(self.tokenizer_path).decode(
            [[ids.get(piece, unk) for piece in line.split()] for line in lines])


def shared_inputs(data_cfg, folder, seed):
    """The files of data config ``data_cfg`` in ``folder`` (written once; a folder already
    complete is read back)."""
    folder = Path(folder)
    if (folder / READY).is_file():
        return SharedInputs(folder=folder, **json.loads((folder / READY).read_text()))
    from ..data.corpus import load_corpus
    from ..datadir import data_dir
    corpus = load_corpus(data_cfg, data_dir(), seed=seed)
    tokenizer = corpus.tokenizer
    if not hasattr(tokenizer, "model_path"):
        raise ValueError(f"data={data_cfg.name}: the quality bench needs a SentencePiece corpus")
    folder.mkdir(parents=True, exist_ok=True)
    pieces = [tokenizer.pieces([i])[0] for i in range(len(tokenizer))]
    _write(folder / "vocab.txt", pieces)
    training = corpus.training
    for side, ids in (("src", training.src), ("tgt", training.tgt)):
        _write(folder / f"train.{side}", (" ".join(pieces[i] for i in ids[row])
                                          for row in range(len(training))))
    for side, ids in zip(("src", "tgt"), corpus.ids["val"]):
        _write(folder / f"valid.{side}", (" ".join(pieces[i] for i in line) for line in ids))
    test_name = corpus.test_names[0]
    sources, references = corpus.text[test_name]
    _write(folder / "test.txt", sources)
    _write(folder / "test.src", (" ".join(pieces[i] for i in line)
                                 for line in tokenizer.encode_source(sources)))
    (folder / "spm.model").write_bytes(Path(tokenizer.model_path).read_bytes())
    values = dict(test_name=test_name, src_lang=data_cfg.src_lang, tgt_lang=data_cfg.tgt_lang,
                  references=list(references), tokenizer_path=str(folder / "spm.model"))
    atomic_write_json(folder / READY, values)
    return SharedInputs(folder=folder, **values)


def _write(path, lines):
    with open(path, "w", encoding="utf-8") as out:
        for line in lines:
            out.write(f"{line}\n")
