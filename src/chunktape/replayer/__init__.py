"""Replay: an adapter that plays recorded interactions back, with the chosen timing and faults."""

from chunktape.faults.plan import ActiveFault, FaultPlan
from chunktape.replayer.replaying import ReplayAdapter
from chunktape.timing import SleepCappedWarning, Timing

__all__ = ["ActiveFault", "FaultPlan", "ReplayAdapter", "SleepCappedWarning", "Timing"]
