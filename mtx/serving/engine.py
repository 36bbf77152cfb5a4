"""The server's model calls: a batch of translations, and one sentence's attention. Only the
model thread (`mtx.serving.batcher`) calls `Engine.run_batch` (MXNet is not thread-safe);
`encode` is plain tokenization and runs in any thread.

Shapes: ``gates`` (A, H) as nested tuples, one row per attention layer in
`ModelConfig.attention_layers` order, 1 keeps a head and 0 gates it off (None: all on);
attention weights come back as one (H_a, Tq, Tk) nested list per layer (H_a = the layer's heads).
"""
import dataclasses
import json
from typing import NamedTuple, Optional, Tuple

from mxnet import np

from ..decoding.lines import nbest_texts
from ..decoding.search import Translator, attention_axes, attention_of
from ..data.vocab import EOS

TRANSLATE, ATTENTION = "translate", "attention"
WEIGHT_DECIMALS = 3  # attention weights sent to the page: enough for a heatmap, 3x smaller JSON


def compact_json(value):
    """``value`` as JSON bytes without spaces."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


def attention_json(answer):
    """`Engine.attention`'s dict as compact JSON bytes, its weights written a head at a time
    (float64-rounded, so that 0.123 is sent as 0.123, not as float32's 0.12300000339746475):
    one ``tolist`` or ``json.dumps`` of a whole 8 MB answer holds the interpreter for about a
    third of a second, during which the event loop's thread cannot run; between two heads it
    can. The same bytes as `compact_json` of the dict with its weights as lists."""
    rest = {key: value for key, value in answer.items() if key != "layers"}
    pieces = [compact_json(rest)[:-1], b',"layers":[']  # its keys, then the layers last
    for i, layer in enumerate(answer["layers"]):
        about = compact_json({key: value for key, value in layer.items() if key != "weights"})
        heads = b",".join(compact_json(head.tolist()) for head in layer["weights"])
        pieces.append(b"," * bool(i) + about[:-1] + b',"weights":[' + heads + b"]}")
    pieces.append(b"]}")
    return b"".join(pieces)


class Settings(NamedTuple):
    """What a request may choose; requests with equal settings share a model call."""
    beam_size: int
    length_penalty: float
    nbest: int
    gates: Optional[Tuple[Tuple[float, ...], ...]]  # (A, H); None: every head on


class Engine:
    """A loaded model, its tokenizer and the run's decoding defaults (`DecodeConfig`)."""

    def __init__(self, model, tokenizer, ctx, decode_cfg):
        self.model, self.tokenizer, self.ctx, self.decode_cfg = model, tokenizer, ctx, decode_cfg
        self.max_src_len = model.cfg.max_src_len

    def encode(self, lines):
        """Lines -> lists of source ids (no EOS)."""
        return self.tokenizer.encode_source(lines)

    def run_batch(self, key, payloads):
        """`mtx.serving.batcher` calls this. key = (TRANSLATE, Settings): payloads are lists of
        sentences' ids, each gets its sentences' n-best [(text, score)]; key = (ATTENTION,
        Settings): payloads are one sentence's ids each, each gets `attention`'s dict as
        compact JSON bytes (`attention_json`: in the model thread, not on the event loop)."""
        kind, settings = key
        if kind == TRANSLATE:
            flat = [ids for sentences in payloads for ids in sentences]
            results = iter(nbest_texts(self.tokenizer, self._search(settings, flat)))
            return [[next(results) for _ in sentences] for sentences in payloads]
        return [attention_json(self.attention(settings, ids)) for ids in payloads]

    def attention(self, settings, src_ids):
        """One sentence translated with ``settings``, and every layer's attention over it in a
        teacher-forced pass of that translation: source axis = its pieces + '</s>', target axis
        = '<s>' + the translation's pieces (the position each output token is predicted from).
        Each layer's "weights": a NumPy array (H_a, Tq, Tk), rounded (`attention_json`)."""
        out_ids, score = self._search(settings._replace(nbest=1), [src_ids])[0][0]
        weights = attention_of(self.model, src_ids, out_ids, self.ctx, self._gates(settings))
        layers = []
        for layer, w in zip(self.model.cfg.attention_layers(), weights):  # (H_a, Tq, Tk)
            layers.append({"row": layer.row, "name": layer.name, "kind": layer.kind,
                           "layer": layer.layer, "queries": layer.queries, "keys": layer.keys,
                           "weights": w.astype("float64").round(WEIGHT_DECIMALS)})
        source, target = attention_axes(self.tokenizer, src_ids, out_ids)
        return {"translation": self.tokenizer.decode([out_ids])[0], "score": score,
                "source": source, "target": target, "layers": layers}

    def warm_up(self):
        """Trace the graphs once (the first calls are slow), greedy and with the default beam."""
        ids = [[EOS + 1] * 3]
        for beam in sorted({1, self.decode_cfg.beam_size}):
            self._search(Settings(beam, self.decode_cfg.length_penalty, 1, None), ids)

    def _gates(self, settings):
        if settings.gates is None:
            return None
        return np.array(settings.gates, dtype="float32", ctx=self.ctx)  # (A, H)

    def _search(self, settings, src_ids):
        """Source ids per sentence -> per sentence [(ids, score)], nbest of them."""
        decode_cfg = dataclasses.replace(self.decode_cfg, beam_size=settings.beam_size,
                                         length_penalty=settings.length_penalty,
                                         nbest=settings.nbest)
        return Translator(self.model, self.tokenizer, decode_cfg, self.ctx,
                          self._gates(settings)).translate_ids(src_ids)
