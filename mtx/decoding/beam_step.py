"""One step of the beam search (`mtx.decoding.search.beam_search`): from every hypothesis's
best next tokens to each sentence's K best extensions (`BeamStep`). A model runs it at the end
of its own decoding step (`mtx.model.incremental.extend`: one traced graph per step); an
ensemble calls it hybridized on its own (some forty small operators a step, which op by op
would cost more in dispatch than in arithmetic).
"""
from mxnet.gluon.block import HybridBlock
from mxnet.util import use_np

from ..data.vocab import EOS
from .search_rules import gnmt_penalty

NEG_INF = -1e30


@use_np
class BeamStep(HybridBlock):
    """forward(top_lp (R, C), top_ids (R, C), raw (R,), length (R,), finished (R,),
    limit (R, 1), alpha (1,), position (1,) int32) for R = sentences * K hypotheses, each with
    its C = min(K, V) most probable next tokens (ids float32, best first), its sum of
    log-probabilities ``raw``, length (EOS included), ``finished`` (1.0 once ended) and output
    ``limit``, at step ``position`` -> each sentence's K best extensions: (tokens (R,) int32,
    raw (R,), length (R,), finished (R,), origin (R,) int32: the row of the step before that
    each extends). ``alpha`` is an input, so one graph serves every length penalty.

    The length penalty is the same for every token of a hypothesis, so a sentence's K best
    candidates are among its hypotheses' C best tokens; an ended hypothesis offers only EOS, at
    no cost and no added length. The K*C candidates of a sentence are ranked by the
    GNMT-normalised score with ``alpha``."""

    def __init__(self, beam_size, candidates, **kwargs):
        super().__init__(**kwargs)
        self.K, self.C = beam_size, candidates

    def hybrid_forward(self, F, top_lp, top_ids, raw, length, finished, limit, alpha, position):
        K, C = self.K, self.C
        at_limit = limit <= position.astype("float32")  # (R, 1)
        stopped = (F.np.expand_dims(finished, 1) + at_limit.astype("float32")) > 0  # (R, 1)
        stop = stopped.astype("float32")
        later = (F.npx.arange_like(top_lp, axis=1) > 0).astype("float32")  # (C,): 0, 1, 1, ...
        eos_only = F.np.expand_dims(later * NEG_INF, 0)  # (1, C): EOS free, the rest impossible
        top_lp = F.np.where(stopped, eos_only, top_lp)
        top_ids = top_ids * (1 - stop) + EOS * stop
        cand_raw = F.np.expand_dims(raw, 1) + top_lp  # (R, C)
        new_len = F.np.expand_dims(length, 1) + 1 - stop  # (R, 1)
        cand = F.npx.reshape(cand_raw / gnmt_penalty(new_len, alpha), (-1, K * C))
        best = F.npx.topk(cand, k=K, axis=-1, ret_typ="indices", dtype="float32")  # (R/K, K)
        beam = F.np.floor(best / C)  # which of the sentence's beams each winner extends
        offsets = F.np.expand_dims(F.npx.arange_like(best, axis=0), 1) * K  # (R/K, 1)
        origin = (beam + offsets).reshape(-1)  # (R,) rows of the step before
        picked = origin * C + (best - beam * C).reshape(-1)  # (R,) in (R*C,)
        tokens = F.np.take(top_ids.reshape(-1), picked.astype("int32"))
        origin = origin.astype("int32")
        finished = F.np.maximum(F.np.take(finished, origin), (tokens == EOS).astype("float32"))
        return (tokens.astype("int32"), F.np.take(cand_raw.reshape(-1), picked.astype("int32")),
                F.np.take(new_len.reshape(-1), origin), finished, origin)


_STEPS = {}


def candidates(beam_size, vocab_size):
    """C: how many next tokens each hypothesis offers."""
    return min(beam_size, vocab_size)


def beam_step(beam_size, vocab_size):
    """The hybridized `BeamStep` for a beam size, kept for the next search with it (and the
    model's decoding step made with it: `mtx.model.incremental.extend`)."""
    key = (beam_size, candidates(beam_size, vocab_size))
    if key not in _STEPS:
        step = BeamStep(*key)
        step.hybridize()  # not static_alloc: its outputs are the next call's inputs
        _STEPS[key] = step
    return _STEPS[key]
