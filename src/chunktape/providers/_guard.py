"""Bounding an adapter's network awaits by its abort signal and an idle deadline (every provider adapter's)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from chunktape._abort import AbortSignal
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import aclose_stream

__all__ = ["Guard", "aiter_guarded"]

_T = TypeVar("_T")


class Guard:
    """Bounds network awaits by the abort signal and an idle deadline, so neither waits on a silent server.

    Cheap enough for every read: no task, no timeout scope per await. ``deadline`` is a plain number the stream
    moves on real data; one timer follows it lazily (when it fires early it re-arms for the moved deadline),
    and when it is really due, or the abort signal fires, while the stream's task awaits the network (and
    only then), the task is cancelled and that cancellation becomes ``TIMEOUT`` or the signal's error.
    """

    __slots__ = ("_loop", "_reason", "_remove", "_timed", "_timer", "_waiting", "deadline", "signal")

    def __init__(self, signal: AbortSignal | None) -> None:
        self.signal = signal
        self._loop = asyncio.get_running_loop()
        self.deadline: float | None = None
        """The idle deadline (event-loop time) for timed reads; None for none."""
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: asyncio.Task[Any] | None = None
        self._timed = False
        self._reason: str | None = None
        self._remove: Callable[[], None] | None = None
        if signal is not None:
            self._remove = signal.add_listener(self._on_abort)

    def set_deadline(self, deadline: float | None) -> None:
        """Move the idle deadline (the timer follows lazily)."""
        self.deadline = deadline
        if deadline is not None and self._timer is None:
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def held(self, seconds: float) -> None:
        """The consumer took ``seconds`` with a chunk before asking for the next: that was not the provider's
        silence, so the idle deadline moves on by as much (its timer re-armed if it fired meanwhile)."""
        if self.deadline is not None and seconds > 0:
            self.set_deadline(self.deadline + seconds)

    def _on_timer(self) -> None:
        self._timer = None
        deadline = self.deadline
        if deadline is None:
            return
        if self._loop.time() < deadline:
            self._timer = self._loop.call_at(deadline, self._on_timer)
        elif self._timed:
            self._cancel("timeout")
        # Not in a timed read: the next one sees the deadline passed.

    def _on_abort(self, _reason: object) -> None:
        self._cancel("abort")

    def _cancel(self, reason: str) -> None:
        task = self._waiting
        if task is not None and self._reason is None:
            self._reason = reason
            task.cancel()

    async def run(self, start: Callable[[], Awaitable[_T]], doing: str, *, timed: bool = False) -> _T:
        """Await what ``start()`` returns; ``timed``: bounded by ``deadline``.

        ``start`` is called only once the signal and the deadline allow the wait: an awaitable made and then
        dropped unawaited (``anext()``'s) is reported by Python 3.13, and closing it unawaited breaks its
        generator there.
        """
        signal = self.signal
        if signal is not None and signal.aborted:
            raise signal.error()
        deadline = self.deadline if timed else None
        if deadline is not None and self._loop.time() >= deadline:
            raise LlmError(f"timed out: {doing}", ErrorCode.TIMEOUT)
        timed = deadline is not None
        awaitable = start()
        if signal is None and not timed:
            return await awaitable
        task = self._waiting = asyncio.current_task()
        self._timed = timed
        try:
            return await awaitable
        except asyncio.CancelledError:
            reason, self._reason = self._reason, None
            if reason is None or task is None:
                raise  # cancelled from outside: let it through
            task.uncancel()
            if signal is not None and signal.aborted:
                raise signal.error() from None
            raise LlmError(f"timed out: {doing}", ErrorCode.TIMEOUT) from None
        finally:
            self._waiting = None
            self._timed = False

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def aiter_guarded(iterator: AsyncIterator[bytes], guard: Guard) -> AsyncGenerator[bytes, None]:
    try:
        while (piece := await guard.run(lambda: anext(iterator, None), "no error body")) is not None:
            yield piece
    finally:
        await aclose_stream(iterator)
