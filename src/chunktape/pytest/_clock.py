"""Each ``tape`` test's loop: chunktape's clock, real until the test's settings ask for virtual time.

pytest-asyncio (1.4 or later) asks plugins which loop an async test runs on (``pytest_asyncio_loop_factories``).
For a test that uses ``tape`` the plugin answers ``loop_factory``: a ``VirtualTimeLoop`` on the real clock. The
``tape`` fixture then reads the test's settings (the marker, ``tape_config``, the ini, the fault matrix) and, if
they want virtual time, turns the clock on for the test (``virtual_time()``): on the loop about to be made for
it, and on any chunktape loop already open (one a module or a session shares), for the test's length. Settings
from a fixture are known only at set-up, long after collection: that is why the choice is made there.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator

from chunktape._virtual_time import VirtualTimeLoop

__all__ = ["loop_factory", "virtual_time"]

_loops: weakref.WeakSet[VirtualTimeLoop] = weakref.WeakSet()
_next_virtual = False
"""Whether the next loop ``loop_factory`` makes starts on the virtual clock (set while a test wants it)."""


def loop_factory() -> VirtualTimeLoop:
    """The loop of a ``tape`` test: virtual when the running ``tape`` fixture asked for it, else real."""
    loop = VirtualTimeLoop(virtual=_next_virtual)
    _loops.add(loop)
    return loop


@contextlib.contextmanager
def virtual_time() -> Iterator[None]:
    """Virtual time for the test being set up: its loop, made after this, and the open chunktape loops."""
    global _next_virtual
    switched = [loop for loop in _loops if not loop.is_closed() and not loop.virtual]
    for loop in switched:
        loop.virtual = True
    _next_virtual = True
    try:
        yield
    finally:
        _next_virtual = False
        for loop in switched:
            if not loop.is_closed():
                loop.virtual = False
