"""Recorded interactions as Anthropic Messages and OpenAI Responses HTTP bodies: event streams, errors, whole answers.

Built on ``chunktape.wire._anthropic`` and ``chunktape.wire._responses`` so each mapping exists once. How a stream
ends on the wire follows the same one outcome-to-wire mapping as chat completions (``chunktape.http._render``):
a finished stream ends with the protocol's own last event (``message_stop``, ``response.completed``); a provider
error is the protocol's in-stream error (Anthropic's ``event: error`` with ``overloaded_error`` for 529, a Responses
``error`` event then ``response.failed``); ``INVALID_RESPONSE`` / ``PROTOCOL_VIOLATION`` a malformed event; a
recording cut short ends the body there; anything else breaks the connection (``Ending.reset``).
"""

from __future__ import annotations

from typing import Any

from chunktape._cassettes.model import Cancelled, Completed, Outcome, Raised, ResponseMeta
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import StreamChunk
from chunktape._secrets import redact_text
from chunktape.http._render import Ending
from chunktape.wire import _anthropic as anthropic
from chunktape.wire import _responses as responses

__all__ = ["AnthropicRenderer", "EventRenderer", "ResponsesRenderer", "anthropic_error_body"]

_IN_BAND = frozenset({ErrorCode.PROVIDER_HTTP_ERROR, ErrorCode.CASSETTE_CORRUPT, ErrorCode.CASSETTE_VERSION})
_MALFORMED = frozenset({ErrorCode.INVALID_RESPONSE, ErrorCode.PROTOCOL_VIOLATION})
_CODE_OF_STATUS = {status: code for code, status in reversed(list(responses.ERROR_STATUS.items()))}


def anthropic_error_body(message: str, *, status: int | None, code: str | None = None) -> dict[str, Any]:
    """An Anthropic-style error body: ``{"type": "error", "error": {"type", "message"}}`` (``overloaded_error``
    for 529); ``code`` (a chunktape code, for errors chunktape answers itself) goes beside them."""
    error: dict[str, Any] = {"type": anthropic.error_type(status), "message": redact_text(message)}
    if code is not None and status is None:
        error["code"] = code
    return {"type": "error", "error": error}


class EventRenderer:
    """One stream rendered incrementally: ``head()``, ``chunk(c)`` per chunk, then ``ending(error)`` or
    ``outcome(o)``; ``lost`` names what the chunks held that this protocol cannot carry."""

    malformed = b""

    def head(self) -> bytes:
        raise NotImplementedError

    def chunk(self, chunk: StreamChunk) -> bytes:
        raise NotImplementedError

    def end(self, *, done: bool = True) -> bytes:
        """Nothing: each protocol's stream ends with its own last event, written when the finish chunk came."""
        return b""

    def error(self, error: LlmError | Raised) -> bytes:
        raise NotImplementedError

    @property
    def lost(self) -> set[str]:
        raise NotImplementedError

    def ending(self, error: LlmError | Raised | None) -> Ending:
        if error is None:
            return Ending(self.end())
        code = str(error.code)
        if code in _IN_BAND:
            return Ending(self.error(error))
        if code in _MALFORMED:
            return Ending(self.malformed)
        if code == ErrorCode.CASSETTE_EXHAUSTED:
            return Ending(b"")
        return Ending(b"", reset=True)

    def outcome(self, outcome: Outcome) -> Ending:
        match outcome:
            case Completed():
                return self.ending(None)
            case Raised():
                return self.ending(outcome)
            case Cancelled():
                return Ending(b"")


class AnthropicRenderer(EventRenderer):
    """A Messages event stream; with ``meta`` (``RecordingTransport``'s), ``message_start`` as the provider sent it."""

    malformed = anthropic.MALFORMED_EVENT

    def __init__(self, *, model: str, include_usage: bool = True, meta: ResponseMeta | None = None) -> None:
        message = meta.extras.get("message_start") if meta is not None else None
        self._encoder = anthropic.AnthropicEncoder(
            model=(meta.model if meta is not None and meta.model else model),
            id=(meta.id if meta is not None and meta.id else "msg_chunktape"),
            message=message,
        )

    def head(self) -> bytes:
        return self._encoder.start()

    def chunk(self, chunk: StreamChunk) -> bytes:
        return self._encoder.feed(chunk)

    def error(self, error: LlmError | Raised) -> bytes:
        return anthropic.error_event(redact_text(error.message), status=error.status)

    @property
    def lost(self) -> set[str]:
        return self._encoder.lost


class ResponsesRenderer(EventRenderer):
    """A Responses event stream; with ``meta``, the response envelope as the provider sent it."""

    malformed = responses.MALFORMED_EVENT

    def __init__(self, *, model: str, include_usage: bool = True, meta: ResponseMeta | None = None) -> None:
        created = meta.extras.get("response") if meta is not None else None
        terminal = meta.extras.get("terminal") if meta is not None else None
        self._encoder = responses.ResponsesEncoder(
            model=(meta.model if meta is not None and meta.model else model),
            id=(meta.id if meta is not None and meta.id else "resp_chunktape"),
            response=created,
            terminal=terminal,
        )

    def head(self) -> bytes:
        return self._encoder.start()

    def chunk(self, chunk: StreamChunk) -> bytes:
        return self._encoder.feed(chunk)

    def error(self, error: LlmError | Raised) -> bytes:
        code = _CODE_OF_STATUS.get(error.status or 500, "server_error")
        return self._encoder.failure(redact_text(error.message), code=code)

    @property
    def lost(self) -> set[str]:
        return self._encoder.lost

    def final(self) -> dict[str, Any]:
        return self._encoder.final()
