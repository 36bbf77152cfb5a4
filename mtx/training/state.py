"""What resume needs, in one object: counters, the position inside the epoch, the best score and
the epoch's running loss. Saved in every checkpoint manifest and loaded as a whole; together
with the parameters and the optimizer state it continues a run exactly."""
import dataclasses
from dataclasses import dataclass
from typing import Optional

from ..errors import CheckpointError

SEED_STRIDE = 1000  # data order and dropout of epoch e come from seed * SEED_STRIDE + e


def epoch_seed(seed, epoch):
    """The seed of epoch ``epoch``'s batch order (the same in a resumed run)."""
    return seed * SEED_STRIDE + epoch


def position_seed(seed, epoch, batch_in_epoch):
    """The dropout seed from batch ``batch_in_epoch`` of epoch ``epoch`` on: reseeded after
    every step, so a run resumed at any step boundary draws the same dropout masks as the
    uninterrupted one."""
    return (epoch_seed(seed, epoch) * 1_000_003 + batch_in_epoch) % 2 ** 31


def validation_score(val_loss, bleu):
    """What picks the best epoch and the final checkpoint (higher is better): the val BLEU, or
    the negative val loss when BLEU is off (`train.eval_bleu=false`)."""
    return bleu["score"] if bleu else -val_loss


@dataclass
class TrainState:
    step: int = 0                   # updates done
    epoch: int = 0                  # epochs completed
    batch_in_epoch: int = 0         # batches of epoch `epoch + 1` already trained on
    best_score: Optional[float] = None  # best validation score (val BLEU, or -val loss)
    stale_epochs: int = 0           # epochs since best_score improved
    minutes: float = 0.0            # training minutes up to this checkpoint
    epoch_nll: float = 0.0          # the current epoch's finite nll sum, its tokens, and the
    epoch_tokens: int = 0           # steps it skipped (non-finite): its train/loss is exact
    epoch_skipped: int = 0          # after a resume too
    epoch_job_tokens: int = 0       # target tokens of the whole job this epoch, and the
    epoch_seconds: float = 0.0      # seconds they took (train/tok_s)
    epoch_resegmented: Optional[bool] = None  # its pairs cut anew (BPE-dropout); None: not yet
                                    # decided (where the epoch starts; a resume keeps it)

    @classmethod
    def from_dict(cls, values):
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(values, dict) or set(values) - names:
            raise CheckpointError("the checkpoint's training state is not one mtx writes; "
                                  "resume from another checkpoint")
        return cls(**values)

    def start_epoch(self):
        """Counters of a new epoch (after the previous one ended)."""
        self.batch_in_epoch = self.epoch_tokens = self.epoch_skipped = self.epoch_job_tokens = 0
        self.epoch_nll = self.epoch_seconds = 0.0
        self.epoch_resegmented = None

    def end_epoch(self, val_loss, bleu, minutes):
        """Score the finished epoch (val BLEU, or -val loss without BLEU: higher is better) ->
        (its metrics record, whether it is the best so far)."""
        score = validation_score(val_loss, bleu)
        improved = self.best_score is None or score > self.best_score
        self.best_score = score if improved else self.best_score
        self.stale_epochs = 0 if improved else self.stale_epochs + 1
        record = {"step": self.step, "epoch": self.epoch, "train/loss": round(self.epoch_loss, 4),
                  "valid/loss": round(val_loss, 4), "valid/bleu": bleu and bleu["score"],
                  "train/tok_s": round(self.epoch_job_tokens / max(self.epoch_seconds, 1e-9), 1),
                  "wall_minutes": round(minutes, 2)}
        return record, improved

    def early_stopped(self, patience):
        """At an epoch's end, ``patience`` (`train.patience`, 0: never) epochs without a better
        validation score?"""
        return bool(patience and self.stale_epochs >= patience and self.batch_in_epoch == 0)

    @property
    def epoch_loss(self):
        return self.epoch_nll / max(self.epoch_tokens, 1)
