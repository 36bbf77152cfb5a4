"""Decoding: untrained models decoding a fixed number of positions (`decode`), and a trained run's
translation by mtx and CTranslate2 (`decode --run`). mtx decodes with the product's search
(`mtx.search`) and translation (`mtx.evaluation`)."""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as onp

from ..errors import ConfigError
from ..vocab import EOS
from . import inputs
from .measure import CT2, MTX_PRECISIONS
from .peers import PEERS

DECODE_WARMUP_STEPS = 4   # forced steps of one untimed decode of the first batch
RUN_BEAMS = {"beam5": 5, "greedy": 1}


class ForcedLength:
    """An mtx model whose decoding steps never choose EOS: `search.greedy_search` with the output
    limit ``max_len_b=steps`` then decodes exactly ``steps`` positions of every sentence."""

    def __init__(self, model):
        self.model, self.cfg, self.no_eos = model, model.cfg, None

    def init_state(self, *args, **kwargs):
        return self.model.init_state(*args, **kwargs)

    def step(self, tokens, state):
        from mxnet import np
        log_probs, *rest = self.model.step(tokens, state)  # (R, V)
        if self.no_eos is None:
            self.no_eos = np.array(onp.eye(log_probs.shape[-1], dtype="float32")[EOS] * -1e30,
                                   ctx=log_probs.ctx)  # (V,)
        return (log_probs + self.no_eos, *rest)


def forced_greedy(model, batch, steps):
    """The product's greedy search of a `Batch`'s source, exactly ``steps`` positions each."""
    from mxnet import np
    from ..search import greedy_search
    return greedy_search(ForcedLength(model), np.array(batch.src_tokens),
                         np.array(batch.src_valid_len), max_len_a=0, max_len_b=steps)


def time_decoding(greedy, batches, steps):
    """Seconds of ``greedy(batch, steps)`` over ``batches``, after a short untimed one (every
    implementation decodes the same number of positions)."""
    greedy(batches[0], DECODE_WARMUP_STEPS)
    tic = time.perf_counter()
    for batch in batches:
        greedy(batch, steps)
    return time.perf_counter() - tic


def measure_decode(name, args):
    """Greedy decoding of the test split (--max-sentences), --steps positions a sentence, by an
    untrained model of the benchmark's configuration (mtx's built as training builds it)."""
    from ..multi30k import TEST_SPLIT
    corpus, model_cfg, _ = inputs.load(args.model, args.data)
    if name in PEERS:
        peer = PEERS[name](model_cfg)

        def greedy(batch, steps):
            return peer.greedy(batch.src_tokens, batch.src_valid_len, steps)
    else:
        import mxnet as mx
        from ..config import TrainConfig
        from ..training.build import build_pieces
        model = build_pieces(model_cfg, TrainConfig(precision=MTX_PRECISIONS[name]), [mx.cpu()],
                             "device").model

        def greedy(batch, steps):
            return forced_greedy(model, batch, steps)
    batches = inputs.decode_batches(corpus.ids[TEST_SPLIT][0][:args.max_sentences])
    seconds = time_decoding(greedy, batches, args.steps)
    return {"sent_s": round(sum(len(b.ids) for b in batches) / seconds, 1),
            "seconds": round(seconds, 2)}, model_cfg


def load_for_decoding(run_dir):
    """(hybridized model, tokenizer) of a trained run, as the commands load it to decode."""
    import mxnet as mx
    from ..search import load_decoder
    return load_decoder(run_dir, mx.cpu())[:2]


def run_translators(name, run_dir, tmp_dir):
    """Implementation ``name`` on trained run ``run_dir`` -> ``make(decode_cfg)``, a
    `LineTranslator`. CTranslate2 rows export the run in another process first (into
    ``tmp_dir``), so this one never loads MXNet and its peak memory is CTranslate2's own."""
    if name in CT2:
        from ..config import DecodeConfig
        from ..deploy import require
        from ..deploy.backend import CTranslate2Translator
        require()  # the install hint, before a process is started
        model_dir = Path(tmp_dir) / name
        done = subprocess.run([sys.executable, "-m", "mtx.commands.export", f"ckpt={run_dir}",
                               f"quantization={CT2[name][0]}", f"output={model_dir}"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(f"exporting {run_dir} failed: "
                              f"{(done.stderr.strip().splitlines() or [done.returncode])[-1]}")
        translator = CTranslate2Translator(model_dir, DecodeConfig(), compute=CT2[name][1])
        return translator.with_settings
    import mxnet as mx
    from ..precision import set_precision
    from ..search import Translator
    model, tokenizer = load_for_decoding(run_dir)
    set_precision(model, MTX_PRECISIONS[name])
    return lambda decode_cfg: Translator(model, tokenizer, decode_cfg, mx.cpu())


def measure_run_decode(name, args):
    """Implementation ``name`` translating trained run --run's test split with the run's weights,
    beam 5 and greedy (conf/decode/), as users do; the same sentences and threads for every
    implementation -> (result, the run's ModelConfig)."""
    from ..config import ModelConfig
    from ..rundir import read_config
    from ..evaluation import translator_rounds
    src, ref, data_cfg = inputs.run_test_split(args.run, args.max_sentences)
    result = {"sentences": len(src)}
    with tempfile.TemporaryDirectory(prefix="mtx-bench-run-") as tmp:
        make = run_translators(name, args.run, tmp)
        for label, beam in RUN_BEAMS.items():
            timing = translator_rounds({name: make(inputs.decode_config(beam))}, src, ref,
                                       data_cfg.tgt_lang, rounds=1)[name]
            seconds = max(timing["best"], 1e-3)
            result.update({f"{label}_seconds": timing["best"],
                           f"{label}_sent_s": round(len(src) / seconds, 1),
                           f"{label}_subwords_s": round(timing["subwords"] / seconds, 1),
                           f"{label}_sacrebleu": round(timing["sacrebleu"]["score"], 2)})
    return result, read_config(ModelConfig, Path(args.run) / "model.json", "model config")
