"""What stops training: the wall-clock budget (`Clock`) and Ctrl-C (`CtrlC`)."""
import signal
import threading
import time


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


class CtrlC:
    """While active (``with``), the first Ctrl-C (SIGINT) is only noted and acted on between
    steps (`check`): raised from a signal handler, it could land in an array's __del__, where
    Python drops it. A second one raises at once. Outside the main thread it does nothing."""

    def __init__(self):
        self.requested, self._previous = False, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    def _on_sigint(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def check(self):
        if self.requested:
            raise KeyboardInterrupt
