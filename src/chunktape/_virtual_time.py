"""The looptime event loop that chunktape's own virtual-time runs use: the fault search, ``demo``, ``play --instant``.

Every sleep and timeout passes at once in loop time. ``noop_cycles=0``: looptime's default spins 42 idle loop
passes before each jump of the clock, a grace of well under a millisecond for outside I/O to arrive. Code on a
replay does no outside I/O, so with no handle ready no coroutine can run: the passes change nothing (the same
schedules, outputs and virtual times, checked), yet they were most of a fault-search run's CPU and half the demo's.
"""

from __future__ import annotations

import asyncio

__all__ = ["replay_loop"]


def replay_loop(*, end: float | None = None) -> asyncio.AbstractEventLoop:
    """A fresh looptime loop at loop time 0 (``end``: the loop time at which it stops any run still going)."""
    import looptime  # it imports pytest: only for the runs in loop time

    return looptime.new_event_loop(start=0, end=end, noop_cycles=0)
