"""When the training loop checkpoints and where it resumes: a resume point (`latest`) every
`train.save_every_minutes`, at every epoch's end and at every validation, the validations'
checkpoints kept `train.keep_last` deep (at least `train.average_last`), `best`, and resume
from the newest intact one."""
import json
import logging
import time

from ..runs import faults
from ..errors import CheckpointError
from .state import TrainState

log = logging.getLogger(__name__)


def validated_name(state, by_updates):
    """The checkpoint name of a validation at ``state`` (a `TrainState`): step_NNNNNN when
    validating ``by_updates`` (`train.validate_every`), else epoch_NNN."""
    return f"step_{state.step:06d}" if by_updates else f"epoch_{state.epoch:03d}"


class Checkpointing:
    """Checkpoints of ``pieces`` (`build.Pieces`) in the `RunDir` ``run``."""

    def __init__(self, run, pieces, train_cfg):
        self.run, self.pieces, self.train_cfg = run, pieces, train_cfg
        self.store = run.checkpoints
        self.last_save = time.time()

    def due(self):
        """Is a mid-epoch resume point due (`train.save_every_minutes` since the last one)?"""
        return time.time() - self.last_save >= 60 * self.train_cfg.save_every_minutes

    def resume_point(self, state, name="latest", **meta):
        """Parameters, optimizer state and ``state`` as checkpoint ``name``; its manifest."""
        self.last_save = time.time()
        return self.store.save(name, self.pieces.model, self.pieces.trainer, state,
                               ema=self.pieces.ema, **meta)

    def validated(self, state, name, valid, improved):
        """A validation's checkpoint ``name`` (`validated_name`; `best` too when it
        ``improved``), then the resume point `latest`: last, so that a crash before it redoes
        the validation, links and all. Older validated checkpoints beyond `keep_last` go, with
        their files."""
        manifest = self.resume_point(state, name, valid=valid)
        if improved:
            self.store.link("best", manifest)
        faults.point("validated")
        self.store.link("latest", manifest)
        keep = max(self.train_cfg.keep_last, self.train_cfg.average_last, 1)
        self.store.drop(self.store.validated_names()[:-keep])
        self.store.collect_garbage()

    def at_log_point(self, state, minutes, parallel):
        """A resume point when one is due (all workers agree; rank 0 writes it)."""
        due = self.due()
        if parallel.distributed:
            due = parallel.any(due)
        if due:
            self.last_save = time.time()  # on every worker, so that they agree again next time
        if due and parallel.is_chief:
            state.minutes = minutes
            self.resume_point(state)

    def restore(self, parallel):
        """Load the newest intact resume point, `latest`, else the newest intact epoch checkpoint
        (a damaged one is skipped with a warning); returns its `TrainState`, or None when the run
        has no resume point yet (stopped before its first: it starts again). The workers of a
        cluster (``parallel``) first check that they all found the same one (files and state):
        a worker with a stale view of the run directory would diverge from the others."""
        found = self.newest_intact()
        what = found and [found[1]["sha256"], found[1]["state"]]
        if not parallel.same(json.dumps(what, sort_keys=True)):
            what = f"{found[0]} (step {found[1]['state']['step']})" if found else "no checkpoint"
            raise CheckpointError(
                f"worker {parallel.rank} found {what} in {self.run.path}, another worker another "
                f"one: every worker must see the run directory as rank 0 wrote it (a shared file "
                f"system's stale cache? another hydra.run.dir?); fix that, then resume again")
        if found is None:
            return None
        name, manifest = found
        state = TrainState.from_dict(manifest["state"])
        self.store.load(manifest, self.pieces.model, self.pieces.ctxs, self.pieces.trainer,
                        self.pieces.ema)
        log.info("resumed from %s (epoch %d, batch %d of the next, step %d)", name, state.epoch,
                 state.batch_in_epoch, state.step)
        return state

    def newest_intact(self):
        """(name, verified manifest) of the newest resume point whose files are whole and which
        holds a training state; None if the run has none; CheckpointError when it has some, all
        damaged."""
        names, problem = self.store.resume_points(), None
        for name in names:
            try:
                manifest = self.store.verify(name, self.pieces.model.cfg)
                if not isinstance(manifest.get("state"), dict):
                    raise CheckpointError(f"{name} holds no training state to resume from")
                TrainState.from_dict(manifest["state"])
                return name, manifest
            except CheckpointError as err:
                log.warning("skipping %s: %s", name, err)
                problem = problem or err  # the newest's
        if names:
            raise CheckpointError(f"{self.run.path}: none of its {len(names)} checkpoints can be "
                                  f"resumed (the newest: {problem}); resume with the run's own "
                                  f"settings, or start a new hydra.run.dir")
        return None
