"""One training run end to end: data, the run directory, the pieces, the loop, the final
checkpoint choice and the test scores (report.json)."""
import contextlib
import dataclasses
import logging

from .. import faults, kernels
from ..corpus import (load_corpus, load_tokenizer, save_tokenizer, tokenizer_file,
                      tokenizer_sha256)
from ..devices import resolve_device, seed_everything
from ..checkpoints import RESUME_HINT, save_average
from ..errors import CheckpointError, ConfigError, DataError
from ..evaluation import translate_and_score
from ..files import atomic_write_text
from ..multi30k import TEST_SETS, TEST_SPLIT, load_split
from ..parallel import DataParallel
from ..pictures import learning_curve
from ..precision import choose_precision
from ..resume import check_identity, check_settings
from ..runlock import RunLock
from ..rundir import RunDir, run_identity
from .build import build_pieces
from .loop import Fit
from .state import validation_score

log = logging.getLogger(__name__)


def intact(store, names, model_cfg):
    """The checkpoints among ``names`` of ``store`` (a `CheckpointStore`) whose files are whole
    (a damaged one is left out with a warning, as resuming skips it)."""
    kept = []
    for name in names:
        try:
            store.verify(name, model_cfg)
            kept.append(name)
        except CheckpointError as err:
            log.warning("leaving %s out of the average: %s", name, err)
    return kept


def choose_final(fit):
    """The best checkpoint by validation score, or the average of the last `average_last`
    epoch checkpoints if that scores at least as well. Leaves the choice loaded in the model."""
    store, ctxs = fit.run_dir.checkpoints, fit.pieces.ctxs
    store.load(store.verify("best", fit.model.cfg), fit.model, ctxs)
    best_loss, best_bleu = fit.evaluate("val")
    best = validation_score(best_loss, best_bleu)
    average_last = fit.train_cfg.average_last
    last = (intact(store, store.epoch_names()[-average_last:], fit.model.cfg)
            if average_last > 1 else [])
    if len(last) > 1:
        save_average(store, fit.model, last, ctxs)
        avg_loss, avg_bleu = fit.evaluate("val")
        average = validation_score(avg_loss, avg_bleu)
        log.info("validation score: best epoch %s, average of the last %d %s", best, len(last),
                 average)
        if average >= best:
            return {"checkpoint": "average", "averaged": len(last), "valid_bleu": avg_bleu,
                    "valid_loss": round(avg_loss, 4)}
        store.load(store.verify("best", fit.model.cfg), fit.model, ctxs)
    return {"checkpoint": "best", "valid_bleu": best_bleu, "valid_loss": round(best_loss, 4)}


def quiet_log_files():
    """Workers other than rank 0 keep logging to the console but write no log file."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()


def prepare(run, data_cfg, model_cfg, train_cfg, data_dir, seed, config_yaml, is_chief):
    """The corpus, its training pairs (`Corpus.train_pairs`) and the model config with its
    vocabulary size. A resumed run uses its own tokenizer and is checked against the run
    directory before anything in it is written."""
    # a run with no resume point yet starts again with the settings (and tokenizer) given now
    resuming = train_cfg.resume and bool(run.checkpoints.resume_points())
    started = is_chief and (run.path / "run.json").is_file()  # workers find the chief's
    if not train_cfg.resume and (run.checkpoints.manifests() or started):
        # run.json alone: a run stopped before its first checkpoint, whose records would mix
        raise CheckpointError(f"{run.path} already holds a run; continue it with "
                              f"train.resume=true or choose a new hydra.run.dir")
    if resuming and tokenizer_file(run.path) is None:  # its checkpoints' words are unknown
        raise CheckpointError(f"{run.path} has checkpoints but no tokenizer (spm.model or "
                              f"toy_symbols.json): restore it from a copy of the run, or use a "
                              f"new hydra.run.dir (nothing in the run was changed)")
    if model_cfg.max_len < data_cfg.max_pair_len:
        raise ConfigError(f"data.max_len={data_cfg.max_pair_len} is more than model.max_len="
                          f"{model_cfg.max_len}, the model's positions: lower data.max_len or "
                          f"raise model.max_len")
    corpus = load_corpus(data_cfg, data_dir, seed, load_tokenizer(run.path) if resuming else None)
    # none left: a ConfigError, before the run directory is written
    train_pairs = corpus.train_pairs(data_cfg.max_pair_len)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=len(corpus.tokenizer))
    identity = run_identity(model_cfg, data_cfg, tokenizer_sha256(corpus.tokenizer))
    if resuming:
        check_identity(run, identity)
        check_settings(run, config_yaml)
    if is_chief:
        run.start(identity, model_cfg, data_cfg, config_yaml)
        save_tokenizer(corpus.tokenizer, run.path)
    return corpus, train_pairs, model_cfg


def train(model_cfg, data_cfg, train_cfg, decode_cfg, run_dir, data_dir, seed=1, device="cpu",
          config_yaml=None):
    """Train, pick the final checkpoint, translate the test split; returns report.json's dict
    (None on workers other than rank 0, which only train). ``config_yaml``: the resolved config
    to keep in the run directory."""
    run = RunDir(run_dir)
    ctxs = [resolve_device(d) for d in (train_cfg.devices or [device])]
    parallel = DataParallel(ctxs, train_cfg.kvstore)
    # rank 0 is the run directory's one writer for the whole run (a second training is refused)
    with RunLock(run.path) if parallel.is_chief else contextlib.nullcontext():
        return _train(run, ctxs, parallel, model_cfg, data_cfg, train_cfg, decode_cfg, data_dir,
                      seed, config_yaml)


def _train(run, ctxs, parallel, model_cfg, data_cfg, train_cfg, decode_cfg, data_dir, seed,
           config_yaml):
    """`train` on this process's devices ``ctxs``, holding the run directory when chief."""
    if not parallel.is_chief:
        quiet_log_files()
    seed_everything(seed)
    if parallel.is_chief:  # rank 0 prepares the run directory and the subword model first,
        # and chooses the precision (a resumed run's own, read before config.yaml is rewritten)
        precision = choose_precision(train_cfg.precision, ctxs,
                                     run.recorded_precision() if train_cfg.resume else None)
        corpus, train_pairs, model_cfg = prepare(run, data_cfg, model_cfg, train_cfg, data_dir,
                                                 seed, config_yaml, True)
        run.record_precision(precision)
    parallel.any(False)    # the others wait for it and load the cached subword model
    if not parallel.is_chief:
        corpus, train_pairs, model_cfg = prepare(run, data_cfg, model_cfg, train_cfg, data_dir,
                                                 seed, config_yaml, False)
        precision = choose_precision(train_cfg.precision, ctxs, run.recorded_precision())
    pieces = build_pieces(model_cfg, train_cfg, ctxs, parallel.trainer_kvstore, precision)
    fit = Fit(pieces, corpus, train_pairs, train_cfg, decode_cfg, run, parallel, seed)
    restored = train_cfg.resume and fit.restore()
    if train_cfg.resume and not restored:
        log.warning("train.resume=true but %s has no checkpoint yet: a new run starts there "
                    "(check hydra.run.dir if you meant to continue another)", run.path)
    log.info("model: %s parameters; %d training pairs; devices %s; worker %d of %d",
             f"{fit.model.count_parameters():,}", len(fit.train_src), ctxs, parallel.rank,
             parallel.num_workers)
    steps_before = fit.state.step
    train_minutes = fit.run()
    log.info("worker %d of %d: trained on %d sentences (ids digest %s) in %d steps; parameter "
             "digest %s", parallel.rank, parallel.num_workers, *fit_digests(fit))
    if not parallel.is_chief:
        return None
    report = run.report() if restored and fit.state.step == steps_before else None
    if report and report.get("steps") == fit.state.step:  # else it speaks of other weights
        log.info("%s had finished: nothing left to train, its report.json is kept", run.path)
        return report
    return final_report(fit, run, model_cfg, data_cfg, train_cfg, decode_cfg, train_minutes,
                        data_dir)


def test_sets(corpus, data_cfg, data_dir):
    """[(name, (sources, references) or None, why it is skipped or None)]: the corpus's test split,
    and for Multi30k every later test set that is available (in data.raw_dir or the data
    directory; downloaded when there is no local copy)."""
    sets = [(TEST_SPLIT, corpus.text[TEST_SPLIT], None)]
    if data_cfg.name != "multi30k":
        return sets
    for name in TEST_SETS[1:]:
        try:
            text = load_split(name, data_cfg.src_lang, data_cfg.tgt_lang, data_cfg.raw_dir,
                              data_dir, download=not data_cfg.raw_dir)
            sets.append((name, text, None))
        except DataError as err:
            sets.append((name, None, str(err)))
    return sets


def final_report(fit, run, model_cfg, data_cfg, train_cfg, decode_cfg, train_minutes, data_dir):
    """Choose the final checkpoint, translate every available test set (hypotheses into the run
    directory) and write report.json: ``scores`` has one entry per test set, ``{"skipped":
    reason}`` for those that are not available."""
    final = choose_final(fit)
    faults.point("final_translation")
    scores = {}
    for name, text, skipped in test_sets(fit.corpus, data_cfg, data_dir):
        if text is None:
            log.info("%s skipped: %s", name, skipped)
            scores[name] = {"skipped": skipped}
            continue
        hypotheses, scores[name] = translate_and_score(
            fit.model, fit.corpus.tokenizer, decode_cfg, fit.pieces.ctxs[0], *text,
            data_cfg.tgt_lang)
        atomic_write_text(run.path / f"{name}.hyp.{data_cfg.tgt_lang}",
                          "\n".join(hypotheses) + "\n", RESUME_HINT)
    report = {"src_lang": data_cfg.src_lang, "tgt_lang": data_cfg.tgt_lang,
              "data": data_cfg.name, "parameters": fit.model.count_parameters(),
              "model": dataclasses.asdict(model_cfg), "train_minutes": round(train_minutes, 2),
              "steps": fit.state.step, "epochs": fit.state.epoch, "final": final,
              "precision": fit.pieces.precision, "native_kernels": kernels.status(),
              "devices": [str(c) for c in fit.pieces.ctxs], "workers": fit.parallel.num_workers,
              "scores": scores}
    run.write_json("report.json", report, RESUME_HINT)  # resuming redoes only this report
    records = run.records.metrics()
    if records:
        learning_curve(records, run.path / "learning_curve.png")
    return report


def fit_digests(fit):
    """(training pairs this process trained on, counting repeats; sha256 of how often each pair
    was seen; steps; sha256 of the parameters): workers of one job compare them at the end."""
    import hashlib
    seen = hashlib.sha256(fit.times_seen.tobytes()).hexdigest()[:16]
    params = hashlib.sha256()
    for _, p in sorted(fit.model.collect_params().items()):
        params.update(p.data(fit.pieces.ctxs[0]).asnumpy().tobytes())
    return int(fit.times_seen.sum()), seen, fit.state.step, params.hexdigest()[:16]


def continue_training(model, corpus, data_cfg, train_cfg, decode_cfg, run_dir, ctx, seed):
    """Train ``model`` (e.g. a pruned one) further on ``corpus``'s training split in a new run
    directory; returns (the model the run chose, its choice)."""
    fit = new_fit(corpus, model.cfg, data_cfg, train_cfg, decode_cfg, run_dir, [ctx], seed)
    fit.run_dir.write_json("model.json", dataclasses.asdict(model.cfg))
    for name, param in fit.model._collect_params_with_prefix().items():
        param.set_data(model._collect_params_with_prefix()[name].data(ctx))
    fit.run()
    return fit.model, choose_final(fit)


def new_fit(corpus, model_cfg, data_cfg, train_cfg, decode_cfg, run_dir, ctxs, seed):
    """A `Fit` on this process's devices ``ctxs`` alone (no cluster), its run directory created
    and its model initialised from ``seed``: for fine-tuning, tests and benchmarks."""
    run = RunDir(run_dir)
    run.checkpoints.folder.mkdir(parents=True, exist_ok=True)
    seed_everything(seed)  # the initial parameters
    parallel = DataParallel(ctxs, train_cfg.kvstore)
    pieces = build_pieces(model_cfg, train_cfg, ctxs, parallel.trainer_kvstore)
    return Fit(pieces, corpus, corpus.train_pairs(data_cfg.max_pair_len), train_cfg, decode_cfg,
               run, parallel, seed)
