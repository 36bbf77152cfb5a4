"""The line-in, line-out frame every translator shares (`LineTranslator`: mtx's `Translator`,
the ensemble's and CTranslate2's), and hypotheses turned into text (`nbest_texts`)."""
import logging

log = logging.getLogger(__name__)


class LineTranslator:
    """Lines of text -> lines of text around a subclass's `search` (non-empty source id lists
    -> per sentence [(ids, score)], nbest of them, best first): tokenize, cut lines longer than
    the model's positions, give empty lines empty translations, detokenize. Needs
    ``tokenizer``, ``max_src_len`` and ``cfg`` (a `DecodeConfig`)."""

    def translate_ids(self, src_ids):
        """Lists of source ids (no EOS) -> per sentence [(ids, score)], nbest of them; an empty
        source gets nbest empty hypotheses without a search."""
        results = [[([], 0.0)] * self.cfg.nbest for _ in src_ids]
        todo = [i for i, ids in enumerate(src_ids) if ids]
        for i, hyps in zip(todo, self.search([src_ids[i] for i in todo])):
            results[i] = hyps
        return results

    def translate(self, lines):
        """Lines -> best translation of each (str)."""
        return [nbest[0][0] for nbest in self.translate_nbest(lines)]

    def translate_nbest(self, lines, first_line=1):
        """Lines -> per line [(text, score)], nbest of them, best first, in input order. Lines
        longer than the model's positions are cut, with a warning naming the line (counted from
        first_line)."""
        src_ids = self.tokenizer.encode_source(lines)
        for number, ids in enumerate(src_ids, first_line):
            if len(ids) > self.max_src_len:
                log.warning("line %d has %d subwords; translating the first %d", number,
                            len(ids), self.max_src_len)
                del ids[self.max_src_len:]
        return nbest_texts(self.tokenizer, self.translate_ids(src_ids))


def nbest_texts(tokenizer, results):
    """Per sentence [(ids, score)] -> per sentence [(text, score)]."""
    out = []
    for nbest in results:
        texts = tokenizer.decode([ids for ids, _ in nbest])
        out.append([(text, score) for text, (_, score) in zip(texts, nbest)])
    return out
