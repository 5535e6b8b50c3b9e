"""What the replay server accepts from a client, and for how long it waits: sizes and deadlines.

``ServerLimits`` is the typed configuration; ``DeadlineProtocol`` (``deadlines``) enforces the read deadlines in
uvicorn's own HTTP protocol (``running.quiet_server`` puts both into a server); ``read_body`` enforces the size.
uvicorn 0.54 closes an idle keep-alive connection (``timeout_keep_alive``) and caps a request head's size
(``h11_max_incomplete_event_size``), but has no deadline for reading a request's head or body: a slowloris client,
or one that sends less body than its ``Content-Length``, would hold a connection (and a file descriptor) for good.
``DeadlineProtocol`` is uvicorn's h11 protocol plus those two deadlines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

from chunktape._errors import ErrorCode, LlmError

if TYPE_CHECKING:  # the server stack loads with the server: ``chunktape --help`` reads MAX_BODY_BYTES from here
    from starlette.requests import Request

__all__ = ["MAX_BODY_BYTES", "ServerLimits", "read_body"]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""The default largest request body the replay server reads (32 MiB); a larger one is answered 413."""

_Positive = Annotated[float, msgspec.Meta(gt=0)]


class ServerLimits(msgspec.Struct, frozen=True, kw_only=True):
    """How much a client may send the replay server, and how long it may take (seconds)."""

    max_body: int = MAX_BODY_BYTES
    """The largest request body, in bytes; past it the answer is ``413`` and the rest is discarded, not kept."""
    max_head: int = 64 * 1024
    """The largest request line plus headers, in bytes (uvicorn's ``h11_max_incomplete_event_size``)."""
    header_timeout: _Positive = 10.0
    """From the connection (or the previous response) to the end of the request's headers."""
    body_timeout: _Positive = 30.0
    """From the end of the headers to the end of the body (a body shorter than its Content-Length)."""
    keep_alive: _Positive = 5.0
    """How long an idle keep-alive connection stays open (uvicorn's ``timeout_keep_alive``)."""

    def __post_init__(self) -> None:
        for name in ("max_body", "max_head"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise LlmError(
                    f"ServerLimits.{name} must be a whole number of bytes >= 1, got {value!r}", ErrorCode.INVALID_CONFIG
                )
        for name in ("header_timeout", "body_timeout", "keep_alive"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise LlmError(
                    f"ServerLimits.{name} must be a number of seconds > 0, got {value!r}", ErrorCode.INVALID_CONFIG
                )


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None as soon as it is known to be larger than ``limit`` bytes (from its
    ``Content-Length``, or once that many bytes came): the rest is not read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            return None
        parts.append(part)
    return b"".join(parts)
