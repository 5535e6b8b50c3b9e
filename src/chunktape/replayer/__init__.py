"""Replay: an adapter that plays recorded interactions back, with the chosen timing and faults.

``Playback`` is the engine under it (and under ``ReplayServer`` and ``ReplayTransport``, whose ``adapter`` is
one); ``ReplayCall`` and ``Hold`` are what its ``open()`` returns.
"""

from chunktape._playback import Hold, Playback, ReplayCall
from chunktape.faults.plan import ActiveFault, FaultPlan
from chunktape.replayer.replaying import ReplayAdapter
from chunktape.timing import SleepCappedWarning, Timing

__all__ = [
    "ActiveFault",
    "FaultPlan",
    "Hold",
    "Playback",
    "ReplayAdapter",
    "ReplayCall",
    "SleepCappedWarning",
    "Timing",
]
