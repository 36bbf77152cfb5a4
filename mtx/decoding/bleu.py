"""Scores with their signatures: sacreBLEU (detokenized, cased), chrF, and the Multi30k
literature's BLEU on lowercased Moses-tokenized text."""
import functools


def sacre_bleu(hypotheses, references):
    """{'score', 'signature'} of detokenized, cased corpus BLEU (sacrebleu defaults)."""
    from sacrebleu.metrics import BLEU
    metric = BLEU()
    return {"score": round(metric.corpus_score(hypotheses, [references]).score, 2),
            "signature": str(metric.get_signature())}


def chrf(hypotheses, references):
    from sacrebleu.metrics import CHRF
    metric = CHRF()
    return {"score": round(metric.corpus_score(hypotheses, [references]).score, 2),
            "signature": str(metric.get_signature())}


@functools.lru_cache(maxsize=4)
def _moses(lang):
    from sacremoses import MosesTokenizer
    return MosesTokenizer(lang=lang)


def tokenized_lowercased_bleu(hypotheses, references, lang):
    """BLEU on Moses-tokenized lowercased text (sacrebleu tokenize='none'), as Multi30k papers do."""
    from sacrebleu.metrics import BLEU
    tok = _moses(lang)

    def prep(text):
        return tok.tokenize(text, escape=False, return_str=True).lower()

    metric = BLEU(tokenize="none", force=True)
    score = metric.corpus_score([prep(h) for h in hypotheses], [[prep(r) for r in references]])
    return {"score": round(score.score, 2),
            "signature": f"{metric.get_signature()}|pre:moses-{lang}+lowercase"}
