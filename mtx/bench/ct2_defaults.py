"""CTranslate2 called as its users call it: ``ct2-float32-defaults`` of ``mtx-bench decode``.

`mtx.deploy.backend.CTranslate2Translator` keeps mtx's promises (each sentence's own output
limit, so one call per limit; patience 2 and every finished hypothesis, rescored with mtx's
length penalty), which costs CTranslate2 time. This one makes one ``translate_batch`` call over
all the sentences at CTranslate2's defaults (patience 1, one hypothesis, its own length
normalisation), with the settings' beam size, length penalty and batch tokens, and one length
limit: the largest mtx would give any of these sentences.
"""
from ..decoding.search_rules import output_limits
from ..deploy.backend import CTranslate2Translator


class DefaultsTranslator(CTranslate2Translator):
    """`CTranslate2Translator` whose search is one call at CTranslate2's defaults."""

    def search(self, src_ids):
        """Non-empty lists of source ids (no EOS) -> per sentence [(ids, CTranslate2's score)]."""
        cfg = self.cfg
        limit = int(output_limits(max(len(ids) for ids in src_ids) + 1, cfg.max_len_a,
                                  cfg.max_len_b, self.max_src_len))
        results = self.translator.translate_batch(
            [[self.pieces[i] for i in ids] for ids in src_ids], beam_size=cfg.beam_size,
            length_penalty=cfg.length_penalty, max_decoding_length=limit,
            max_batch_size=cfg.batch_tokens, batch_type="tokens", return_scores=True)
        return [[([self.ids[t] for t in result.hypotheses[0]], float(result.scores[0]))]
                for result in results]
