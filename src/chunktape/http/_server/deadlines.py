"""``DeadlineProtocol``: uvicorn's h11 protocol plus the read deadlines of ``ServerLimits`` (the head's, the body's),
which uvicorn 0.54 lacks, and a JSON answer to a request that is no HTTP (uvicorn's is ``text/plain``); a module of its
own so that the limits load without uvicorn."""

from __future__ import annotations

import asyncio
from http import HTTPStatus
from typing import ClassVar, Literal

import h11
import msgspec
from uvicorn.protocols.http.h11_impl import H11Protocol

from chunktape.http._server.limits import ServerLimits

__all__ = ["LINGER_S", "DeadlineProtocol"]

LINGER_S = 2.0
"""How long a refused request's connection is read (and dropped) for, at most, before it is closed."""


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol that closes a connection whose request head or body does not arrive in time.

    Build one per server with ``bound(limits)``. The phase is read from h11's view of the client: ``IDLE``
    (waiting for a head) arms ``header_timeout``, ``SEND_BODY`` arms ``body_timeout``; anything else (the
    request is in, a response is being written) disarms them.
    """

    limits: ClassVar[ServerLimits] = ServerLimits()
    _phase: Literal["head", "body"] | None = None
    _deadline: asyncio.TimerHandle | None = None
    _head_bytes = 0
    """Bytes received since the current request's head began, and whether its end (a blank line) came."""
    _head_ended = False
    _lingering = False
    """A refusal was written: what the client still sends is read and dropped until it closes, or ``LINGER_S``."""

    @classmethod
    def bound(cls, limits: ServerLimits) -> type[DeadlineProtocol]:
        return type("DeadlineProtocol", (cls,), {"limits": limits})

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._watch()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # the rest of a refused request: dropped, so the client reads the refusal rather than a reset
        if self.conn.their_state is h11.IDLE:
            self._head_bytes += len(data)
            self._head_ended = self._head_ended or b"\r\n\r\n" in data
        super().data_received(data)
        self._watch()

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot read (a head past ``max_head``, a malformed line, a bad chunk): answered as the
        server answers every refusal, JSON with ``x-chunktape-error`` in a shape both SDKs read (``error.message``;
        Anthropic's ``type: error``), 431 for a head too large, and the connection closed once the client has
        stopped sending (a close with its bytes unread would reach it as a reset, not as this answer)."""
        large = self._head_bytes > self.limits.max_head and not self._head_ended
        status = 431 if large else 400
        message = (
            f"the request line and headers are larger than this server reads ({self.limits.max_head:,} bytes; "
            "ServerLimits.max_head)"
            if large
            else "the request is not valid HTTP/1.1 (its request line, a header or its chunked body cannot be read)"
        )
        error = {"type": "invalid_request_error", "message": message, "param": None, "code": "INVALID_REQUEST"}
        body = msgspec.json.encode({"type": "error", "error": error})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
            (b"x-chunktape-error", b"INVALID_REQUEST"),
            (b"x-should-retry", b"false"),
        ]
        self._disarm()
        for event in (
            h11.Response(status_code=status, headers=headers, reason=HTTPStatus(status).phrase),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self._lingering = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self._expire)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._head_bytes, self._head_ended = 0, False
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
