"""scripts/train.py: train a model, pick its final checkpoint, score the test split. The run
directory is Hydra's output directory; it keeps the config, tokenizer, checkpoints,
metrics.jsonl and report.json."""
import json
import logging


from .. import training
from ..typecheck import is_whole
from ..hardware.devices import use_numpy_interface
from ..errors import ConfigError
from .entry import hydra_command, typed

log = logging.getLogger("mtx")


def train(cfg):
    """Train with the composed config ``cfg``; returns the validation BLEU (for Hydra sweepers;
    None on cluster workers other than rank 0, and without a validation score)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf
    use_numpy_interface()
    model_cfg, data_cfg = typed(cfg, "model"), typed(cfg, "data")
    train_cfg, decode_cfg = typed(cfg, "train"), typed(cfg, "decode")
    if not is_whole(cfg.seed):
        raise ConfigError(f"seed={cfg.seed}: give an integer")
    run_dir = HydraConfig.get().runtime.output_dir
    report = training.train(model_cfg, data_cfg, train_cfg, decode_cfg, run_dir,
                            cfg.paths.data_dir, seed=cfg.seed, device=cfg.device,
                            config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
                            init_from=cfg.init_from)
    if report is None:  # a worker other than rank 0: rank 0 reports
        return None
    scored = {name: scores for name, scores in report["scores"].items() if "skipped" not in scores}
    for split, scores in scored.items():
        for name in ("sacrebleu", "bleu_tok_lc", "chrf"):
            log.info("%s %s = %.2f  %s", split, name, scores[name]["score"],
                     scores[name]["signature"])
    log.info("run directory: %s", run_dir)
    print(json.dumps({name: scores["sacrebleu"] for name, scores in scored.items()}))
    valid = report["final"]["valid_bleu"]
    return valid["score"] if valid else None


# mtx-train and scripts/train.py
main = hydra_command("train", train)
