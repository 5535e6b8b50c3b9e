"""AbortController / AbortSignal, mirroring the web API, and a sleep that an abort interrupts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from chunktape._errors import ErrorCode, LlmError
from chunktape._virtual_time import pause

Listener = Callable[[object], None]


class AbortSignal:
    """Tells a stream to stop. Listeners run once, synchronously, when the signal aborts."""

    __slots__ = ("_listeners", "_reason", "aborted")

    def __init__(self) -> None:
        self.aborted = False
        self._reason: object = None
        self._listeners: list[Listener] = []

    @property
    def reason(self) -> object:
        return self._reason

    def add_listener(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(reason)`` on abort (at once if already aborted); returns a remover."""
        if self.aborted:
            listener(self._reason)
            return _noop
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def throw_if_aborted(self) -> None:
        if self.aborted:
            raise self.error()

    def error(self) -> LlmError:
        reason = "" if self._reason is None else f": {self._reason}"
        return LlmError(f"stream aborted by the caller{reason}", ErrorCode.CANCELLED)

    @classmethod
    def timeout(cls, seconds: float) -> AbortSignal:
        """A signal that aborts itself after ``seconds`` of event-loop time (virtual time in tests)."""
        controller = AbortController()
        asyncio.get_running_loop().call_later(seconds, controller.abort, f"timed out after {seconds}s")
        return controller.signal

    def _abort(self, reason: object) -> None:
        if self.aborted:
            return
        self.aborted = True
        self._reason = reason
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener(reason)


class AbortController:
    """Owns a signal and aborts it; ``abort()`` is idempotent."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: object = None) -> None:
        self.signal._abort(reason)


def _noop() -> None:
    return None


async def sleep(seconds: float, signal: AbortSignal | None = None) -> None:
    """``asyncio.sleep`` that raises ``LlmError(CANCELLED)`` as soon as ``signal`` aborts; in a server's task that
    answers one client, a silence declared towards it (``chunktape._virtual_time.pause``)."""
    if signal is None:
        await pause(seconds)
        return
    signal.throw_if_aborted()
    if seconds <= 0:
        await asyncio.sleep(0)
        signal.throw_if_aborted()
        return
    sleeper = asyncio.ensure_future(pause(seconds))
    remove = signal.add_listener(lambda _reason: _cancel(sleeper))
    try:
        await sleeper
    except asyncio.CancelledError:
        if signal.aborted and not _current_task_cancelling():
            raise signal.error() from None
        raise
    finally:
        remove()
        sleeper.cancel()


def _cancel(future: asyncio.Future[None]) -> None:
    future.cancel()


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
