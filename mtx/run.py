"""One training run end to end: data, model, training, final checkpoint choice, test scores."""
import dataclasses
import json
import logging
from pathlib import Path

from . import checkpoint as ckpt
from .config import DataConfig
from .corpus import load_corpus, load_tokenizer, save_tokenizer
from .multi30k import SPLITS
from .evaluation import translate_and_score
from .parallel import DataParallel
from .pictures import learning_curve
from .files import atomic_write_text
from .devices import resolve_device, seed_everything
from .trainer import Fit, average_checkpoints

log = logging.getLogger(__name__)


def count_parameters(model):
    """Trainable parameters (the positional table is a constant and not counted)."""
    return sum(int(p.data().size) for p in model.collect_params().values() if p.grad_req != "null")


def choose_final(fit):
    """Best-by-val-BLEU checkpoint, or the average of the last N epochs if that scores higher."""
    best_path = fit.run_dir / "checkpoints" / "best.params"
    last = ckpt.epoch_checkpoints(fit.run_dir)[-fit.cfg.average_last:]
    fit.model.load_parameters(str(best_path), ctx=fit.ctxs)
    _, best_bleu = fit.evaluate("val")
    choice = {"checkpoint": "best", "valid_bleu": best_bleu}
    if fit.cfg.average_last > 1 and len(last) > 1:
        average_checkpoints(fit.model, last, fit.run_dir / "checkpoints" / "average.params")
        _, avg_bleu = fit.evaluate("val")
        log.info("val BLEU greedy: best epoch %s, average of last %d %s",
                 best_bleu and best_bleu["score"], len(last), avg_bleu and avg_bleu["score"])
        if avg_bleu is None or best_bleu is None or avg_bleu["score"] >= best_bleu["score"]:
            return {"checkpoint": "average", "averaged": len(last), "valid_bleu": avg_bleu}
        fit.model.load_parameters(str(best_path), ctx=fit.ctxs)
    return choice


def quiet_log_files():
    """Workers other than rank 0 keep logging to the console but write no log file."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()


def train(model_cfg, data_cfg, train_cfg, decode_cfg, run_dir, cache_dir, seed=1, device="cpu"):
    """Train, pick the final checkpoint, translate the test split; returns report.json's dict
    (None on workers other than rank 0, which only train)."""
    run_dir = Path(run_dir)
    ctxs = [resolve_device(d) for d in (train_cfg.devices or [device])]
    parallel = DataParallel(ctxs, train_cfg.kvstore)
    if not parallel.is_chief:
        quiet_log_files()
    seed_everything(seed)
    if parallel.is_chief:  # rank 0 prepares the run directory and the subword model first,
        run_dir.mkdir(parents=True, exist_ok=True)
        corpus = load_corpus(data_cfg, cache_dir, seed)
    parallel.any(False)    # the others wait for it and load the cached subword model
    if not parallel.is_chief:
        corpus = load_corpus(data_cfg, cache_dir, seed)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=len(corpus.tokenizer))
    if parallel.is_chief:
        ckpt.save_model_config(model_cfg, run_dir)
        atomic_write_text(run_dir / "data.json",
                               json.dumps(dataclasses.asdict(data_cfg), indent=1))
        save_tokenizer(corpus.tokenizer, run_dir)
    fit = Fit(corpus, model_cfg, data_cfg, train_cfg, decode_cfg, run_dir, parallel, seed)
    if train_cfg.resume and not fit.restore():
        log.info("train.resume=true but %s has no checkpoint yet: starting fresh", run_dir)
    log.info("model: %s parameters; %d training pairs; devices %s; worker %d of %d",
             f"{count_parameters(fit.model):,}", len(fit.train_src), ctxs, parallel.rank,
             parallel.num_workers)
    train_minutes = fit.run()
    log.info("worker %d of %d: trained on %d sentences (ids digest %s) in %d steps; parameter "
             "digest %s", parallel.rank, parallel.num_workers, *fit.shard_digest(), fit.step,
             fit.parameter_digest())
    if not parallel.is_chief:
        return None
    final = choose_final(fit)
    test_split = SPLITS[-1]
    sources, references = corpus.text[test_split]
    hypotheses, test_scores = translate_and_score(fit.model, corpus.tokenizer, decode_cfg, fit.ctx,
                                                  sources, references, data_cfg.tgt_lang)
    atomic_write_text(run_dir / f"{test_split}.hyp.{data_cfg.tgt_lang}",
                           "\n".join(hypotheses) + "\n")
    report = {"src_lang": data_cfg.src_lang, "tgt_lang": data_cfg.tgt_lang,
              "data": data_cfg.name, "parameters": count_parameters(fit.model),
              "model": dataclasses.asdict(model_cfg), "train_minutes": round(train_minutes, 2),
              "steps": fit.step, "epochs": fit.epoch, "final": final,
              "devices": [str(c) for c in ctxs], "workers": parallel.num_workers,
              "scores": {test_split: test_scores}}
    atomic_write_text(run_dir / "report.json", json.dumps(report, indent=1))
    if (run_dir / "metrics.jsonl").is_file():
        learning_curve(run_dir / "metrics.jsonl", run_dir / "learning_curve.png")
    return report


def load_run(run_dir, ctx, which="auto"):
    """(model, tokenizer, DataConfig) of a training run directory. ``which``: auto (the
    checkpoint the run chose: average or best), best, average, last, or a .params path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ckpt.CheckpointError(f"ckpt={run_dir} is not a directory; pass a training run "
                                   f"directory (outputs/train/runs/...)")
    if which == "auto":
        report = run_dir / "report.json"
        which = json.loads(report.read_text())["final"]["checkpoint"] if report.is_file() else "best"
    model = ckpt.load_model(run_dir, ctx, which)
    data_path = run_dir / "data.json"
    data_cfg = DataConfig(**json.loads(data_path.read_text())) if data_path.is_file() else None
    return model, load_tokenizer(run_dir), data_cfg
