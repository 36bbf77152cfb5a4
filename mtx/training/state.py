"""What resume needs, in one object: counters, the position inside the epoch, the best score,
the last validation and the running losses. Saved in every checkpoint manifest and loaded as a
whole; together with the parameters and the optimizer state it continues a run exactly.

A run validates at every epoch's end, or with `train.validate_every` every that many updates
(and at the end) whatever the epochs: the best score, patience and the metrics records count
validations either way."""
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
    stale_validations: int = 0      # validations since best_score improved
    validated_step: Optional[int] = 0   # the step of the last validation (None: unknown, a
                                    # checkpoint written before validations were counted so)
    minutes: float = 0.0            # training minutes up to this checkpoint
    epoch_nll: float = 0.0          # the current epoch's finite nll sum, its tokens, and the
    epoch_tokens: int = 0           # steps it skipped (non-finite): its train/loss is exact
    epoch_skipped: int = 0          # after a resume too
    epoch_job_tokens: int = 0       # target tokens of the whole job this epoch, and the
    epoch_seconds: float = 0.0      # seconds they took (train/tok_s)
    epoch_resegmented: Optional[bool] = None  # its pairs cut anew (BPE-dropout); None: not yet
                                    # decided (where the epoch starts; a resume keeps it)
    interval_nll: float = 0.0       # since the last validation (across epochs): the finite nll
    interval_tokens: int = 0        # sum and its tokens, the job's target tokens and their
    interval_job_tokens: int = 0    # seconds: a validation record's train/loss and tok/s
    interval_seconds: float = 0.0   # with train.validate_every

    # {old name: name} of fields renamed: the checkpoints written before still resume
    RENAMED = {"stale_epochs": "stale_validations"}

    @classmethod
    def from_dict(cls, values):
        names = {f.name for f in dataclasses.fields(cls)}
        if isinstance(values, dict):
            values = {cls.RENAMED.get(k, k): v for k, v in values.items()}
        if not isinstance(values, dict) or set(values) - names:
            raise CheckpointError("the checkpoint's training state is not one mtx writes; "
                                  "resume from another checkpoint")
        if "validated_step" not in values:  # written when every epoch's end validated
            values["validated_step"] = values.get("step", 0) if not values.get(
                "batch_in_epoch") else None
        return cls(**values)

    def epoch_totals(self):
        """(nll, tokens, job tokens, seconds) of the epoch so far, as `count_interval` reads them."""
        return self.epoch_nll, self.epoch_tokens, self.epoch_job_tokens, self.epoch_seconds

    def count_interval(self, before):
        """Add what the epoch's sums grew by since ``before`` (`epoch_totals` then) to the sums
        since the last validation."""
        grown = [now - then for now, then in zip(self.epoch_totals(), before)]
        self.interval_nll += grown[0]
        self.interval_tokens += grown[1]
        self.interval_job_tokens += grown[2]
        self.interval_seconds += grown[3]

    def start_epoch(self):
        """Counters of a new epoch (after the previous one ended)."""
        self.batch_in_epoch = self.epoch_tokens = self.epoch_skipped = self.epoch_job_tokens = 0
        self.epoch_nll = self.epoch_seconds = 0.0
        self.epoch_resegmented = None

    def end_epoch(self, val_loss, bleu, minutes):
        """Score the finished epoch's validation -> (its metrics record, whether it is the best
        so far); the record's train/loss and tok/s are the epoch's."""
        improved = self.score(val_loss, bleu)
        record = {"step": self.step, "epoch": self.epoch, "train/loss": round(self.epoch_loss, 4),
                  "valid/loss": round(val_loss, 4), "valid/bleu": bleu and bleu["score"],
                  "train/tok_s": round(self.epoch_job_tokens / max(self.epoch_seconds, 1e-9), 1),
                  "wall_minutes": round(minutes, 2)}
        return record, improved

    def end_interval(self, val_loss, bleu, minutes):
        """Score a validation of `train.validate_every` -> (its metrics record, whether it is
        the best so far); the record's epoch is the one it is in (from 1), its train/loss and
        tok/s those of the steps since the previous validation (which then start again)."""
        record = {"step": self.step, "epoch": self.epoch + (1 if self.batch_in_epoch else 0),
                  "train/loss": round(self.interval_nll / max(self.interval_tokens, 1), 4),
                  "valid/loss": round(val_loss, 4), "valid/bleu": bleu and bleu["score"],
                  "train/tok_s": round(self.interval_job_tokens
                                       / max(self.interval_seconds, 1e-9), 1),
                  "wall_minutes": round(minutes, 2)}
        return record, self.score(val_loss, bleu)

    def score(self, val_loss, bleu):
        """Count a validation at this step (val BLEU, or -val loss without BLEU: higher is
        better); whether it is the best so far."""
        score = validation_score(val_loss, bleu)
        improved = self.best_score is None or score > self.best_score
        self.best_score = score if improved else self.best_score
        self.stale_validations = 0 if improved else self.stale_validations + 1
        self.validated_step = self.step
        self.interval_nll = self.interval_seconds = 0.0
        self.interval_tokens = self.interval_job_tokens = 0
        return improved

    def early_stopped(self, patience):
        """At a validation, ``patience`` (`train.patience`, 0: never) validations without a
        better score?"""
        at_validation = (self.step == self.validated_step if self.validated_step is not None
                         else self.batch_in_epoch == 0)
        return bool(patience and self.stale_validations >= patience and at_validation)

    def metrics_kept(self, record):
        """Whether a metrics record (`end_epoch`, `end_interval`) belongs to the run up to this
        state: a resume drops those of validations it did not save."""
        if self.validated_step is None:
            return record["epoch"] <= self.epoch
        return record["step"] <= self.validated_step

    @property
    def epoch_loss(self):
        return self.epoch_nll / max(self.epoch_tokens, 1)
