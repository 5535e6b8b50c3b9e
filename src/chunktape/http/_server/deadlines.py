"""``DeadlineProtocol``: uvicorn's h11 protocol plus the read deadlines of ``ServerLimits`` (the head's, the body's),
which uvicorn 0.54 lacks; a module of its own so that the limits load without uvicorn."""

from __future__ import annotations

import asyncio
from typing import ClassVar, Literal

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from chunktape.http._server.limits import ServerLimits

__all__ = ["DeadlineProtocol"]


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol that closes a connection whose request head or body does not arrive in time.

    Build one per server with ``bound(limits)``. The phase is read from h11's view of the client: ``IDLE``
    (waiting for a head) arms ``header_timeout``, ``SEND_BODY`` arms ``body_timeout``; anything else (the
    request is in, a response is being written) disarms them.
    """

    limits: ClassVar[ServerLimits] = ServerLimits()
    _phase: Literal["head", "body"] | None = None
    _deadline: asyncio.TimerHandle | None = None

    @classmethod
    def bound(cls, limits: ServerLimits) -> type[DeadlineProtocol]:
        return type("DeadlineProtocol", (cls,), {"limits": limits})

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _watch(self) -> None:
        state = self.conn.their_state
        phase: Literal["head", "body"] | None = (
            "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        )
        if phase == self._phase:
            return
        self._disarm()
        self._phase = phase
        if phase is not None and not self.transport.is_closing():
            timeout = self.limits.header_timeout if phase == "head" else self.limits.body_timeout
            self._deadline = self.loop.call_later(timeout, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()
