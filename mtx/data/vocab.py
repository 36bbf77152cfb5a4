"""Tokenizers and the special-token ids every part of mtx agrees on."""
import hashlib
import io
from pathlib import Path

from ..errors import ConfigError, TokenizerError
from ..files import atomic_write_bytes

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")




def output_subwords(tokenizer, lines):
    """The subwords of ``lines`` plus one EOS each: the decoding steps that wrote them (a model
    that writes longer translations does more steps)."""
    return sum(len(ids) + 1 for ids in tokenizer.encode(lines))


NORMALISATION_PROBE = "ＡＢＣ ﬁ Ａ  b\u00a0c Ä A\u0308 ½"  # full-width, a ligature, spaces, composed or not


class SentencePieceTokenizer:
    """Text <-> subword ids with one SentencePiece model, joint or a side's (`mtx.data.
    vocabularies`) (ids: pad 0, unk 1, bos 2, eos 3).
    `encode_source` is `encode` of source text, lowercased first when the run was trained so
    (``lowercase_source``, `mtx.config.DataConfig`), refusing a source that starts with a tag
    (<name>) other than the run's ``tags`` when it has any. ``source`` and ``target``: the
    tokenizer of each side (itself; a separate vocabulary's differ, `mtx.data.vocabularies`)."""

    def __init__(self, model_path, lowercase_source=False, tags=()):
        import sentencepiece as spm
        self.model_path, self.lowercase_source = str(model_path), lowercase_source
        self.tags = tuple(tags)
        try:
            self._sp = spm.SentencePieceProcessor(model_file=self.model_path)
        except (OSError, RuntimeError) as err:
            raise TokenizerError(f"{model_path}: not a readable SentencePiece model ({err}); "
                                 f"delete it to retrain, or point at the run's spm.model") from None
        if self._sp.pad_id() != PAD or self._sp.eos_id() != EOS:
            raise TokenizerError(f"{model_path}: special ids differ from mtx's (pad 0, eos 3)")

    def __len__(self):
        return self._sp.get_piece_size()

    def encode(self, lines):
        return self._sp.encode(list(lines))

    @property
    def source(self):
        return self

    @property
    def target(self):
        return self

    def has_piece(self, piece):
        return self._sp.piece_to_id(piece) != UNK

    def encode_source(self, lines):
        check_tags(lines, self.tags)
        return self.encode([line.lower() for line in lines] if self.lowercase_source else lines)

    def encode_sampled(self, lines, dropout, seed):
        """``lines`` segmented with BPE-dropout (Provilkov et al. 2020): each merge is skipped
        with probability ``dropout``; the same ``seed`` gives the same ids (one thread, seeded
        generator)."""
        import sentencepiece as spm
        spm.set_random_generator_seed(seed % 2 ** 31)
        return self._sp.encode(list(lines), enable_sampling=True, alpha=dropout, nbest_size=-1,
                               num_threads=1)

    def decode(self, ids_list):
        return [self._sp.decode(list(ids)) for ids in ids_list]

    def pieces(self, ids):
        return [self._sp.id_to_piece(int(i)) for i in ids]

    def definition(self):
        """What this tokenizer does to text, without where its model was trained (a model
        SentencePiece learnt from a file also records that file's path): every piece with its score and
        kind, the ids of a text that normalisation changes, and the source lowercasing."""
        sp = self._sp
        pieces = [(sp.id_to_piece(i), round(sp.get_score(i), 6), sp.is_control(i),
                   sp.is_unknown(i), sp.is_unused(i)) for i in range(len(self))]
        return {"pieces": pieces, "normalised": sp.encode(NORMALISATION_PROBE),
                "lowercase_source": self.lowercase_source}


def check_tags(lines, tags):
    """TokenizerError (one line) for a line that starts with a tag (<name>) not in ``tags``,
    the tags a run was trained with (none: nothing is checked)."""
    if not tags:
        return
    from ..config.data import TAG
    for line in lines:
        first = line.split(maxsplit=1)[:1]
        if first and TAG.fullmatch(first[0]) and first[0] not in tags:
            raise TokenizerError(f"a source starts with the tag {first[0]}, which the model never "
                                 f"saw in training (its tags: {', '.join(tags)}); use one of "
                                 f"them or none")


def base_language(lang):
    """The language of a code as SentencePiece's advice, sacreBLEU and Moses know it:
    ``zh-Hans`` -> ``zh``, ``pt_BR`` -> ``pt``, lowercased; '' for None."""
    return (lang or "").replace("_", "-").split("-")[0].lower()


# SentencePiece's training options that mtx sets (`vocabulary_options`), at their defaults
DEFAULT_OPTIONS = {"byte_fallback": False, "character_coverage": 1.0, "user_defined_symbols": []}
# languages of many characters: SentencePiece recommends covering 99.95% of them, not all
MANY_CHARACTERS = ("zh", "ja", "ko", "yue")


def vocabulary_options(cfg, langs=None, with_tags=True):
    """SentencePiece's options from a `DataConfig`: byte fallback and the character coverage
    (null: on and 0.9995 where a language of ``langs``, default both sides', has many
    characters, as SentencePiece recommends for them; else off and 1) and user symbols (the
    corpora's tags among them ``with_tags``)."""
    langs = {base_language(lang) for lang in (langs or (cfg.src_lang, cfg.tgt_lang))}
    many = bool(langs & set(MANY_CHARACTERS))
    coverage = (0.9995 if many else 1.0) if cfg.character_coverage is None else \
        cfg.character_coverage
    fallback = many if cfg.byte_fallback is None else cfg.byte_fallback
    tags = [tag for tag in cfg.train_tags if with_tags and tag and tag not in cfg.user_symbols]
    return {"byte_fallback": fallback, "character_coverage": coverage,
            "user_defined_symbols": list(cfg.user_symbols) + tags}


def train_sentencepiece(texts, vocab_size, cache_dir, options=None):
    """Train (or reuse) a joint BPE model on ``texts`` with SentencePiece's ``options``
    (`vocabulary_options`; None: `DEFAULT_OPTIONS`); cached by content hash, size and the
    options that differ from the defaults. SentencePiece reads the lines from memory and writes
    the model to memory, so the model records no file path: the same lines and settings give
    the same bytes in any folder and process.

    Returns the path of the ``.model`` file; it is written atomically."""
    import sentencepiece as spm
    options = {**DEFAULT_OPTIONS, **(options or {})}
    digest = hashlib.sha256()
    for line in texts:
        digest.update(line.encode("utf-8") + b"\n")
    changed = {k: v for k, v in options.items() if v != DEFAULT_OPTIONS[k]}
    suffix = "-" + hashlib.sha256(repr(sorted(changed.items())).encode()).hexdigest()[:8] \
        if changed else ""
    key = f"spm{vocab_size}-{digest.hexdigest()[:16]}{suffix}"
    cache_dir = Path(cache_dir)
    model = cache_dir / f"{key}.model"
    if model.exists():
        return model
    cache_dir.mkdir(parents=True, exist_ok=True)
    written = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts), model_writer=written, vocab_size=vocab_size,
            model_type="bpe", pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS, num_threads=2,
            input_sentence_size=0, minloglevel=2, **options)
    except RuntimeError as err:  # e.g. fewer pieces than the corpus has characters, or more
        # than its words can make
        raise ConfigError(f"data.vocab_size={vocab_size}: SentencePiece cannot build it "
                          f"({str(err).strip().splitlines()[-1]}); choose another size") from None
    return atomic_write_bytes(model, written.getvalue())


class WordTokenizer:
    """Whitespace tokens over a fixed symbol list (the toy task): ids 4.. are the symbols."""

    def __init__(self, symbols):
        self.symbols = list(SPECIALS) + list(symbols)
        self._ids = {s: i for i, s in enumerate(self.symbols)}

    def __len__(self):
        return len(self.symbols)

    def encode(self, lines):
        return [[self._ids.get(w, UNK) for w in line.split()] for line in lines]

    def encode_source(self, lines):
        return self.encode(lines)

    source = target = property(lambda self: self)

    def has_piece(self, piece):
        return piece in self._ids

    def decode(self, ids_list):
        return [" ".join(self.symbols[i] for i in ids if i > EOS) for ids in ids_list]

    def pieces(self, ids):
        return [self.symbols[int(i)] for i in ids]
