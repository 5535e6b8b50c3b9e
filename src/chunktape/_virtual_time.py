"""Virtual time: an event loop whose clock jumps over the waits that nothing outside the loop can end sooner.

chunktape runs the fault matrix, the fault search, ``demo`` and ``play --instant`` on it, so a 30 s stall or a 60 s
Retry-After costs no wall time while every timeout still fires in the order it would. The clock jumps to the next
timer only when nothing else can happen first: no callback is ready, no executor job is running, and no socket is
waited on. While a socket is waited on (a reply on its way from a server thread, a live provider) the clock runs at
the real pace, so a client's read timeout never fires before a reply that is coming. looptime, which jumps whenever
the loop is idle, fires it; its pytest plugin also breaks suites that run without pytest-asyncio, which is why
chunktape keeps its own clock rather than depending on it.

A server in this process that holds a connection silent on purpose (a replay server playing a stall) says so with
``silent_for()``: a socket whose peer is silent that way no longer holds the clock, which then jumps to the earlier of
the silence's end and the loop's next timer, as a real client would see it in real time. A server that answers one
client per task marks the task with ``serving(client)``; every ``pause()`` made in it (the replay engine's timed
waits, a fault's stall or latency) is then such a declared silence towards that client, and a plain sleep elsewhere.
A wait that ends a stream at a time (a disconnect after so many seconds) is ``cut_at(when)``: a pause that would
outlast it is a silence up to ``when`` only, then raises ``CutShort``, so its client's clock jumps to the cut too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

__all__ = ["CutShort", "VirtualTimeLoop", "cut_at", "now", "pause", "replay_loop", "serving", "silent_for"]

Address = tuple[str, int]
_T = TypeVar("_T")

_REAL_SLICE = 0.005
"""The longest real wait on outside I/O before the loop looks again whether it may jump (seconds)."""


class Silence:
    """A server's declared silence towards one client, ``seconds`` long; a virtual-time client may end it sooner."""

    def __init__(self, client: Address, seconds: float, wake: Callable[[], None]) -> None:
        self.client = client
        self.seconds = seconds
        self._wake = wake
        self.declared = time.monotonic()
        """When it was declared (real time): it holds only a connection the client made before that."""
        self.ends_at: float | None = None
        """The end on the clock of the loop that waits on it, pinned when that loop first sees it."""
        self.ended = False
        """Whether that loop's clock reached the end: the server goes on, and its client waits on real I/O again."""

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._wake()


_LOCK = threading.Lock()
_SILENCES: dict[Address, Silence] = {}
"""The connections servers of this process hold silent, by the client's address (at most one each)."""


async def silent_for(seconds: float, client: Address | None) -> None:
    """A server's wait of ``seconds`` towards ``client`` (its address as the server sees it; None: unknown), which a
    virtual-time client in this process ends as soon as its own clock has passed them."""
    if client is None or seconds <= 0:
        await asyncio.sleep(max(seconds, 0))
        return
    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not woken.done():
            woken.set_result(None)

    def wake() -> None:
        loop.call_soon_threadsafe(settle)

    declared = Silence(client, seconds, wake)
    with _LOCK:
        _SILENCES[client] = declared
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken, seconds)
    finally:
        with _LOCK:
            if _SILENCES.get(client) is declared:
                del _SILENCES[client]


class _Served:
    """The client one server task answers, and how much of its pauses that client's clock jumped over."""

    __slots__ = ("client", "skipped")

    def __init__(self, client: Address) -> None:
        self.client = client
        self.skipped = 0.0


_SERVED: contextvars.ContextVar[_Served | None] = contextvars.ContextVar("chunktape_served_client", default=None)
"""The client the current task answers, as its server sees it (set by ``serving``)."""


@contextlib.contextmanager
def serving(client: tuple[str, int] | None) -> Iterator[None]:
    """Within this block (and the tasks it starts), ``pause()`` is a declared silence towards ``client`` and
    ``now()`` counts the part of it the client's virtual clock jumped over."""
    token = _SERVED.set(None if client is None else _Served((str(client[0]), int(client[1]))))
    try:
        yield
    finally:
        _SERVED.reset(token)


class CutShort(Exception):
    """A ``pause()`` inside ``cut_at(when)`` reached ``when``: what waited is to end there."""


_CUT: contextvars.ContextVar[float | None] = contextvars.ContextVar("chunktape_cut", default=None)
"""The ``now()`` time at which the current wait is cut (set by ``cut_at``)."""


@contextlib.contextmanager
def cut_at(when: float) -> Iterator[None]:
    """Within this block, a ``pause()`` that would go past ``when`` (on the ``now()`` clock) waits until ``when`` only,
    as the same declared silence, and then raises ``CutShort``; an earlier cut set outside the block still holds."""
    outer = _CUT.get()
    token = _CUT.set(when if outer is None else min(when, outer))
    try:
        yield
    finally:
        _CUT.reset(token)


async def pause(seconds: float) -> None:
    """Wait ``seconds`` on the loop's clock; in a task ``serving`` a client, as a silence declared towards it (which
    that client may end sooner: ``now()`` then moves on by the rest). Inside ``cut_at(when)``, a wait past ``when``
    stops there and raises ``CutShort``."""
    cut = _CUT.get()
    if cut is not None:
        left = cut - now()
        if left < seconds:
            await _pause(max(left, 0.0))
            raise CutShort
    await _pause(seconds)


async def _pause(seconds: float) -> None:
    served = _SERVED.get()
    if served is None or seconds <= 0:
        await asyncio.sleep(max(seconds, 0))
        return
    loop = asyncio.get_running_loop()
    started = loop.time()
    await silent_for(seconds, served.client)
    waited = loop.time() - started
    if waited < seconds:
        served.skipped += seconds - waited


def now() -> float:
    """The running loop's time, plus, in a task ``serving`` a client, the silences that client's clock jumped over:
    the clock a schedule of pauses is kept on."""
    served = _SERVED.get()
    return asyncio.get_running_loop().time() + (0.0 if served is None else served.skipped)


class _Selector(selectors.BaseSelector):
    """The loop's selector: polls first; when nothing is ready, lets the loop decide how long to really wait."""

    def __init__(self) -> None:
        self._inner = selectors.DefaultSelector()
        self._idle: Callable[[selectors.BaseSelector, float | None], list[Any]] | None = None
        self.first_seen: dict[int, tuple[Address | None, float]] = {}
        """By descriptor: the connection's own address and when (real time) the loop first waited on it."""

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = self._inner.register(fileobj, events, data)
        local = _local_address(fileobj)
        seen = self.first_seen.get(key.fd)
        if seen is None or seen[0] != local:  # a new connection (or the descriptor now is another's)
            self.first_seen[key.fd] = (local, time.monotonic())
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or timeout == 0 or self._idle is None:
            return ready if ready or timeout == 0 else self._inner.select(timeout)
        return self._idle(self._inner, timeout)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock starting at ``start``; ``end``: the loop time at which every task still
    running is cancelled (``deadline_reached`` then says so), so a run that hangs ends.

    ``virtual=False`` makes it an ordinary loop on the real clock until ``virtual`` is set: the pytest plugin
    creates every ``tape`` test's loop so and turns the clock on once the test's settings say it wants it. The
    clock never jumps back when it is switched, either way."""

    def __init__(self, *, start: float = 0.0, end: float | None = None, virtual: bool = True) -> None:
        self._now = float(start)
        self._offset = self._now - time.monotonic()
        """On the real clock: ``time()`` is ``time.monotonic() + _offset``."""
        self._virtual = virtual
        self._end = end
        self._jobs: set[asyncio.Future[Any]] = set()
        self.deadline_reached = False
        """Whether the clock reached ``end`` (the tasks still running then were cancelled)."""
        selector = _Selector()
        super().__init__(selector)
        # What the loop registered for itself (the self-pipe that wakes it from other threads) is no outside I/O.
        self._own = frozenset(key.fd for key in selector.get_map().values())
        selector._idle = self._idle
        self._watch = selector

    @property
    def virtual(self) -> bool:
        """Whether the clock is virtual now (else the loop runs on the real clock, as any loop does)."""
        return self._virtual

    @virtual.setter
    def virtual(self, on: bool) -> None:
        if on and not self._virtual:
            self._now = time.monotonic() + self._offset
        elif not on and self._virtual:
            self._offset = self._now - time.monotonic()
        self._virtual = on

    def time(self) -> float:
        return self._now if self._virtual else time.monotonic() + self._offset

    def run_in_executor(  # type: ignore[override]  # the same call, typed loosely: it only watches the job
        self, executor: Any, func: Callable[..., _T], *args: Any
    ) -> asyncio.Future[_T]:
        job = super().run_in_executor(executor, func, *args)
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)
        return job

    def _idle(self, inner: selectors.BaseSelector, timeout: float | None) -> list[Any]:
        """Nothing is ready: wait in real time for what only the outside can bring, jump over the rest."""
        if not self._virtual:
            return inner.select(timeout)
        silences: list[Silence] = []
        if self._jobs or self._waits_on_io(inner, silences):
            # In slices: a server may declare a silence meanwhile, and from then on the clock need not wait.
            wait = _REAL_SLICE if timeout is None else min(timeout, _REAL_SLICE)
            started = time.monotonic()
            ready = inner.select(wait)
            self._now += min(time.monotonic() - started, wait) if ready else wait
            return ready
        if silences:
            # A server writes, then declares its silence: what it wrote before is readable now, and is read before
            # the clock jumps over the silence that follows it.
            ready = inner.select(0)
            if ready:
                return ready
        step = math.inf if timeout is None else timeout
        for held in silences:
            if held.ends_at is None:
                held.ends_at = self._now + held.seconds
            step = min(step, max(0.0, held.ends_at - self._now))
        if step == math.inf:  # no timer and nobody silent: only another thread can wake the loop
            return inner.select(None)
        self._advance(step)
        for held in silences:
            if held.ends_at is not None and held.ends_at <= self._now:
                held.end()
        return inner.select(0) if silences else []

    def _waits_on_io(self, inner: selectors.BaseSelector, silences: list[Silence]) -> bool:
        """Whether a socket or pipe is waited on whose peer is not silent on purpose (those go in ``silences``)."""
        first_seen = self._watch.first_seen
        for key in inner.get_map().values():
            if key.fd in self._own:
                continue
            held = _silence_of(key.fileobj)
            if held is None or held.ended or held.declared < first_seen.get(key.fd, (None, math.inf))[1]:
                # Not silent, or a silence left from an earlier connection that had this address (the port was
                # reused): a server cannot be silent towards a connection before the client made it.
                return True
            silences.append(held)
        return False

    def _advance(self, step: float) -> None:
        if self._end is None or self._now + step < self._end:
            self._now += step
        else:  # the clock stops at its end; what still runs there is cancelled (again, should it go on)
            self._now = max(self._now, self._end)
            self.deadline_reached = True
            for task in asyncio.all_tasks(self):
                task.cancel(f"the virtual clock reached its end ({self._end:g} s)")


def _local_address(fileobj: object) -> Address | None:
    """The own address of the connection ``fileobj`` (a socket or the fd asyncio registers for one), or None."""
    if isinstance(fileobj, socket.socket):
        sock, borrowed = fileobj, False
    elif isinstance(fileobj, int):
        try:
            sock, borrowed = socket.socket(fileno=fileobj), True  # the family is read off the descriptor
        except OSError:  # a pipe, not a socket
            return None
    else:
        return None
    try:
        local = sock.getsockname() if sock.family in (socket.AF_INET, socket.AF_INET6) else None
    except OSError:
        local = None
    finally:
        if borrowed:
            sock.detach()  # the descriptor stays the loop's
    return None if local is None else (local[0], local[1])


def _silence_of(fileobj: object) -> Silence | None:
    """The declared silence of the connection ``fileobj`` is of, if any."""
    local = _local_address(fileobj)
    if local is None:
        return None
    with _LOCK:
        return _SILENCES.get(local)


def replay_loop(*, end: float | None = None) -> VirtualTimeLoop:
    """A fresh virtual-time loop at loop time 0 (``end``: the loop time at which it cancels any run still going)."""
    return VirtualTimeLoop(end=end)
