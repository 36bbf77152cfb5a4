"""scripts/heads.py: which heads of a trained run matter, and how much faster the model gets
without the rest. Writes into <run>/heads/ (or out_dir=): importance.json/.png, pruning.json/.png
(method=order) or gates.json/.png and gates_training.png (method=l0: learned gates,
`mtx.heads.gates`), pruned/ (a smaller run directory, fine-tuned there when finetune.minutes > 0) and
speed.json."""
import dataclasses
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

from ..data.corpus import load_corpus
from ..hardware.devices import use_numpy_interface
from ..errors import CheckpointError, ConfigError
from ..heads.stages import gradual_cuts, learned_gates, ordered_gates, prune_and_time, score_heads
from ..config import RunConfig, TrainConfig
from ..heads.settings import StudySettings
from ..typecheck import from_dict
from ..runs.rundir import RunDir
from ..runs.runlock import RunLock
from ..decoding.search import load_decoder
from .entry import decoding_options, hydra_command, typed_keys
from .paths import writable_out_dir

log = logging.getLogger(__name__)


def setup(cfg, out):
    """The run, its corpus and every setting of the study, checked before any work; the
    study writes into ``out`` (held)."""
    settings = typed_keys(cfg, StudySettings)
    decode_cfg, ctx = decoding_options(cfg)
    run_dir = Path(cfg.ckpt)
    model, tokenizer, data_cfg = load_decoder(run_dir, ctx, cfg.checkpoint)
    if model.cfg.heads_per_layer is not None:
        raise ConfigError(f"ckpt={cfg.ckpt} keeps {model.cfg.heads_per_layer} heads per attention "
                          f"layer (a pruned model): mtx-heads studies a model with the same "
                          f"heads in every layer; give the run it was pruned from")
    if (out / "pruned").exists():
        raise ConfigError(f"{out / 'pruned'} holds the pruned model of an earlier study; give "
                          f"this one another out_dir= (or delete that folder)")
    if data_cfg is None:
        raise CheckpointError(f"ckpt={cfg.ckpt} has no data.json (the corpus it was trained on), "
                              f"which the study reads; give a run that mtx-train wrote")
    run_cfg = RunDir(run_dir).train_config()
    if data_cfg.name == "multi30k":
        data_cfg = dataclasses.replace(data_cfg, raw_dir=cfg.raw_dir)
    finetune = settings.finetune
    if finetune.distilled_target:  # the training split's targets: the fine-tuning's alone
        data_cfg = dataclasses.replace(data_cfg,
                                       distilled_target=os.path.abspath(finetune.distilled_target))
    finetune_run = RunConfig(
        model=model.cfg, data=data_cfg, decode=decode_cfg, seed=run_cfg["seed"],
        data_dir=cfg.data_dir, train=dataclasses.replace(
            from_dict(TrainConfig, run_cfg["train"], "train"), lr=finetune.lr,
            warmup_steps=finetune.warmup_steps, resume=False,
            max_minutes=finetune.minutes / (settings.gradual.steps  # each cut's share
                                            if settings.method == "gradual" else 1),
            devices=None, kvstore="device")) if finetune.minutes else None
    to_remove = settings.heads_to_remove(model.cfg)
    corpus = load_corpus(data_cfg, cfg.data_dir, run_cfg["seed"], tokenizer)
    if settings.test_split is None:  # the run's first test set, else its validation split
        settings = dataclasses.replace(settings, test_split=(corpus.test_names or ["val"])[0])
    for key in ("importance_split", "test_split"):
        if getattr(settings, key) not in corpus.text:
            raise ConfigError(f"{key}={getattr(settings, key)}: the run's corpus has the splits "
                              f"{', '.join(corpus.text)}; choose one of them")
    return SimpleNamespace(settings=settings, ctx=ctx, run_dir=run_dir, checkpoint=cfg.checkpoint,
                           out=out, model=model, tokenizer=tokenizer, data_cfg=data_cfg,
                           corpus=corpus, seed=run_cfg["seed"], decode_cfg=decode_cfg,
                           finetune_run=finetune_run, to_remove=to_remove)


def study_heads(cfg):
    """The whole study of the run ``cfg.ckpt``; returns speed.json's dict."""
    use_numpy_interface()
    out = writable_out_dir(cfg, "heads")
    with RunLock(out):
        s = setup(cfg, out)
        if s.settings.method == "l0":
            speed = prune_and_time(s, *learned_gates(s))
        elif s.settings.method == "gradual":
            speed = prune_and_time(s, *gradual_cuts(s))
        else:
            speed = prune_and_time(s, *ordered_gates(s, *score_heads(s)))
    print(json.dumps({k: speed[k] for k in ("removed_heads", "speedup")}))
    return speed


# mtx-heads and scripts/heads.py
main = hydra_command("heads", study_heads)
