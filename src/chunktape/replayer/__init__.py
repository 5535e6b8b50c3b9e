"""Replay: an adapter that plays recorded interactions back, with the chosen timing."""

from chunktape.replayer.replaying import FaultPlan, FaultPlanner, ReplayAdapter
from chunktape.replayer.timing import Timing

__all__ = ["FaultPlan", "FaultPlanner", "ReplayAdapter", "Timing"]
