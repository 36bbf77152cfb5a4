"""BLEU (`mtx.decoding.bleu`) against known values: sacreBLEU's defaults for `sacre_bleu`, and BLEU of
Moses-tokenized lowercased text for `tokenized_lowercased_bleu` (the Multi30k papers' number)."""
import math

import pytest
import sacrebleu

from mtx.decoding.bleu import chrf, sacre_bleu, tokenized_lowercased_bleu

# sacrebleu's README example (its test/test_bleu.py), with the first of its reference streams
HYPOTHESES = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
REFERENCES = ["The dog bit the man.", "It was not unexpected.", "The man bit him first."]


def test_a_perfect_match_is_100_and_no_overlap_or_empty_output_is_0():
    assert sacre_bleu(REFERENCES, REFERENCES)["score"] == 100.0
    assert tokenized_lowercased_bleu(REFERENCES, REFERENCES, "en")["score"] == 100.0
    assert sacre_bleu(["xyz uvw"] * 3, REFERENCES)["score"] == 0.0
    assert sacre_bleu([""] * 3, REFERENCES)["score"] == 0.0  # empty hypotheses still count


def test_sacre_bleu_of_one_sentence_by_hand():
    """"this is a fest" against "this is a test": n-gram precisions 3/4, 2/3, 1/2 and, with no
    4-gram in common, sacreBLEU's exponential smoothing 1/(2 * 1); same length, no brevity
    penalty: BLEU = 100 * (3/4 * 2/3 * 1/2 * 1/2) ** (1/4)."""
    expected = 100 * (3 / 4 * 2 / 3 * 1 / 2 * 1 / 2) ** 0.25
    assert sacre_bleu(["this is a fest"], ["this is a test"])["score"] == round(expected, 2)


def test_sacre_bleu_is_sacrebleus_default_corpus_bleu():
    result = sacre_bleu(HYPOTHESES, REFERENCES)
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score
    assert result["score"] == round(expected, 2) == 45.07
    assert "tok:13a" in result["signature"] and "case:mixed" in result["signature"]


def test_tokenized_lowercased_bleu_scores_moses_tokens_in_lower_case():
    """The same sentences as Moses tokenizes and lowercases them, scored by sacreBLEU without
    its own tokenizer: the value of `tokenized_lowercased_bleu` on the raw text."""
    tokenized_hypotheses = ["the dog bit the man .", "it wasn 't surprising .",
                            "the man had just bitten him ."]
    tokenized_references = ["the dog bit the man .", "it was not unexpected .",
                            "the man bit him first ."]
    expected = sacrebleu.corpus_bleu(tokenized_hypotheses, [tokenized_references],
                                     tokenize="none", lowercase=False).score
    result = tokenized_lowercased_bleu(HYPOTHESES, REFERENCES, "en")
    assert result["score"] == round(expected, 2) == 41.49
    assert result["signature"].endswith("|pre:moses-en+lowercase")


def test_tokenized_lowercased_bleu_ignores_case_and_attached_punctuation():
    assert tokenized_lowercased_bleu(["THE DOG BIT THE MAN."], ["the dog bit the man ."],
                                     "en")["score"] == 100.0
    assert sacre_bleu(["THE DOG BIT THE MAN."], ["the dog bit the man ."])["score"] < 100


@pytest.mark.parametrize("hypotheses", [REFERENCES, HYPOTHESES])
def test_chrf_is_sacrebleus_default_chrf(hypotheses):
    expected = sacrebleu.corpus_chrf(hypotheses, [REFERENCES]).score
    assert math.isclose(chrf(hypotheses, REFERENCES)["score"], round(expected, 2))


# A Chinese caption and a close translation of it: no spaces between words, so 13a sees one
# "word" a sentence and finds no n-gram in common, while sacreBLEU's zh tokenizer splits the
# characters and scores the overlap
CHINESE_REFERENCES = ["一个男人在街上骑自行车。", "两只狗在雪地里玩耍。"]
CHINESE_HYPOTHESES = ["一个男人在路上骑自行车。", "两只狗在雪地里玩。"]


def test_a_target_without_word_spaces_is_scored_with_sacrebleus_tokenizer_for_it():
    by_13a = sacre_bleu(CHINESE_HYPOTHESES, CHINESE_REFERENCES)
    by_zh = sacre_bleu(CHINESE_HYPOTHESES, CHINESE_REFERENCES, "zh")
    expected = sacrebleu.corpus_bleu(CHINESE_HYPOTHESES, [CHINESE_REFERENCES], tokenize="zh")
    assert by_13a["score"] == 0.0 and "tok:13a" in by_13a["signature"]
    assert by_zh["score"] == round(expected.score, 2) > 50 and "tok:zh" in by_zh["signature"]
    assert sacre_bleu(CHINESE_HYPOTHESES, CHINESE_REFERENCES, "zh-Hans") == by_zh  # a region
    thai = sacre_bleu(["แมวนั่งบนเสื่อ"], ["แมวนอนบนเสื่อ"], "th")
    assert "tok:char" in thai["signature"] and 0 < thai["score"] < 100


def test_japanese_and_korean_need_sacrebleus_extras_or_are_scored_by_characters_and_say_so():
    from importlib.util import find_spec
    for lang, tokenizer, module in (("ja", "ja-mecab", "MeCab"), ("ko", "ko-mecab", "mecab_ko")):
        result = sacre_bleu(["ねこがいる"], ["ねこがいた"], lang)
        if find_spec(module) is not None:
            assert f"tok:{tokenizer}" in result["signature"] and "note" not in result
        else:
            assert "tok:char" in result["signature"]
            assert result["note"] == (f"{lang}: sacreBLEU's {tokenizer} tokenizer needs pip install "
                                      f"'sacrebleu[{lang}]'; scored by characters (char) instead")


def test_an_explicit_tokenizer_overrides_the_language_s_and_is_checked_in_one_line():
    from mtx.config import DataConfig
    from mtx.errors import ConfigError
    assert "tok:intl" in sacre_bleu(HYPOTHESES, REFERENCES, "de", "intl")["signature"]
    assert DataConfig(bleu_tokenize="char").bleu_tokenize == "char"
    with pytest.raises(ConfigError, match=r"^data.bleu_tokenize=13b: give one of .*13a.*, or "
                                          r"null \(the one sacreBLEU takes for data.tgt_lang\)$"):
        DataConfig(bleu_tokenize="13b")


@pytest.mark.parametrize("lang, reason", [
    ("zh", "zh is written without spaces between words, which Moses' tokenizer does not split"),
    ("th", "th is written without spaces between words, which Moses' tokenizer does not split"),
    ("tr", "Moses' tokenizer has no rules for tr"),
])
def test_tokenized_lowercased_bleu_is_left_out_where_moses_has_no_rules(lang, reason):
    assert tokenized_lowercased_bleu(HYPOTHESES, REFERENCES, lang) == {"skipped": reason}
    assert "score" in tokenized_lowercased_bleu(HYPOTHESES, REFERENCES, "pt-BR")
