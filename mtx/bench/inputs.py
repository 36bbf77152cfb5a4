"""What every measurement starts from: the configs of ``conf/`` (read as the commands read them,
`commands.entry.typed`), the corpus, the training batches, a trained run's test split. Every
implementation gets the same ones."""
import dataclasses
import logging
import os
from pathlib import Path

from omegaconf import OmegaConf

from ..config import CONF_DIR
from ..errors import ConfigError
from ..data.multi30k import TEST_SPLIT  # what is decoded (the toy task uses the same split name)

log = logging.getLogger("mtx.bench")
DEFAULT_MODEL, DEFAULT_DATA = "small", "multi30k_en_de"  # conf/model/, conf/data/
CORPUS_SEED = 1                    # toy data and the training batches' shuffle
TRAIN_BATCH_TOKENS = 4096          # padded tokens per training batch, for every implementation


def group_config(group, name, **changes):
    """The preset conf/<group>/<name>.yaml as its typed config (composed as mtx-train composes
    it), with ``changes``."""
    from ..commands.declared import compose
    from ..commands.entry import typed
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.is_file():
        choices = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise ConfigError(f"--{group} {name}: there is no {path}; choose one of {choices}")
    return dataclasses.replace(typed(compose("train", [f"{group}={name}"]), group), **changes)


def decode_config(beam):
    """conf/decode/greedy.yaml for beam 1, else conf/decode/beam.yaml with ``beam_size=beam``."""
    return group_config("decode", "greedy" if beam == 1 else "beam", beam_size=beam)


def load(model_name, data_name):
    """(corpus, ModelConfig, DataConfig) of a measurement: conf/model/<model_name>.yaml with the
    corpus's vocabulary, untied embeddings and post-norm layers, as the peers build it."""
    from ..data.corpus import load_corpus
    from ..datadir import data_dir
    data_cfg = group_config("data", data_name)
    corpus = load_corpus(data_cfg, data_dir(), seed=CORPUS_SEED)
    model_cfg = group_config("model", model_name, tie_embeddings=False, pre_norm=False,
                             vocab_size=len(corpus.tokenizer))
    if model_cfg.attention_dropout != model_cfg.dropout:  # the peers take one rate for both
        log.info("every implementation trains at dropout %g, in attention too (the peers take "
                 "one rate; --model %s has attention_dropout %g)", model_cfg.dropout,
                 model_name, model_cfg.attention_dropout)
        model_cfg = dataclasses.replace(model_cfg, attention_dropout=model_cfg.dropout)
    return corpus, model_cfg, data_cfg


def train_batches(corpus, data_cfg):
    """The training pairs no longer than data.max_len in shuffled ~4096-token batches of
    gluonnlp's bucket sampler, as mtx trains."""
    from ..data.batching import bucket_batches
    pairs = corpus.train_pairs()
    return bucket_batches(*pairs, TRAIN_BATCH_TOKENS, shuffle=True, seed=CORPUS_SEED)


def run_test_split(run_dir, max_sentences=None):
    """(source lines, references, DataConfig) of trained run ``run_dir``'s test split: a toy
    run's drawn with the run's seed, Multi30k from MTX_MULTI30K_DIR when set (else the run's
    raw_dir, else downloaded). Reads no checkpoint and imports no MXNet."""
    from ..config import DataConfig
    from ..data.corpus import DATA_FILE
    from ..runs.rundir import read_config
    from ..datadir import data_dir
    from ..data.multi30k import load_split
    from ..data.toy import make_toy
    data_cfg = read_config(DataConfig, Path(run_dir) / DATA_FILE, "data config")
    if data_cfg.name == "toy":
        config = Path(run_dir) / "config.yaml"
        seed = OmegaConf.load(config).get("seed", CORPUS_SEED) if config.is_file() else CORPUS_SEED
        src, ref = make_toy(data_cfg.task, data_cfg.num_symbols, data_cfg.min_len,
                            data_cfg.max_toy_len, data_cfg.sizes, seed)[TEST_SPLIT]
    else:
        raw_dir = os.environ.get("MTX_MULTI30K_DIR") or data_cfg.raw_dir
        src, ref = load_split(TEST_SPLIT, data_cfg.src_lang, data_cfg.tgt_lang, raw_dir,
                              data_dir())
    return src[:max_sentences], ref[:max_sentences], data_cfg
