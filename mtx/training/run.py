"""One training run end to end: data, the run directory, the pieces, the loop, the final
checkpoint choice and the test scores (report.json)."""
import contextlib
import dataclasses
import logging

from ..data.corpus import (
    TrainingPairs,
    load_corpus,
    load_tokenizer,
    save_tokenizer,
    tokenizer_file,
    tokenizer_sha256,
)
from ..data.vocabularies import source_vocab_size
from ..hardware.devices import resolve_device, seed_everything, use_numpy_interface
from ..errors import CheckpointError, ConfigError
from .parallel import DataParallel
from .precision import choose_precision
from ..runs.resume import check_identity, check_same_steps
from ..runs.runlock import RunLock
from ..runs.rundir import RunDir, run_identity
from .build import build_pieces
from .final import choose_final, final_report
from .loop import Fit
from .warm_start import check_model, load_weights, parent_run

log = logging.getLogger(__name__)


def quiet_log_files():
    """Workers other than rank 0 keep logging to the console but write no log file."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)
        handler.close()


def prepare(run, cfg, config_yaml, is_chief, parent=None):
    """The corpus, its `TrainingPairs` and the `RunConfig` ``cfg`` with the model's vocabulary
    size. A resumed run uses its own tokenizer, a new fine-tuning run its ``parent``'s
    (`warm_start.Parent`); a resumed run is checked against the run directory before anything
    in it is written."""
    data_cfg, model_cfg, train_cfg = cfg.data, cfg.model, cfg.train
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
    tokenizer = load_tokenizer(run.path) if resuming else parent and parent.tokenizer
    corpus = load_corpus(data_cfg, cfg.data_dir, cfg.seed, tokenizer)
    # none left: a ConfigError, before the run directory is written
    train_pairs = training_pairs(corpus, data_cfg)
    model_cfg = dataclasses.replace(model_cfg, vocab_size=len(corpus.tokenizer),
                                    src_vocab_size=source_vocab_size(corpus.tokenizer))
    if parent is not None and not resuming:
        check_model(parent, model_cfg)
    identity = run_identity(model_cfg, data_cfg, tokenizer_sha256(corpus.tokenizer))
    started_from = parent.described() if parent else resuming and run.started_from()
    if data_cfg.name == "files":  # each corpus's pairs, weight, tag and pairs an epoch
        identity["corpora"] = corpus.mix.record()
    if started_from:  # a resume without init_from= continues where the run started
        identity["init_from"] = started_from
    if resuming:
        check_identity(run, identity)
        check_same_steps(run, config_yaml)
    if is_chief:
        run.start(identity, model_cfg, data_cfg, config_yaml)
        save_tokenizer(corpus.tokenizer, run.path)
    return corpus, train_pairs, dataclasses.replace(cfg, model=model_cfg)


def train(cfg, run_dir, config_yaml=None):
    """Train the `RunConfig` ``cfg``, pick the final checkpoint, translate the test splits;
    returns report.json's dict (None on workers other than rank 0, which only train).
    ``config_yaml``: the resolved config to keep in the run directory as config.yaml (None:
    ``cfg``'s keys), which a resume is checked against and mtx-heads reads."""
    use_numpy_interface()  # a program calling this has not switched it on (the commands have)
    if config_yaml is None:
        from omegaconf import OmegaConf
        config_yaml = OmegaConf.to_yaml(OmegaConf.create(cfg.as_keys()))
    run = RunDir(run_dir)
    parent = parent_run(cfg.init_from, cfg.data) if cfg.init_from else None
    # a GPU that is not there, or has no kernels, is a config error before any work
    ctxs = [resolve_device(d) for d in (cfg.train.devices or [cfg.device])]
    parallel = DataParallel(ctxs, cfg.train.kvstore)
    # rank 0 is the run directory's one writer for the whole run (a second training is refused)
    with RunLock(run.path) if parallel.is_chief else contextlib.nullcontext():
        return _train(run, ctxs, parallel, cfg, config_yaml, parent)


def _train(run, ctxs, parallel, cfg, config_yaml, parent):
    """`train` on this process's devices ``ctxs``, holding the run directory when chief."""
    if not parallel.is_chief:
        quiet_log_files()
    seed_everything(cfg.seed)
    resume = cfg.train.resume
    if parallel.is_chief:  # rank 0 prepares the run directory and the subword model first,
        # and chooses the precision (a resumed run's own, read before config.yaml is rewritten)
        precision = choose_precision(cfg.train.precision, ctxs,
                                     run.recorded_precision() if resume else None)
        corpus, train_pairs, cfg = prepare(run, cfg, config_yaml, True, parent)
        run.record_precision(precision)
    parallel.any(False)    # the others wait for it and load the cached subword model
    if not parallel.is_chief:
        corpus, train_pairs, cfg = prepare(run, cfg, config_yaml, False, parent)
        precision = choose_precision(cfg.train.precision, ctxs, run.recorded_precision())
    pieces = build_pieces(cfg.model, cfg.train, ctxs, parallel.trainer_kvstore, precision)
    fit = Fit(pieces, corpus, train_pairs, cfg, run, parallel)
    restored = resume and fit.restore()
    if parent is not None and not restored:
        load_weights(parent, fit.model, ctxs)
    if resume and not restored:
        log.warning("train.resume=true but %s has no checkpoint yet: a new run starts there "
                    "(check hydra.run.dir if you meant to continue another)", run.path)
    log.info("model: %s parameters; %d training pairs; devices %s; worker %d of %d",
             f"{fit.model.count_parameters():,}", len(fit.train_pairs), ctxs, parallel.rank,
             parallel.num_workers)
    steps_before = fit.state.step
    with fit.stop_signals:  # from the first step to the last test set
        train_minutes = fit.run()
        log.info("worker %d of %d: trained on %d sentences (ids digest %s) in %d steps; "
                 "parameter digest %s", parallel.rank, parallel.num_workers, *fit_digests(fit))
        if not parallel.is_chief:
            return None
        report = run.report() if restored and fit.state.step == steps_before else None
        if report and report.get("steps") == fit.state.step:  # else it speaks of other weights
            log.info("%s had finished: nothing left to train, its report.json is kept", run.path)
            return report
        return final_report(fit, run, train_minutes)


def fit_digests(fit):
    """(training pairs this process trained on, counting repeats; sha256 of how often each pair
    was seen; steps; sha256 of the parameters): workers of one job compare them at the end."""
    import hashlib
    seen = hashlib.sha256(fit.times_seen.tobytes()).hexdigest()[:16]
    params = hashlib.sha256()
    for _, p in sorted(fit.model.collect_params().items()):
        params.update(p.data(fit.pieces.ctxs[0]).asnumpy().tobytes())
    return int(fit.times_seen.sum()), seen, fit.state.step, params.hexdigest()[:16]


def continue_training(model, corpus, cfg, run_dir, ctx, teacher=None):
    """Train ``model`` (e.g. a pruned one) further on ``corpus``'s training split in a new run
    directory, with the `RunConfig` ``cfg`` (its model: ``model.cfg``) and distilling from a
    `regularisers.Teacher` when given; returns (the model the run chose, its choice)."""
    fit = new_fit(corpus, dataclasses.replace(cfg, model=model.cfg), run_dir, [ctx], teacher)
    fit.run_dir.write_model_config(model.cfg)
    for name, param in fit.model._collect_params_with_prefix().items():
        param.set_data(model._collect_params_with_prefix()[name].data(ctx))
    fit.run()
    return fit.model, choose_final(fit)


def new_fit(corpus, cfg, run_dir, ctxs, teacher=None):
    """A `Fit` of the `RunConfig` ``cfg`` (its model config with the vocabulary size) on this
    process's devices ``ctxs`` alone (no cluster), its run directory created and its model
    initialised from ``cfg.seed``, distilling from ``teacher`` (a `regularisers.Teacher`) when
    given: for fine-tuning, tests and benchmarks."""
    run = RunDir(run_dir)
    run.checkpoints.folder.mkdir(parents=True, exist_ok=True)
    seed_everything(cfg.seed)  # the initial parameters
    parallel = DataParallel(ctxs, cfg.train.kvstore)
    pieces = build_pieces(cfg.model, cfg.train, ctxs, parallel.trainer_kvstore, teacher=teacher)
    return Fit(pieces, corpus, training_pairs(corpus, cfg.data), cfg, run, parallel)


def training_pairs(corpus, data_cfg):
    """``corpus``'s training split as the `TrainingPairs` of ``data_cfg``."""
    return TrainingPairs(corpus, data_cfg.max_pair_len, data_cfg.subword_dropout,
                         data_cfg.subword_dropout_from)
