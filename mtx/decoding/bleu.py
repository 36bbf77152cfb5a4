"""Scores with their signatures, fit for the target language: sacreBLEU (detokenized, cased) with
the tokenizer sacreBLEU's command line takes for that language, chrF, and the Multi30k
literature's BLEU on lowercased Moses-tokenized text where Moses has rules for the language.

13a, sacreBLEU's default, splits words at spaces: a target written without spaces between words
would be scored clause by clause (a Chinese sample: 0.0 with 13a, 83.76 with ``zh``). Given the
target language, sacreBLEU's command line (``-l src-tgt``) scores zh with ``zh``, ja with
``ja-mecab`` and ko with ``ko-mecab`` (`sacrebleu.metrics.BLEU`'s own map, followed here); for the
other scripts written without spaces (Thai, Lao, Khmer, Burmese, Tibetan), which it leaves to 13a,
mtx takes its ``char`` tokenizer. ``ja-mecab`` needs MeCab and its dictionary, which mtx installs
(sacreBLEU's ``ja`` extra); ``ko-mecab`` needs ``pip install 'sacrebleu[ko]'`` (mecab-ko builds from
its source, so mtx leaves it out). Without its extra a score is by characters and says so
(``note``). ``data.bleu_tokenize`` overrides the choice; the tokenizer is in every signature.
"""
import functools

from ..data.vocab import base_language
from ..errors import ConfigError

TOKENIZE_BY_LANG = {"zh": "zh", "yue": "zh", "ja": "ja-mecab", "ko": "ko-mecab", "th": "char",
                    "lo": "char", "km": "char", "my": "char", "bo": "char", "dz": "char"}
DEFAULT_TOKENIZE = "13a"
WITHOUT_EXTRAS = "char"  # for ja-mecab and ko-mecab when their extras are not installed
EXTRAS = {"ja-mecab": "sacrebleu[ja]", "ko-mecab": "sacrebleu[ko]"}
# written without spaces between words: Moses' tokenizer does not segment them
NO_WORD_SPACES = frozenset(lang for lang, name in TOKENIZE_BY_LANG.items() if name != "ko-mecab")


@functools.lru_cache(maxsize=16)
def bleu_metric(lang, tokenize=None):
    """(sacreBLEU's BLEU for target language ``lang``, a note or None): ``tokenize`` when given
    (one of sacreBLEU's, as `DataConfig` checks it; ConfigError when it cannot run here), else
    the language's tokenizer (module docstring)."""
    from sacrebleu.metrics import BLEU
    name = tokenize or TOKENIZE_BY_LANG.get(base_language(lang), DEFAULT_TOKENIZE)
    try:
        return BLEU(tokenize=name), None
    except (RuntimeError, ImportError, AssertionError) as err:  # mecab or its dictionary missing
        extra = EXTRAS.get(name, "its extra")
        if tokenize:
            raise ConfigError(f"data.bleu_tokenize={name} cannot run here ({type(err).__name__}): "
                              f"pip install '{extra}'") from None
        note = (f"{lang}: sacreBLEU's {name} tokenizer needs pip install '{extra}'; scored by "
                f"characters ({WITHOUT_EXTRAS}) instead")
        return BLEU(tokenize=WITHOUT_EXTRAS), note


def sacre_bleu(hypotheses, references, lang="", tokenize=None):
    """{'score', 'signature'[, 'note']} of detokenized, cased corpus BLEU with the tokenizer of
    target language ``lang`` (`bleu_metric`)."""
    metric, note = bleu_metric(lang, tokenize)
    result = {"score": round(metric.corpus_score(hypotheses, [references]).score, 2),
              "signature": str(metric.get_signature())}
    return {**result, "note": note} if note else result


def chrf(hypotheses, references):
    from sacrebleu.metrics import CHRF
    metric = CHRF()
    return {"score": round(metric.corpus_score(hypotheses, [references]).score, 2),
            "signature": str(metric.get_signature())}


@functools.lru_cache(maxsize=4)
def _moses(lang):
    from sacremoses import MosesTokenizer
    return MosesTokenizer(lang=lang)


def moses_unavailable(lang):
    """Why tokenized-lowercased BLEU is left out for target language ``lang``, or None when
    Moses has rules for it (a nonbreaking-prefix list) and it is written with spaces."""
    from sacremoses.corpus import NonbreakingPrefixes
    base = base_language(lang)
    if base in NO_WORD_SPACES:
        return (f"{lang} is written without spaces between words, which Moses' tokenizer does "
                f"not split")
    if base not in NonbreakingPrefixes().available_langs:
        return f"Moses' tokenizer has no rules for {lang}"
    return None


def tokenized_lowercased_bleu(hypotheses, references, lang):
    """BLEU on Moses-tokenized lowercased text (sacrebleu tokenize='none'), as Multi30k papers do;
    {'skipped': reason} where Moses has no rules for ``lang`` (`moses_unavailable`)."""
    from sacrebleu.metrics import BLEU
    reason = moses_unavailable(lang)
    if reason:
        return {"skipped": reason}
    tok = _moses(base_language(lang))

    def prep(text):
        return tok.tokenize(text, escape=False, return_str=True).lower()

    metric = BLEU(tokenize="none", force=True)
    score = metric.corpus_score([prep(h) for h in hypotheses], [[prep(r) for r in references]])
    return {"score": round(score.score, 2),
            "signature": f"{metric.get_signature()}|pre:moses-{base_language(lang)}+lowercase"}
