"""A request as the model's work: its parts, what it is charged, and its answer's JSON."""
from ..decoding.search_rules import output_limits
from .limits import check_attention, check_work


WEIGHT_BYTES = 6  # one weight in /attention's JSON at most: "0.123,"


def attention_bytes(engine, src_len):
    """An upper bound of /attention's answer for ``src_len`` subwords: every layer's (H, Tq, Tk)
    weights at the longest output the decode settings allow."""
    cfg, decode = engine.model.cfg, engine.decode_cfg
    source = src_len + 1
    target = int(output_limits(source, decode.max_len_a, decode.max_len_b, cfg.max_src_len)) + 1
    sizes = {"source": source, "target": target}
    weights = sum(cfg.heads_of(layer.row) * sizes[layer.queries] * sizes[layer.keys]
                  for layer in cfg.attention_layers())
    return weights * WEIGHT_BYTES


def attention_work(engine, ids, beam_size, limits):
    """The work an /attention sentence (its source ids) is charged in the queue: its decoding
    plus a kilobyte of answer as one subword x beam; checked against ``limits``."""
    answer_bytes = attention_bytes(engine, len(ids))
    check_attention(len(ids), answer_bytes, limits)
    return check_work([ids], beam_size, limits) + answer_bytes // 1024


def translations(nbest, n):
    """POST /translate's answer from each sentence's n-best [(text, score)], best first:
    ``{"translations", "scores"}`` of the best, and with ``n`` > 1 ``"nbest"`` too."""
    out = {"translations": [hyps[0][0] for hyps in nbest],
           "scores": [round(hyps[0][1], 4) for hyps in nbest]}
    if n > 1:
        out["nbest"] = [[{"text": text, "score": round(score, 4)} for text, score in hyps]
                        for hyps in nbest]
    return out


def split_work(ids, beam_size, part_tokens):
    """Sentences (source ids) -> parts [(sentences, work)] of about ``part_tokens`` work each
    (a sentence is never split), in order."""
    parts, current, work = [], [], 0
    for sentence in ids:
        cost = (len(sentence) + 1) * beam_size
        if current and work + cost > part_tokens:
            parts.append((current, work))
            current, work = [], 0
        current.append(sentence)
        work += cost
    return parts + [(current, work)]
