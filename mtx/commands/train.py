"""scripts/train.py: train a model, pick its final checkpoint, score the test split. The run
directory is Hydra's output directory; it keeps the config, tokenizer, checkpoints,
metrics.jsonl and report.json."""
import json
import logging


from .. import training
from ..config import RunConfig, RunKeys
from ..hardware.devices import use_numpy_interface
from .declared import SECTIONS
from .entry import hydra_command, typed, typed_keys

log = logging.getLogger("mtx")


def run_config(cfg):
    """The composed train config ``cfg`` as the `RunConfig` the run is given."""
    keys = typed_keys(cfg, RunKeys)
    return RunConfig(**vars(keys), **{section: typed(cfg, section) for section in SECTIONS},
                     data_dir=cfg.paths.data_dir)


def train(cfg):
    """Train with the composed config ``cfg``; returns the validation BLEU (for Hydra sweepers;
    None on cluster workers other than rank 0, and without a validation score)."""
    from hydra.core.hydra_config import HydraConfig
    from ..decoding.evaluation import score_line
    from omegaconf import OmegaConf
    use_numpy_interface()
    run_dir = HydraConfig.get().runtime.output_dir
    report = training.train(run_config(cfg), run_dir, OmegaConf.to_yaml(cfg, resolve=True))
    if report is None:  # a worker other than rank 0: rank 0 reports
        return None
    scored = {name: scores for name, scores in report["scores"].items() if "skipped" not in scores}
    for split, scores in scored.items():
        for name in ("sacrebleu", "bleu_tok_lc", "chrf"):
            log.info("%s", score_line(split, name, scores[name]))
    log.info("run directory: %s", run_dir)
    print(json.dumps({name: scores["sacrebleu"] for name, scores in scored.items()}))
    valid = report["final"]["valid_bleu"]
    return valid["score"] if valid else None


# mtx-train and scripts/train.py
main = hydra_command("train", train)
