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
