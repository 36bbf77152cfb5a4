"""Translate a split and score it: sacreBLEU, chrF and tokenized-lowercased BLEU, each as fits
the target language (`mtx.decoding.bleu`)."""
import logging
import time

from .bleu import chrf, sacre_bleu, tokenized_lowercased_bleu
from ..data.vocab import output_subwords

log = logging.getLogger(__name__)

# Sentences translated once, untimed, before a timed translation: the first shapes build graphs.
WARMUP_SENTENCES = 32


def score_translations(hypotheses, references, tgt_lang, tokenize=None):
    """{metric: {score, signature}} of ``hypotheses`` in target language ``tgt_lang``
    (``tokenize``: sacreBLEU's tokenizer, or None: the language's); bleu_tok_lc is {skipped:
    reason} where Moses has no rules for the language."""
    exact = sum(h == r for h, r in zip(hypotheses, references))
    return {"sacrebleu": sacre_bleu(hypotheses, references, tgt_lang, tokenize),
            "chrf": chrf(hypotheses, references),
            "bleu_tok_lc": tokenized_lowercased_bleu(hypotheses, references, tgt_lang),
            "exact_match": round(100.0 * exact / max(len(references), 1), 2)}


def score_line(split, metric, result):
    """One line of a split's ``metric`` for the log or stdout: its score and signature (and note),
    or why it was left out."""
    if "skipped" in result:
        return f"{split} {metric} left out: {result['skipped']}"
    note = f"  ({result['note']})" if "note" in result else ""
    return f"{split} {metric} = {result['score']:.2f}  {result['signature']}{note}"


def translate_and_score(model, tokenizer, decode_cfg, ctx, sources, references, tgt_lang,
                        tokenize=None):
    """-> (hypotheses, scores); scores carry the decoding settings and the time it took."""
    from .search import Translator  # (MXNet's: imported here, so the module's import needs none)
    return timed_translation(Translator(model, tokenizer, decode_cfg, ctx), sources, references,
                             tgt_lang, tokenize)


def timed_translation(translator, sources, references, tgt_lang, tokenize=None):
    """``translator`` (a `LineTranslator`: mtx's `Translator` or CTranslate2's) translating
    ``sources`` -> (hypotheses, scores with the decoding settings, seconds and sentences/s)."""
    tic = time.perf_counter()
    hypotheses = translator.translate(sources)
    seconds = time.perf_counter() - tic
    scores = score_translations(hypotheses, references, tgt_lang, tokenize)
    scores.update(beam_size=translator.cfg.beam_size, length_penalty=translator.cfg.length_penalty,
                  decode_seconds=round(seconds, 2),
                  sentences_per_second=round(len(sources) / max(seconds, 1e-9), 1))
    return hypotheses, scores


def translation_rounds(models, tokenizers, decode_cfg, ctx, sources, references, tgt_lang, rounds,
                       warmup_sentences=WARMUP_SENTENCES):
    """`translator_rounds` of mtx ``models`` ({label: model}, each with ``tokenizers[label]``)."""
    from .search import Translator
    return translator_rounds({label: Translator(model, tokenizers[label], decode_cfg, ctx)
                              for label, model in models.items()}, sources, references, tgt_lang,
                             rounds, warmup_sentences)


def translator_rounds(translators, sources, references, tgt_lang, rounds,
                      warmup_sentences=WARMUP_SENTENCES):
    """Time ``translators`` ({label: `LineTranslator`}) translating ``sources`` in turn, ``rounds``
    times over (label by label, so a drift of the machine's speed reaches all alike), each first
    translating its first ``warmup_sentences`` untimed (the first shapes build graphs). ->
    {label: {"seconds": [one per round], "best": the fastest, "sacrebleu": {score, signature},
    "subwords": the output subwords, EOS included (longer translations take more steps)}}."""
    for translator in translators.values():
        translator.translate(sources[:warmup_sentences])
    timings = {label: {"seconds": []} for label in translators}
    for _ in range(rounds):
        for label, translator in translators.items():
            hyps, scores = timed_translation(translator, sources, references, tgt_lang)
            timings[label]["seconds"].append(scores["decode_seconds"])
            timings[label]["sacrebleu"] = scores["sacrebleu"]
            timings[label]["subwords"] = output_subwords(translator.tokenizer, hyps)
            log.info("%s: %.2f s, sacreBLEU %.2f", label, scores["decode_seconds"],
                     scores["sacrebleu"]["score"])
    for timing in timings.values():
        timing["best"] = min(timing["seconds"])
    return timings
