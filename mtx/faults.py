"""Fault injection for the crash tests: ``MTX_KILL_AT=<point>:<n>`` kills this process with
SIGKILL the n-th time it reaches `point(<point>)`. Points: ``step`` (after a training step is
queued), ``checkpoint`` (a checkpoint's data files written, its manifest not yet), ``epoch_end`` (an
epoch's checkpoints written, the resume point `latest` not yet),
``evaluation`` (inside the end-of-epoch evaluation), ``final_translation`` (while translating the
test split at the end), ``export_staged`` (a new export whole beside ``output=``, not yet in its
place), ``export_replaced`` (in its place, the earlier export not yet deleted). Unset, a point costs one dictionary lookup."""
import os
import signal

_arrivals = {}


def point(name):
    target = os.environ.get("MTX_KILL_AT")
    if not target:
        return
    where, _, count = target.partition(":")
    if where != name:
        return
    _arrivals[name] = _arrivals.get(name, 0) + 1
    if _arrivals[name] == int(count or 1):
        os.kill(os.getpid(), signal.SIGKILL)
