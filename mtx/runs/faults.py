"""Fault injection for the crash tests: ``MTX_KILL_AT=<point>:<n>[:<SIGNAL>]`` sends this
process SIGKILL (or the signal named, e.g. SIGTERM; RAISE: raises `InjectedFault` in the thread
instead; SLEEP<seconds>, e.g. SLEEP8: the thread stalls that long) the n-th time it reaches
`point(<point>)`.
Points: ``step`` (after a training step is queued), ``checkpoint`` (a checkpoint's data files
written, its manifest not yet), ``validated`` (a validation's checkpoints written, the resume
point `latest` not yet), ``evaluation`` (inside an evaluation on val: at each validation, then
those of the final checkpoint choice), ``final_translation`` (before translating each test set at the
end), ``export_staged`` (a new export whole beside ``output=``, not yet in its place),
``export_replaced`` (in its place, the earlier export not yet deleted), ``model_round`` (each
round of mtx-serve's model thread), ``queue_locked`` (mtx-serve's request queue, its lock held),
``request`` (each request mtx-serve's app handles; RAISE quotes its path, as a bug's message
may quote a request). Unset, a point costs one dictionary lookup."""
import os
import signal
import time

_arrivals = {}


def point(name, detail=None):
    target = os.environ.get("MTX_KILL_AT")
    if not target:
        return
    where, _, rest = target.partition(":")
    if where != name:
        return
    count, _, signal_name = rest.partition(":")
    _arrivals[name] = _arrivals.get(name, 0) + 1
    if _arrivals[name] == int(count or 1):
        if signal_name == "RAISE":  # an error in the thread that reached the point
            raise InjectedFault(f"MTX_KILL_AT={target}"
                                + ("" if detail is None else f" at {detail}"))
        if signal_name.startswith("SLEEP"):  # a thread that is alive but makes no progress
            time.sleep(float(signal_name[len("SLEEP"):]))
            return
        os.kill(os.getpid(), signal.Signals[signal_name or "SIGKILL"])


class InjectedFault(RuntimeError):
    """What ``MTX_KILL_AT=<point>:<n>:RAISE`` raises at the point."""
