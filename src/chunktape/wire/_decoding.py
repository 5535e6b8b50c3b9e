"""What every protocol's stream decoder shares: reading one event's JSON, the end of the stream, a whole body.

Each protocol reads its own events, but they fail alike, so the rules live here once: an event the body ended inside
(``SseParser.unterminated``) whose data does not parse is a broken stream (``STREAM_ABORTED``: a retry may help);
other data that does not parse is ``INVALID_RESPONSE``; a body that ends before the provider finished its answer is
``STREAM_ABORTED``; and the usage the stream reported comes just before its finish.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import Finish, FinishReason, StreamChunk, TokenUsage, UsageChunk
from chunktape.wire._http_errors import error_from_payload, snippet
from chunktape.wire._sse import SseItem, SseParser

__all__ = ["StreamDecoder", "decode_body", "decode_event", "ending", "event_object", "invalid", "require_finished"]

_T = TypeVar("_T")
_any = msgspec.json.Decoder()


class StreamDecoder(Protocol):
    """A protocol's stream decoder (``OpenAIChatDecoder``, ``AnthropicDecoder``, ``ResponsesDecoder``), as the
    adapter and ``decode_body`` drive it."""

    @property
    def done(self) -> bool: ...

    def feed_item(self, item: SseItem, *, unterminated: bool = False) -> list[StreamChunk]: ...

    def close(self) -> list[StreamChunk]: ...


def invalid(message: str) -> LlmError:
    """An ``INVALID_RESPONSE``: the provider sent what its protocol does not allow."""
    return LlmError(message, ErrorCode.INVALID_RESPONSE)


def decode_event(
    data: str | bytes,
    decoder: msgspec.json.Decoder[_T],
    *,
    unterminated: bool,
    what: str = "event",
    error_event: bool = False,
) -> _T:
    """One event's data as ``decoder`` reads it. Data that does not parse is ``STREAM_ABORTED`` when the body ended
    inside the event (``unterminated``), the provider's error when the event is named ``error`` (``error_event``: its
    text is the message), else ``INVALID_RESPONSE`` naming ``what`` the data should have been."""
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        if unterminated:
            raise LlmError(
                f"the stream ended in the middle of an event: {snippet(data)}", ErrorCode.STREAM_ABORTED, cause=exc
            ) from exc
        if error_event:
            raise error_from_payload(data, what="the provider sent an error event") from None
        raise LlmError(
            f"unparseable {what} from the provider ({exc}): {snippet(data)}", ErrorCode.INVALID_RESPONSE, cause=exc
        ) from exc


def event_object(data: str, *, unterminated: bool, error_event: bool = False) -> dict[str, Any]:
    """One event's data as the JSON object every event of a typed-event protocol is (``decode_event``'s errors; any
    other JSON value is ``INVALID_RESPONSE``, or with ``error_event`` the provider's error)."""
    payload: Any = decode_event(data, _any, unterminated=unterminated, error_event=error_event)
    if not isinstance(payload, dict):
        if error_event:
            raise error_from_payload(payload, what="the provider sent an error event")
        raise invalid(f"an event that is not a JSON object: {snippet(data)}")
    return payload


def require_finished(finished: bool) -> None:
    """At the end of the body: an answer the provider never finished (no finish, no end event) was cut short."""
    if not finished:
        raise LlmError("the stream ended before the provider finished it", ErrorCode.STREAM_ABORTED)


def ending(usage: TokenUsage | None, reason: FinishReason) -> list[StreamChunk]:
    """The chunks a stream ends with: its usage, if it reported any, then its finish."""
    finish = Finish(reason=reason)
    return [UsageChunk(usage=usage), finish] if usage is not None else [finish]


def decode_body(body: bytes, decoder: StreamDecoder) -> list[StreamChunk]:
    """A whole recorded event stream through ``decoder``, to its ``close()`` (the event the body ends inside marked
    as unterminated)."""
    parser = SseParser()
    out: list[StreamChunk] = []
    for item in parser.feed(body):
        out.extend(decoder.feed_item(item))
    for item in parser.close():
        out.extend(decoder.feed_item(item, unterminated=item is parser.unterminated))
    out.extend(decoder.close())
    return out
