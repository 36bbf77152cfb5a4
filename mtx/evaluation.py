"""Translate a split and score it: sacreBLEU, chrF and tokenized-lowercased BLEU."""
import time

from .bleu import chrf, sacre_bleu, tokenized_lowercased_bleu
from .search import Translator


def score_translations(hypotheses, references, tgt_lang):
    exact = sum(h == r for h, r in zip(hypotheses, references))
    return {"sacrebleu": sacre_bleu(hypotheses, references),
            "chrf": chrf(hypotheses, references),
            "bleu_tok_lc": tokenized_lowercased_bleu(hypotheses, references, tgt_lang),
            "exact_match": round(100.0 * exact / max(len(references), 1), 2)}


def translate_and_score(model, tokenizer, decode_cfg, ctx, sources, references, tgt_lang):
    """-> (hypotheses, scores); scores carry the decoding settings and the time it took."""
    tic = time.time()
    hypotheses = Translator(model, tokenizer, decode_cfg, ctx).translate(sources)
    seconds = time.time() - tic
    scores = score_translations(hypotheses, references, tgt_lang)
    scores.update(beam_size=decode_cfg.beam_size, length_penalty=decode_cfg.length_penalty,
                  decode_seconds=round(seconds, 2),
                  sentences_per_second=round(len(sources) / max(seconds, 1e-9), 1))
    return hypotheses, scores
