"""What every measurement starts from: the model and data configs read from ``conf/``, the corpus,
the training batches and the decoding batches. Every implementation gets the same ones."""
import dataclasses
import os
from pathlib import Path

import numpy as onp
from omegaconf import OmegaConf

from ..config import CONF_DIR, DataConfig, ModelConfig
from ..typecheck import from_dict
from ..datadir import data_dir
from ..errors import ConfigError
from ..multi30k import TEST_SPLIT  # what is decoded (the toy task uses the same split name)

DEFAULT_MODEL = "small"            # conf/model/small.yaml
DEFAULT_DATA = "multi30k_en_de"    # conf/data/multi30k_en_de.yaml
CORPUS_SEED = 1                    # toy data and the training batches' shuffle
TRAIN_BATCH_TOKENS = 4096          # padded tokens per training batch, for every implementation
BATCHINGS = ("bucket", "packed")   # training batches: mtx's and gluonnlp's bucket sampler, or
                                   # fairseq-style length packing (the peers' own harness)
DECODE_BATCH = 64                  # sentences per greedy decoding batch


def group_config(group, name):
    """conf/<group>/<name>.yaml as a plain dict (interpolations such as oc.env resolved)."""
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.is_file():
        choices = ", ".join(sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")))
        raise ConfigError(f"--{group} {name}: there is no {path}; choose one of {choices}")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def model_config(name, vocab_size):
    """conf/model/<name>.yaml with the data's ``vocab_size``, untied embeddings and post-norm
    layers: the peers (gluonnlp ``share_embed=False, tie_weights=False``, d2l) have separate
    source, target and output matrices and put LayerNorm after each sublayer, so mtx is
    measured with them too."""
    cfg = from_dict(ModelConfig, group_config("model", name), "model")
    return dataclasses.replace(cfg, tie_embeddings=False, pre_norm=False, vocab_size=vocab_size)


def data_config(name):
    """conf/data/<name>.yaml; its raw_dir falls back on MTX_MULTI30K_DIR as in training."""
    values = group_config("data", name)
    if values.get("raw_dir"):
        values["raw_dir"] = os.path.abspath(values["raw_dir"])
    return from_dict(DataConfig, values, "data")


def load_corpus(data_cfg):
    """The corpus of ``data_cfg`` with a tokenizer built on its training split."""
    from ..corpus import load_corpus as load
    return load(data_cfg, data_dir(), seed=CORPUS_SEED)


def load(model_name, data_name):
    """(corpus, ModelConfig, DataConfig) of a measurement; the vocabulary size comes from the
    corpus's tokenizer."""
    data_cfg = data_config(data_name)
    corpus = load_corpus(data_cfg)
    return corpus, model_config(model_name, len(corpus.tokenizer)), data_cfg


def train_batches(corpus, data_cfg, batching=BATCHINGS[0]):
    """The training pairs no longer than data.max_len in shuffled ~4096-token batches:
    ``batching`` "bucket" (gluonnlp's FixedBucketSampler, as mtx's trainer and gluonnlp's
    train_transformer.py batch) or "packed" (length-sorted packing, as fairseq and
    ../shared/peers/common.py batch)."""
    from ..batching import bucket_batches, packed_batches
    pairs = corpus.train_pairs(data_cfg.max_pair_len)
    if batching == "packed":
        return packed_batches(*pairs, TRAIN_BATCH_TOKENS, seed=CORPUS_SEED)
    if batching != "bucket":
        raise ConfigError(f"--batches {batching}: choose one of {', '.join(BATCHINGS)}")
    return bucket_batches(*pairs, TRAIN_BATCH_TOKENS, shuffle=True, seed=CORPUS_SEED)


def decode_batches(corpus, max_sentences=None, batch_size=DECODE_BATCH):
    """The test split's source ids -> `source_batches`; ``max_sentences``: only the first ones
    (for a quick check)."""
    return source_batches(corpus.ids[TEST_SPLIT][0][:max_sentences], batch_size)


def source_batches(ids, batch_size=DECODE_BATCH):
    """Source ids (lists, without EOS) -> [(src (B, S) int32 with EOS, lengths (B,))] in order."""
    from ..vocab import EOS
    batches = []
    for start in range(0, len(ids), batch_size):
        rows = [s + [EOS] for s in ids[start:start + batch_size]]
        src = onp.zeros((len(rows), max(map(len, rows))), "int32")
        for r, s in enumerate(rows):
            src[r, :len(s)] = s
        batches.append((src, onp.array([len(s) for s in rows], "int32")))
    return batches


def run_seed(run_dir):
    """The seed a trained run was made with (its config.yaml; CORPUS_SEED without one): a toy
    run's test split is drawn with it."""
    config = Path(run_dir) / "config.yaml"
    return OmegaConf.load(config).get("seed", CORPUS_SEED) if config.is_file() else CORPUS_SEED


def test_text(data_cfg, max_sentences=None, seed=CORPUS_SEED):
    """(source lines, reference lines) of the test split for a trained run's data config (a
    toy run's: drawn with ``seed``, the run's `run_seed`). Multi30k from MTX_MULTI30K_DIR when
    set (the copy on this machine), else from the run's data.raw_dir, else downloaded."""
    from ..multi30k import load_split
    from ..toy import make_toy
    if data_cfg.name == "toy":
        src, ref = make_toy(data_cfg.task, data_cfg.num_symbols, data_cfg.min_len,
                            data_cfg.max_toy_len, data_cfg.sizes, seed)[TEST_SPLIT]
    else:
        raw_dir = os.environ.get("MTX_MULTI30K_DIR") or data_cfg.raw_dir
        src, ref = load_split(TEST_SPLIT, data_cfg.src_lang, data_cfg.tgt_lang, raw_dir,
                              data_dir())
    return src[:max_sentences], ref[:max_sentences]


def decode_config(beam):
    """conf/decode/greedy.yaml for beam 1, else conf/decode/beam.yaml with ``beam_size=beam``."""
    from ..config import DecodeConfig
    values = group_config("decode", "greedy" if beam == 1 else "beam")
    return from_dict(DecodeConfig, {**values, "beam_size": beam}, "decode")
