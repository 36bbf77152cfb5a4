"""Several trained runs decoding as one model (mtx-translate and mtx-evaluate ``ensemble=``): at
every step of the beam search, the mean of the models' log-probabilities of the next token, each
model keeping its own decoder state. The runs must share one vocabulary (the same tokenizer).
"""
import dataclasses

from mxnet import nd, np, npx

from ..errors import ConfigError, MtxError
from ..model import incremental
from ..model.precision import as_float32


class Ensemble:
    """What `mtx.decoding.search.beam_search` and `Translator` use of a `Transformer` (``cfg``,
    `init_state`, `step`, `extend`, `reorder_state`), over ``models``."""

    def __init__(self, models):
        self.models = list(models)
        first = self.models[0].cfg
        # the shortest positional table bounds every model's outputs
        self.cfg = dataclasses.replace(first, max_len=min(m.cfg.max_len for m in self.models))

    def init_state(self, src_tokens, src_valid_len, head_gates=None, beam_size=1):
        """One decoder state per model (`Transformer.init_state`); head gates are one model's."""
        if head_gates is not None:
            raise ConfigError("head gates switch off one model's heads; they do not apply to an "
                              "ensemble (decode with one run)")
        return [m.init_state(src_tokens, src_valid_len, None, beam_size) for m in self.models]

    def step(self, tokens, states):
        """tokens (R,) -> the models' mean log-probabilities (R, V); no attention weights."""
        log_probs = [m.step(tokens, state)[0] for m, state in zip(self.models, states)]
        return sum(log_probs[1:], log_probs[0]) / len(log_probs), None

    def extend(self, states, then, more):
        """`Transformer.extend` over the mean of the models' log-probabilities: each model's
        decoder step, then ``then`` (called on its own) over the ``then.C`` best next tokens of
        the mean."""
        tokens, position = more[0], np.full((1,), states[0]["t"], dtype="int32", ctx=more[0].ctx)
        hidden = [incremental.step(m, tokens, state, "hidden")[0]
                  for m, state in zip(self.models, states)]  # (R, D) each
        log_probs = [npx.log_softmax(as_float32(nd, m.output(h), m.output.compute_dtype), axis=-1)
                     for m, h in zip(self.models, hidden)]
        mean = sum(log_probs[1:], log_probs[0]) / len(log_probs)  # (R, V)
        top_lp, top_ids = npx.topk(mean, k=then.C, axis=-1, ret_typ="both")
        return then(top_lp, top_ids, *more[1:], position)

    def reorder_state(self, states, rows, sentences=None):
        for model, state in zip(self.models, states):
            model.reorder_state(state, rows, sentences)


def ensemble_runs(ckpt, ensemble):
    """``ckpt=`` and the runs of ``ensemble=`` (a list of training run directories, or one, or
    None), each checked to be a training run, before any loads."""
    from ..runs.rundir import require_run
    extra = ensemble or []
    extra = [extra] if isinstance(extra, str) else list(extra)
    for run_dir in extra:
        if not isinstance(run_dir, str):
            raise ConfigError(f"ensemble={extra}: give training run directories, e.g. "
                              f"ensemble=[outputs/run2,outputs/run3]")
        try:
            require_run(run_dir)
        except MtxError as err:
            raise ConfigError(f"ensemble: {str(err).replace('ckpt=', '', 1)}") from None
    return [ckpt, *extra]


def load_decoders(run_dirs, ctx, which="auto", precision="float32"):
    """(model, tokenizer, the first run's DataConfig) of one run directory, or of several as an
    `Ensemble` (`load_decoder` each; checkpoint ``which`` and products in ``precision`` for
    each); a run whose tokenizer differs from the first's is one ConfigError."""
    from ..data.corpus import vocabulary_sha256
    from .search import load_decoder
    model, tokenizer, data_cfg = load_decoder(run_dirs[0], ctx, which, precision)
    if len(run_dirs) == 1:
        return model, tokenizer, data_cfg
    models, vocabulary = [model], vocabulary_sha256(tokenizer)
    for run_dir in run_dirs[1:]:
        other, other_tokenizer, _ = load_decoder(run_dir, ctx, which, precision)
        if vocabulary_sha256(other_tokenizer) != vocabulary:
            raise ConfigError(f"ensemble: {run_dir} has another vocabulary than {run_dirs[0]} "
                              f"(another tokenizer); an ensemble needs runs trained with one "
                              f"vocabulary (the same data, data.vocab_size and data.lowercase_source)")
        models.append(other)
    return Ensemble(models), tokenizer, data_cfg
