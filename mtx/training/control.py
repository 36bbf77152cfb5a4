"""What stops training: the wall-clock budget (`Clock`) and the stop signals (`StopSignals`):
Ctrl-C, and the SIGTERM or SIGUSR1 a scheduler sends before it pre-empts a job."""
import logging
import signal
import threading
import time

from ..errors import Preempted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)
log = logging.getLogger(__name__)


class Clock:
    """Training minutes of a run, those before a resume included, against `train.max_minutes`."""

    def __init__(self, max_minutes, minutes_before=0.0):
        self.max_minutes, self.minutes_before, self.started = max_minutes, minutes_before, time.time()

    def minutes(self):
        return self.minutes_before + (time.time() - self.started) / 60

    def out_of_time(self, minutes=None):
        """Is the budget spent, now or at ``minutes`` (a reading already recorded)?"""
        minutes = self.minutes() if minutes is None else minutes
        return self.max_minutes is not None and minutes >= self.max_minutes


class StopSignals:
    """While active (``with``; re-entrant), the first Ctrl-C (SIGINT), SIGTERM or SIGUSR1 is only
    noted (`received`): the training loop saves a resume point at its next step boundary and then
    calls `stop`, which raises KeyboardInterrupt for Ctrl-C and `Preempted` for the others.
    Raised from a signal handler, the exception could land in an array's __del__, where Python
    drops it, or between a checkpoint's files. A second signal raises at once. Outside the main
    thread it does nothing."""

    def __init__(self):
        self.received, self._previous, self._depth = None, {}, 0

    def __enter__(self):
        self._depth += 1
        if self._depth == 1 and threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            for number, handler in self._previous.items():
                signal.signal(number, handler)
            self._previous = {}

    def _on_signal(self, number, frame):
        if self.received is not None:
            raise self._exception(number, "a second stop signal")
        self.received = signal.Signals(number)

    def requested(self, parallel, at_log_point=True):
        """Has a stop signal arrived? One process checks after every step; the workers of a
        cluster (`DataParallel` ``parallel``) agree at log points and epoch ends, where all of
        them are."""
        if parallel.distributed:
            return at_log_point and parallel.any(self.received is not None)
        return self.received is not None

    def stop(self, saved):
        """Log and raise the received signal's exception (another worker's, when this one
        received none); ``saved`` says where the run continues (the exception's message)."""
        log.warning("stopped: %s", saved)
        raise self._exception(self.received, saved)

    @staticmethod
    def _exception(number, saved):
        if number == signal.SIGINT:
            return KeyboardInterrupt()
        name = signal.Signals(number).name if number is not None else "another worker's signal"
        return Preempted(f"stopped by {name}: {saved}")


def budget_spent(train_cfg, state, clock, parallel, num_batches):
    """The fraction of the training budget spent (`budget_fraction`), read where the epoch starts
    and at log points, and only where something depends on it: a `train.cooldown` (the learning
    rate) or a term of the loss that needs the budget (`mtx.training.terms.BUDGET`, e.g. R-Drop
    from `train.rdrop_from` on; then the training depends on the clock: a resumed run is exact
    up to it); 0.0 otherwise."""
    from .regularisers import terms_of
    from .terms import BUDGET, needed
    if not (train_cfg.cooldown or needed(terms_of(train_cfg), BUDGET)):
        return 0.0
    return budget_fraction(train_cfg, state, clock, parallel, num_batches)


def budget_fraction(train_cfg, state, clock, parallel, num_batches):
    """The fraction of the training budget spent (0 to 1, the same on every worker) at ``state``
    (`TrainState`) in an epoch of ``num_batches``: of `train.max_epochs` or of
    `train.max_minutes`, whichever is further on."""
    epochs = (state.epoch + state.batch_in_epoch / max(num_batches, 1)) / train_cfg.max_epochs
    minutes = clock.minutes() / train_cfg.max_minutes if train_cfg.max_minutes else 0.0
    return min(1.0, max(epochs, parallel.mean(minutes)))
