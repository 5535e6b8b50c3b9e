"""Recorded interactions as OpenAI-compatible HTTP bodies: SSE streams, error bodies, whole completions.

Built on ``chunktape.wire.openai_chat`` so the mapping exists once. How a recorded outcome is written into a
*whole* SSE body (``render_sse``):

- ``Completed``: the chunks, the usage-only chunk, then ``data: [DONE]``;
- ``Raised`` with ``INVALID_RESPONSE``: a malformed ``data:`` line (the client sees unparseable data);
- any other ``Raised``: an in-band ``{"error": {...}}`` event, carrying ``code: <status>`` when the recorded
  error had an HTTP status (clients raise ``PROVIDER_HTTP_ERROR`` with it, else ``STREAM_ABORTED``);
- ``Cancelled`` (a recording cut short): the body simply ends, without ``[DONE]``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from chunktape.cassettes.model import Cancelled, Completed, Interaction, Outcome, Raised, ResponseMeta
from chunktape.errors import ErrorCode, LlmError
from chunktape.protocol import Finish, ReplyBuilder, StreamChunk
from chunktape.secrets import redact_text
from chunktape.wire.http_errors import clamp_retry_after
from chunktape.wire.openai_chat import (
    DONE_EVENT,
    OpenAIChatEncoder,
    data_event,
    finish_to_wire,
    tool_call_to_wire,
    usage_to_wire,
)

__all__ = [
    "MALFORMED_EVENT",
    "SseRenderer",
    "completion_from_chunks",
    "error_body",
    "error_headers",
    "render_sse",
]


MALFORMED_EVENT = b'data: {"id": "chatcmpl-chunktape", "choices": [{"delta": {"content": "\n\n'
"""A ``data:`` line whose JSON is cut off: what a corrupted stream looks like on the wire."""

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "insufficient_balance",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def error_type(status: int | None) -> str:
    """The OpenAI-style ``error.type`` for a status (``server_error`` for 5xx)."""
    if status is None:
        return "api_error"
    return _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(
    message: str, *, status: int | None, code: str | None = None, retry_after: float | None = None
) -> dict[str, Any]:
    """An OpenAI-style error object: ``{"error": {"message", "type", "param", "code"}}``.

    ``code`` is the HTTP status (as OpenRouter sends it in-band) when there is one, so clients that read an
    in-band error recover the status; otherwise the chunktape error code. A usable ``retry_after`` (see
    ``clamp_retry_after``) is also carried as ``error.retry_after`` (seconds), for clients that read the body.
    """
    error: dict[str, Any] = {
        "message": redact_text(message),  # a person reads it; allowed credentials are masked too
        "type": error_type(status),
        "param": None,
        "code": status if status is not None else code,
    }
    seconds = clamp_retry_after(retry_after)
    if seconds is not None:
        error["retry_after"] = seconds
    return {"error": error}


def error_headers(retry_after: float | None) -> dict[str, str]:
    """``Retry-After`` (whole seconds, rounded up) and ``retry-after-ms`` (exact), as OpenAI sends them.

    Nothing for a value that is not finite or is negative (NaN, infinity); values above a day are capped.
    """
    seconds = clamp_retry_after(retry_after)
    if seconds is None:
        return {}
    return {"retry-after": str(math.ceil(seconds)), "retry-after-ms": str(round(seconds * 1000))}


class SseRenderer:
    """Renders one stream incrementally: ``head()``, ``chunk(c)`` per StreamChunk, then ``end()`` or an error.

    With ``meta`` (recorded by ``RecordingTransport``), the stream carries the provider's own id, answered
    model, ``created``, ``system_fingerprint`` and extra fields, and no ``finish_reason`` where it sent none.
    """

    __slots__ = ("_encoder", "_meta", "include_usage")

    def __init__(
        self,
        *,
        model: str,
        created: int = 0,
        id: str = "chatcmpl-chunktape",
        include_usage: bool = True,
        meta: ResponseMeta | None = None,
    ) -> None:
        if meta is not None:
            model, id = meta.model or model, meta.id or id
            created = created if meta.created is None else meta.created
        self._encoder = OpenAIChatEncoder(model=model, created=created, id=id)
        self._meta = meta
        self.include_usage = include_usage
        """Whether ``end()`` writes the usage-only ``choices: []`` chunk. OpenAI sends it only to a request with
        ``stream_options.include_usage: true``, and then a stream without it carries no usage at all."""

    def _event(self, obj: dict[str, Any], where: str) -> bytes:
        """``obj`` as an event, with the recorded metadata for its place in the stream (``ResponseMeta.extras``)."""
        meta = self._meta
        if meta is not None:
            if meta.system_fingerprint is not None:
                obj["system_fingerprint"] = meta.system_fingerprint
            obj.update(meta.extras.get(where, ()))
        return data_event(obj)

    def head(self) -> bytes:
        return self._event(self._encoder.start(), "first")

    def chunk(self, chunk: StreamChunk) -> bytes:
        objects = self._encoder.feed(chunk)
        if not objects:
            return b""
        if self._meta is None:
            if len(objects) == 1:
                return data_event(objects[0])
            return b"".join(data_event(obj) for obj in objects)
        if type(chunk) is Finish:
            return self._event(objects[0], "finish") if self._meta.finish_sent else b""
        return b"".join(self._event(obj, "delta") for obj in objects)

    def end(self, *, done: bool = True) -> bytes:
        """The usage-only chunk (with ``include_usage``), then ``[DONE]`` if ``done`` and the stream had a finish."""
        usage = self._encoder.close()
        tail = b"".join(self._event(obj, "usage") for obj in usage) if self.include_usage else b""
        if done and self._encoder.finished:
            tail += DONE_EVENT
        return tail

    def error(self, error: LlmError | Raised) -> bytes:
        """An in-band error event (or, for ``INVALID_RESPONSE``, a malformed data line)."""
        if str(error.code) == ErrorCode.INVALID_RESPONSE:
            return MALFORMED_EVENT
        body = error_body(error.message, status=error.status, code=str(error.code), retry_after=error.retry_after)
        return data_event(body)

    def outcome(self, outcome: Outcome) -> bytes:
        """How a whole body ends for a recorded outcome (see the module docstring)."""
        match outcome:
            case Completed():
                return self.end()
            case Raised():
                return self.end(done=False) + self.error(outcome)
            case Cancelled():
                return self.end(done=False)


def render_sse(interaction: Interaction, *, model: str | None = None, include_usage: bool = True) -> bytes:
    """A recorded interaction as an OpenAI-compatible ``chat.completion.chunk`` SSE body.

    ``OpenAICompatAdapter`` (or any OpenAI client) parses it back to ``==`` chunks and the same outcome;
    ``model`` defaults to the recorded request's. The provider's recorded metadata (``interaction.response``),
    when there is some, is rendered as it was answered (its id, model, ``created``...).
    """
    renderer = SseRenderer(
        model=model or interaction.request.model, include_usage=include_usage, meta=interaction.response
    )
    parts = [renderer.head()]
    parts.extend(renderer.chunk(event.chunk) for event in interaction.events)
    parts.append(renderer.outcome(interaction.outcome))
    return b"".join(parts)


def completion_from_chunks(
    chunks: Iterable[StreamChunk], *, model: str, id: str = "chatcmpl-chunktape", meta: ResponseMeta | None = None
) -> Any:
    """A non-streamed ``chat.completion`` object: the reply the chunks fold into (``ReplyBuilder``), on the wire
    (with ``meta``: as the provider answered it).

    A stream without a finish chunk gives ``finish_reason: null``.
    """
    fold = ReplyBuilder(chunks)
    text, calls = fold.text, fold.tool_calls
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if fold.reasoning:
        message["reasoning_content"] = fold.reasoning
    if calls:
        message["tool_calls"] = [tool_call_to_wire(call) for call in calls]
    finish = fold.finish
    body: dict[str, Any] = {
        "id": id,
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": None if finish is None else finish_to_wire(finish),
            }
        ],
    }
    if fold.usage is not None:
        body["usage"] = usage_to_wire(fold.usage)
    if meta is not None:
        body.update(id=meta.id or id, created=meta.created or 0, model=meta.model or model)
        if meta.system_fingerprint is not None:
            body["system_fingerprint"] = meta.system_fingerprint
        body.update(meta.extras.get("completion", ()))
    return body
