"""When the training loop checkpoints and where it resumes: a resume point (`latest`) every
`train.save_every_minutes` and at every epoch's end, epoch checkpoints kept `train.keep_last`
deep (at least `train.average_last`), `best`, and resume from the newest intact one."""
import logging
import time

from .. import faults
from ..errors import CheckpointError
from .state import TrainState

log = logging.getLogger(__name__)


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

    def epoch_end(self, state, valid, improved):
        """A finished epoch as `epoch_NNN` (and `best` when it ``improved``), then as the resume
        point `latest`: last, so that a crash before it redoes the epoch's end, links and all.
        Older epochs beyond `keep_last` go, with their files."""
        manifest = self.resume_point(state, f"epoch_{state.epoch:03d}", valid=valid)
        if improved:
            self.store.link("best", manifest)
        faults.point("epoch_end")
        self.store.link("latest", manifest)
        keep = max(self.train_cfg.keep_last, self.train_cfg.average_last, 1)
        self.store.drop(self.store.epoch_names()[:-keep])
        self.store.collect_garbage()

    def at_log_point(self, state, minutes, parallel):
        """A resume point when one is due (all workers agree; rank 0 writes it)."""
        due = self.due()
        if parallel.distributed:
            due = parallel.any(due)
        if due and parallel.is_chief:
            state.minutes = minutes
            self.resume_point(state)

    def interrupted(self, step):
        """The model at Ctrl-C, as checkpoint `interrupted` (not a resume point)."""
        self.store.save("interrupted", self.pieces.model, ema=self.pieces.ema, step=step)
        where = ("continues from the last resume point" if self.store.resume_points() else
                 "starts it again (no resume point yet: the first comes after "
                 "train.save_every_minutes)")
        log.warning("interrupted at step %d: the model is checkpoint 'interrupted'; "
                    "train.resume=true hydra.run.dir=%s %s", step, self.run.path, where)

    def restore(self):
        """Load the newest intact resume point, `latest`, else the newest intact epoch checkpoint
        (a damaged one is skipped with a warning); returns its `TrainState`, or None when the run
        has no resume point yet (stopped before its first: it starts again)."""
        model = self.pieces.model
        names, problem = self.store.resume_points(), None
        for name in names:
            try:
                manifest = self.store.verify(name, model.cfg)
                if not isinstance(manifest.get("state"), dict):
                    raise CheckpointError(f"{name} holds no training state to resume from")
                state = TrainState.from_dict(manifest["state"])
                self.store.load(manifest, model, self.pieces.ctxs, self.pieces.trainer,
                                self.pieces.ema)
            except CheckpointError as err:
                log.warning("skipping %s: %s", name, err)
                problem = problem or err  # the newest's
                continue
            log.info("resumed from %s (epoch %d, batch %d of the next, step %d)", name,
                     state.epoch, state.batch_in_epoch, state.step)
            return state
        if names:
            raise CheckpointError(f"{self.run.path}: none of its {len(names)} checkpoints can be "
                                  f"resumed (the newest: {problem}); resume with the run's own "
                                  f"settings, or start a new hydra.run.dir")
        return None
