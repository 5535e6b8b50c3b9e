"""Replay: an adapter that plays recorded interactions back, with the chosen timing and faults.

``Playback`` is the engine under it (and under ``ReplayServer`` and ``ReplayTransport``, whose ``adapter`` is
one); ``ReplayCall`` and ``Hold`` are what its ``open()`` returns.
"""

from chunktape._replayer.adapter import ReplayAdapter
from chunktape._replayer.playback import Hold, Playback, ReplayCall
from chunktape._replayer.timing import SleepCappedWarning, Timing
from chunktape.faults._plan import ActiveFault, FaultPlan

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
