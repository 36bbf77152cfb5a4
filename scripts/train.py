#!/usr/bin/env python
"""Train a Transformer: `python scripts/train.py [model.num_heads=8 data=multi30k_en_fr ...]`.

Sweeps: `python scripts/train.py -m model.num_heads=1,2,4,8` or `sweep=heads`.
The run directory (printed at the end) keeps the config, tokenizer, checkpoints, metrics.jsonl
and report.json. Returns the validation BLEU (for Hydra sweepers).
"""
import json
import logging

import hydra
from hydra.core.hydra_config import HydraConfig
from mxnet import npx

from mtx import run
from mtx.cli import one_line_errors, typed

log = logging.getLogger("mtx")


@hydra.main(config_path="../conf", config_name="train", version_base="1.3")
def main(cfg):
    npx.set_np()
    with one_line_errors():
        model_cfg, data_cfg = typed(cfg, "model"), typed(cfg, "data")
        train_cfg, decode_cfg = typed(cfg, "train"), typed(cfg, "decode")
        run_dir = HydraConfig.get().runtime.output_dir
        report = run.train(model_cfg, data_cfg, train_cfg, decode_cfg, run_dir,
                           cfg.paths.cache_dir, seed=cfg.seed, device=cfg.device)
    if report is None:  # a worker other than rank 0: rank 0 reports
        return None
    for split, scores in report["scores"].items():
        for name in ("sacrebleu", "bleu_tok_lc", "chrf"):
            log.info("%s %s = %.2f  %s", split, name, scores[name]["score"],
                     scores[name]["signature"])
    log.info("run directory: %s", run_dir)
    print(json.dumps({k: report["scores"][k]["sacrebleu"] for k in report["scores"]}))
    valid = report["final"]["valid_bleu"]
    return valid["score"] if valid else None


if __name__ == "__main__":
    main()
