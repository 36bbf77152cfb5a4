"""The end of a run: the final checkpoint (the best validated one, or the average of the last
ones) and the report on every available test set (report.json), which a stop signal can
interrupt between test sets and a resumed run continues (`PARTIAL_REPORT`)."""
import dataclasses
import logging

from ..runs import faults
from .. import kernels
from ..runs.checkpoints import RESUME_HINT, save_average
from ..errors import CheckpointError, DataError
from ..decoding.evaluation import translate_and_score
from ..files import atomic_write_text, read_json
from ..data.multi30k import TEST_SETS, load_split
from ..runs.pictures import learning_curve
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
    validated checkpoints if that scores at least as well. Leaves the choice loaded in the model."""
    store, ctxs = fit.run_dir.checkpoints, fit.pieces.ctxs
    store.load(store.verify("best", fit.model.cfg), fit.model, ctxs)
    best_loss, best_bleu = fit.evaluate("val")
    best = validation_score(best_loss, best_bleu)
    average_last = fit.cfg.train.average_last
    last = (intact(store, store.validated_names()[-average_last:], fit.model.cfg)
            if average_last > 1 else [])
    if len(last) > 1:
        save_average(store, fit.model, last, ctxs)
        avg_loss, avg_bleu = fit.evaluate("val")
        average = validation_score(avg_loss, avg_bleu)
        log.info("validation score: best checkpoint %s, average of the last %d %s", best, len(last),
                 average)
        if average >= best:
            return {"checkpoint": "average", "averaged": len(last), "valid_bleu": avg_bleu,
                    "valid_loss": round(avg_loss, 4)}
        store.load(store.verify("best", fit.model.cfg), fit.model, ctxs)
    return {"checkpoint": "best", "valid_bleu": best_bleu, "valid_loss": round(best_loss, 4)}


def test_sets(corpus, data_cfg, data_dir):
    """[(name, (sources, references) or None, why it is skipped or None)]: the corpus's test sets
    (data.test of data=files), and for Multi30k every later test set that is available (in
    data.raw_dir or the data directory; downloaded when there is no local copy)."""
    sets = [(name, corpus.text[name], None) for name in corpus.test_names]
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


def final_report(fit, run, train_minutes):
    """Choose the final checkpoint, translate every available test set (hypotheses into the run
    directory) and write report.json: ``scores`` has one entry per test set, ``{"skipped":
    reason}`` for those that are not available. A stop signal is acted on after the choice and
    after each test set, all kept in `PARTIAL_REPORT`: the resumed run goes on from there."""
    data_cfg = fit.cfg.data
    done = partial_report(fit, run)
    final = done.get("final") or choose_final(fit)
    scores = done.get("scores", {})
    stop_point(fit, run, final, scores)
    for name, text, skipped in test_sets(fit.corpus, data_cfg, fit.cfg.data_dir):
        if name in scores:
            continue
        if text is None:
            log.info("%s skipped: %s", name, skipped)
            scores[name] = {"skipped": skipped}
            continue
        faults.point("final_translation")
        hypotheses, scores[name] = translate_and_score(
            fit.model, fit.corpus.tokenizer, fit.cfg.decode, fit.pieces.ctxs[0], *text,
            data_cfg.tgt_lang, data_cfg.bleu_tokenize)
        atomic_write_text(run.path / f"{name}.hyp.{data_cfg.tgt_lang}",
                          "\n".join(hypotheses) + "\n", RESUME_HINT)
        stop_point(fit, run, final, scores)
    report = {"src_lang": data_cfg.src_lang, "tgt_lang": data_cfg.tgt_lang,
              "data": data_cfg.name, "parameters": fit.model.count_parameters(),
              "model": dataclasses.asdict(fit.cfg.model), "train_minutes": round(train_minutes, 2),
              "steps": fit.state.step, "epochs": fit.state.epoch, "final": final,
              "precision": fit.pieces.precision, "native_kernels": kernels.status(),
              "devices": [str(c) for c in fit.pieces.ctxs], "workers": fit.parallel.num_workers,
              "init_from": run.started_from(), "scores": scores}
    run.write_json("report.json", report, RESUME_HINT)  # resuming redoes only this report
    (run.path / PARTIAL_REPORT).unlink(missing_ok=True)
    records = run.records.metrics()
    if records:
        learning_curve(records, run.path / "learning_curve.png")
    return report


PARTIAL_REPORT = "report.partial.json"  # the final report so far: its choice, test sets done


def partial_report(fit, run):
    """What a stopped final report had done for these weights ({} if nothing), its chosen
    checkpoint loaded into the model again."""
    path = run.path / PARTIAL_REPORT
    done = read_json(path, CheckpointError, "partial report") if path.is_file() else {}
    if not isinstance(done, dict) or done.get("steps") != fit.state.step:
        return {}
    store = run.checkpoints
    store.load(store.verify(done["final"]["checkpoint"], fit.model.cfg), fit.model,
               fit.pieces.ctxs)
    log.info("the final report goes on after %s", ", ".join(["the checkpoint choice",
                                                             *done["scores"]]))
    return done


def stop_point(fit, run, final, scores):
    """Keep the final report so far; a stop signal that arrived stops the run here."""
    run.write_json(PARTIAL_REPORT, {"steps": fit.state.step, "final": final, "scores": scores},
                   RESUME_HINT)
    if fit.stop_signals.received is not None:  # rank 0 alone: the other workers have ended
        fit.stop_here()
