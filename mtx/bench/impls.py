"""The implementations a benchmark measures, each as a training step and a greedy decoder.

    mtx, mtx-bf16   mtx in float32 / with bfloat16 matrix multiplies (train.precision)
    mtx-recompute   (decoding only) mtx without its key/value cache: the whole prefix at each step
    gluonnlp, d2l   the peers (`mtx.bench.peers`)
    ct2-float32, ct2-int8   (decoding a trained run only, ``decode --run``) the run exported to
                    CTranslate2 with float32 / int8 weights (`mtx.deploy`); ct2-int8-as-float32:
                    the int8 export computed in float32 (int8 weights dequantized at load)

A training step is a callable ``step(batch) -> loss array`` (the step is done when the array is
read); a greedy decoder is ``greedy(src, src_len, steps, bos) -> (B, steps) ids`` that always
decodes exactly ``steps`` positions (no early stop, so every model does the same work).
"""

from .peers import PEERS

MTX_PRECISIONS = {"mtx": "float32", "mtx-bf16": "bfloat16"}
CT2_QUANTIZATIONS = {"ct2-float32": "float32", "ct2-int8": "int8",  # mtx-export quantization=
                     "ct2-int8-as-float32": "int8"}
# CTranslate2's compute type of each row: the stored type, or int8 weights dequantized at load
# (what mtx-translate does with an int8 export on a CPU without VNNI: `backend.compute_type`)
CT2_COMPUTE = {"ct2-float32": "default", "ct2-int8": "default",
               "ct2-int8-as-float32": "float32"}
TRAIN_IMPLS = (*MTX_PRECISIONS, *PEERS)
DECODE_IMPLS = (*TRAIN_IMPLS, "mtx-recompute", *CT2_QUANTIZATIONS)
RUN_IMPLS = (*MTX_PRECISIONS, "ct2-float32", "ct2-int8")  # what `decode --run` measures by default


def precision_of(name):
    """The matrix-multiply precision (CTranslate2: the stored weights) of ``name``."""
    if name in CT2_QUANTIZATIONS:
        return CT2_QUANTIZATIONS[name]
    return MTX_PRECISIONS.get(name.replace("-recompute", ""), "float32")


def mtx_training_step(corpus, model_cfg, data_cfg, precision):
    """mtx's training step of ``model_cfg`` in ``precision``, as `mtx.training` runs it (its
    optimizer, learning-rate schedule, clipping and loss; one CPU device): a callable
    ``step(batch) -> nll`` (the batch's summed negative log-likelihood, an mxnet array)."""
    import itertools
    import mxnet as mx
    from ..config import TrainConfig
    from ..parallel import DataParallel
    from ..training.build import build_pieces
    from ..training.steps import train_step
    train_cfg, parallel = TrainConfig(precision=precision), DataParallel([mx.cpu()])
    pieces = build_pieces(model_cfg, train_cfg, parallel.ctxs, parallel.trainer_kvstore)
    updates = itertools.count(1)

    def step(batch):
        return train_step(pieces, parallel, batch, next(updates), train_cfg)[0]

    return step


def mtx_model(model_cfg, precision):
    """An untrained mtx `Transformer` built as training builds it (`build_pieces`: Xavier
    initialisation, matrix multiplies in ``precision``, hybridized with static_alloc), on the CPU."""
    import mxnet as mx
    from ..config import TrainConfig
    from ..training.build import build_pieces
    return build_pieces(model_cfg, TrainConfig(precision=precision), [mx.cpu()], "device").model


def cached_greedy(model, src, src_len, steps, bos):
    """Greedy decoding with mtx's key/value cache for exactly ``steps`` positions: (B, steps)."""
    from mxnet import np
    src, src_len = np.array(src), np.array(src_len)
    y, outs = np.full((src.shape[0],), bos, dtype="int32"), []
    state = model.init_state(src, src_len)
    for _ in range(steps):
        y = model.step(y, state)[0].argmax(axis=-1).astype("int32")
        outs.append(y)
    return np.stack(outs, axis=1).asnumpy()


def recompute_greedy(model, src, src_len, steps, bos):
    """Greedy decoding that runs the whole prefix through the decoder at every step (no cache),
    for exactly ``steps`` positions: (B, steps)."""
    from mxnet import nd, np
    from ..masks import causal_valid_len
    src, src_len = np.array(src), np.array(src_len)
    y = np.full((src.shape[0],), bos, dtype="int32")
    memory, prefix = model.encode(src, src_len), [y]
    for _ in range(steps):
        tgt = model.tgt_embed(np.stack(prefix, axis=1))  # (B, t, D)
        hidden = model.decoder(tgt, memory, src_len, causal_valid_len(nd, tgt, src_len))
        y = model.output(hidden[:, -1:])[:, 0].argmax(axis=-1).astype("int32")  # (B,)
        prefix.append(y)
    return np.stack(prefix[1:], axis=1).asnumpy()


def training_step(name, corpus, model_cfg, data_cfg):
    """Implementation ``name``'s training step (see the module docstring)."""
    if name in MTX_PRECISIONS:
        return mtx_training_step(corpus, model_cfg, data_cfg, MTX_PRECISIONS[name])
    return PEERS[name](model_cfg, hybridize=True).train_step


def greedy_decoder(name, model_cfg):
    """Implementation ``name``'s greedy decoder (see the module docstring)."""
    if name in PEERS:
        return PEERS[name](model_cfg, hybridize=True).greedy
    model = mtx_model(model_cfg, precision_of(name))
    search = recompute_greedy if name.endswith("-recompute") else cached_greedy
    return lambda src, src_len, steps, bos: search(model, src, src_len, steps, bos)


def run_translators(name, run_dir, tmp_dir):
    """Implementation ``name`` on trained run ``run_dir`` -> (``make(decode_cfg)``, a translator
    with ``translate(lines) -> lines``; the run's tokenizer). mtx rows load the run here (mtx-bf16
    with bfloat16 products); CTranslate2 rows export it first in another process (``python -m
    mtx.commands.export``, into ``tmp_dir``), so this process never loads MXNet and its peak
    memory is CTranslate2's own."""
    from ..config import DecodeConfig
    if name in CT2_QUANTIZATIONS:
        from ..deploy.backend import CTranslate2Translator
        model_dir = export_in_child(run_dir, CT2_QUANTIZATIONS[name], tmp_dir)
        loaded = CTranslate2Translator(model_dir, DecodeConfig(), compute=CT2_COMPUTE[name])
        return loaded.with_settings, loaded.tokenizer
    import mxnet as mx
    from ..precision import set_precision
    from ..rundir import load_run
    from ..search import Translator
    model, tokenizer, _ = load_run(run_dir, mx.cpu())
    set_precision(model, MTX_PRECISIONS[name])
    model.hybridize(static_alloc=True)
    return (lambda decode_cfg: Translator(model, tokenizer, decode_cfg, mx.cpu())), tokenizer


def export_in_child(run_dir, quantization, tmp_dir):
    """``mtx-export ckpt=run_dir quantization=...`` in a new process -> the model directory."""
    import subprocess
    import sys
    from pathlib import Path
    from ..deploy import require
    from ..errors import ConfigError
    require()  # the install hint, before a process is started
    model_dir = Path(tmp_dir) / f"ct2-{quantization}"
    done = subprocess.run([sys.executable, "-m", "mtx.commands.export", f"ckpt={run_dir}",
                           f"quantization={quantization}", f"output={model_dir}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise ConfigError(f"exporting {run_dir} failed: {lines[-1] if lines else done.returncode}")
    return model_dir
