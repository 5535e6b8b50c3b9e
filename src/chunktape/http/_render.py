"""Recorded interactions as OpenAI-compatible HTTP bodies: SSE streams, error bodies, whole completions.

Built on ``chunktape.wire._openai_chat`` so the mapping exists once. How a stream ends on the wire is decided
once, by ``SseRenderer.ending`` (the replay server and ``render_sse`` both use it), as the provider sent it:

- a finished stream (``Completed``): the usage-only chunk, then ``data: [DONE]``;
- a provider error (``PROVIDER_HTTP_ERROR``): an in-band ``{"error": {...}}`` event carrying ``code: <status>``,
  which is how providers report errors of their own once a stream started (clients raise
  ``PROVIDER_HTTP_ERROR`` with that status);
- ``INVALID_RESPONSE`` / ``PROTOCOL_VIOLATION``: a malformed ``data:`` line (the client sees unparseable data);
- a recording cut short (``Cancelled``, replayed as ``CASSETTE_EXHAUSTED``): the body ends, without ``[DONE]``;
- anything else (``STREAM_ABORTED``, ``TIMEOUT``...): the connection broke, so it breaks (``Ending.reset``): the
  server resets it; a whole body (``render_sse``) cannot carry a reset and simply stops there, without
  ``[DONE]``, which clients read as a broken stream (``STREAM_ABORTED``), never as an error the provider sent.

Every ending but ``[DONE]`` sends the usage-only chunk first (with ``include_usage``) when the stream had usage.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import msgspec

from chunktape._cassettes.model import Cancelled, Completed, Interaction, Outcome, Raised, ResponseMeta
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import Finish, ReasoningDelta, ReplyBuilder, StreamChunk, TextDelta
from chunktape._secrets import redact_text
from chunktape.wire._http_errors import clamp_retry_after
from chunktape.wire._openai_chat import (
    DONE_EVENT,
    MALFORMED_EVENT,
    OpenAIChatEncoder,
    data_event,
    finish_to_wire,
    tool_call_to_wire,
    usage_to_wire,
)

__all__ = [
    "Ending",
    "SseRenderer",
    "completion_from_chunks",
    "error_body",
    "error_headers",
    "render_sse",
]


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


class Ending(NamedTuple):
    """How a stream ends on the wire: ``data`` is written, then, with ``reset``, the connection breaks."""

    data: bytes
    reset: bool = False


_IN_BAND = frozenset({ErrorCode.PROVIDER_HTTP_ERROR, ErrorCode.CASSETTE_CORRUPT, ErrorCode.CASSETTE_VERSION})
"""Errors sent as an in-band event: the provider's own, and recorded data the server cannot serve (never a reset)."""
_MALFORMED = frozenset({ErrorCode.INVALID_RESPONSE, ErrorCode.PROTOCOL_VIOLATION})


_encode_text = msgspec.json.Encoder().encode
_SENTINEL = "\x00chunktape-text\x01"
"""Stands for a delta's text while a stream's delta event is rendered once as a template (``SseRenderer``): its JSON
form (``"\\u0000chunktape-text\\u0001"``) is found in the rendered bytes and split around."""
_ENCODED_SENTINEL = _encode_text(_SENTINEL)
_NO_TEMPLATE = (b"", b"")
_SHARED: dict[tuple[str, int, str], dict[type, tuple[bytes, bytes]]] = {}
"""Delta templates by (model, created, id), for streams without recorded metadata (their deltas depend on nothing
else); forgotten all at once past ``_SHARED_MAX`` keys."""
_SHARED_MAX = 256


class SseRenderer:
    """Renders one stream incrementally: ``head()``, ``chunk(c)`` per StreamChunk, then ``end()`` or an error.

    With ``meta`` (recorded by ``RecordingTransport``), the stream carries the provider's own id, answered
    model, ``created``, ``system_fingerprint`` and extra fields, and no ``finish_reason`` where it sent none.

    Text and reasoning deltas, most of a stream, are rendered from a template: the stream's delta event is rendered
    once, the slow way, with a stand-in text, and each delta is then the bytes around it with its own text encoded in
    between: the same bytes as rendering the whole event, at a fraction of the cost (a test holds them equal).
    """

    __slots__ = ("_encoder", "_key", "_meta", "_templates", "_usage_sent", "include_usage")

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
        self._key = (model, created, id) if meta is None else None
        """What a stream without recorded metadata renders its delta events from: streams that share it share their
        templates (``_SHARED``), so a short stream does not pay for building them."""
        self._templates: dict[type, tuple[bytes, bytes]] = _SHARED.get(self._key, {}) if self._key else {}
        self._usage_sent = False
        self.include_usage = include_usage
        """Whether ``end()`` writes the usage-only ``choices: []`` chunk. OpenAI sends it only to a request with
        ``stream_options.include_usage: true``, and then a stream without it carries no usage at all."""

    def _event(self, obj: dict[str, Any], where: str) -> bytes:
        """``obj`` as an event, with the recorded metadata for its place in the stream (``ResponseMeta.extras``)."""
        if self._meta is not None:
            _as_recorded(obj, self._meta, where, "delta")
        return data_event(obj)

    def head(self) -> bytes:
        return self._event(self._encoder.start(), "first")

    def chunk(self, chunk: StreamChunk) -> bytes:
        if type(chunk) is TextDelta or type(chunk) is ReasoningDelta:  # a subclass renders the slow way, alike
            kind = type(chunk)
            template = self._templates.get(kind) or self._template(kind)
            if template is not _NO_TEMPLATE:
                return template[0] + _encode_text(chunk.text) + template[1]
        return self._render(chunk)

    def chunks(self, chunks: Iterable[StreamChunk]) -> bytes:
        """``chunk(c)`` of every chunk, joined: a whole body's events in one pass (``render_sse``); each run of text
        deltas is one join of their encoded texts, the bytes between two events standing between them."""
        text = self._templates.get(TextDelta) or self._template(TextDelta)
        if text is _NO_TEMPLATE:
            return b"".join([self.chunk(chunk) for chunk in chunks])
        before, after = text
        between = after + before
        parts: list[bytes] = []
        run: list[str] = []
        for chunk in chunks:
            if type(chunk) is TextDelta:
                run.append(chunk.text)
                continue
            if run:
                parts += (before, between.join(map(_encode_text, run)), after)
                run = []
            parts.append(self.chunk(chunk))
        if run:
            parts += (before, between.join(map(_encode_text, run)), after)
        return b"".join(parts)

    def _template(self, kind: type[TextDelta] | type[ReasoningDelta]) -> tuple[bytes, bytes]:
        """The bytes before and after a delta's text in its event (``_NO_TEMPLATE`` where the recorded metadata
        puts the text field itself, so the stand-in is not there once)."""
        rendered = self._render(kind(index=0, text=_SENTINEL))  # a delta's event depends on nothing but its text
        before, found, after = rendered.partition(_ENCODED_SENTINEL)
        template = (before, after) if found and _ENCODED_SENTINEL not in after else _NO_TEMPLATE
        self._templates[kind] = template
        if self._key is not None and self._key not in _SHARED:
            if len(_SHARED) >= _SHARED_MAX:
                _SHARED.clear()  # many models or ids: start again (cheap, and safe beside other threads)
            _SHARED[self._key] = self._templates
        return template

    def _render(self, chunk: StreamChunk) -> bytes:
        objects = self._encoder.feed(chunk)
        if not objects:
            return b""
        if self._meta is None:
            if len(objects) == 1:
                return data_event(objects[0])
            return b"".join(data_event(obj) for obj in objects)
        if type(chunk) is Finish:
            if not self._meta.finish_sent:
                return b""
            finish = objects[0]
            recorded = self._meta.extras.get("finish.usage")
            usage = self._encoder.close() if recorded is not None and "usage" not in self._meta.extras else []
            if usage:  # the provider sent its usage on the finish event (DeepSeek): so does the replay
                finish["usage"] = usage[0]["usage"]
                self._usage_sent = True
            return self._event(finish, "finish")
        return b"".join(self._event(obj, "delta") for obj in objects)

    def end(self, *, done: bool = True) -> bytes:
        """The usage-only chunk (with ``include_usage``), then ``[DONE]`` if ``done`` and the stream had a finish."""
        usage = [] if self._usage_sent else self._encoder.close()
        tail = b"".join(self._event(obj, "usage") for obj in usage) if self.include_usage else b""
        if done and self._encoder.finished:
            tail += DONE_EVENT
        return tail

    def error(self, error: LlmError | Raised) -> bytes:
        """An in-band error event, as a provider reports an error once the stream started."""
        body = error_body(error.message, status=error.status, code=str(error.code), retry_after=error.retry_after)
        return data_event(body)

    def ending(self, error: LlmError | Raised | None) -> Ending:
        """How the stream ends on the wire: after its last chunk (``None``), or with ``error`` (see the module
        docstring). The one outcome-to-wire mapping."""
        if error is None:
            return Ending(self.end())
        tail = self.end(done=False)
        code = str(error.code)
        if code in _IN_BAND:
            return Ending(tail + self.error(error))
        if code in _MALFORMED:
            return Ending(tail + MALFORMED_EVENT)
        if code == ErrorCode.CASSETTE_EXHAUSTED:
            return Ending(tail)  # a recording cut short: the body ends where it does
        return Ending(tail, reset=True)

    def outcome(self, outcome: Outcome) -> Ending:
        """How a stream ends for a recorded outcome."""
        match outcome:
            case Completed():
                return self.ending(None)
            case Raised():
                return self.ending(outcome)
            case Cancelled():
                return Ending(self.end(done=False))


def render_sse(interaction: Interaction, *, model: str | None = None, include_usage: bool = True) -> bytes:
    """A recorded interaction as an OpenAI-compatible ``chat.completion.chunk`` SSE body.

    ``OpenAICompatAdapter`` (or any OpenAI client) parses it back to ``==`` chunks and the same outcome (a broken
    connection as a body that stops); ``model`` defaults to the recorded request's. The provider's recorded
    metadata (``interaction.response``), when there is some, is rendered as it was answered (its id, model,
    ``created``...).
    """
    renderer = SseRenderer(
        model=model or interaction.request.model, include_usage=include_usage, meta=interaction.response
    )
    body = renderer.chunks([event.chunk for event in interaction.events])
    return b"".join((renderer.head(), body, renderer.outcome(interaction.outcome).data))


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
    body: dict[str, Any]
    if meta is not None:
        body = {
            "id": meta.id or id,
            "object": "chat.completion",
            "created": meta.created or 0,
            "model": meta.model or model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": None if finish is None else finish_to_wire(finish)}
            ],
        }
        if fold.usage is not None:
            body["usage"] = usage_to_wire(fold.usage)
        _as_recorded(body, meta, "completion", "message")
        return body
    body = {
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
    return body


def _as_recorded(obj: dict[str, Any], meta: ResponseMeta, place: str, inner: str) -> None:
    """``obj`` (an event or a completion at ``place``) with the provider's recorded fields: its fingerprint, its
    extras, its first choice's own fields (and no ``logprobs`` it did not send), its delta's or message's, and its
    usage object as sent."""
    extras = meta.extras
    if meta.system_fingerprint is not None:
        obj["system_fingerprint"] = meta.system_fingerprint
    obj.update(extras.get(place, ()))
    choices = obj.get("choices")
    if choices:
        choice = choices[0]
        body = choice.get(inner)
        own = "completion.message" if inner == "message" else f"{place}.delta"
        if isinstance(body, dict):
            body = {**body, **extras.get(own, {})}
        rebuilt = {"index": choice.get("index", 0), inner: body, **extras.get(f"{place}.choice", {})}
        rebuilt["finish_reason"] = choice.get("finish_reason")
        obj["choices"] = [rebuilt, *choices[1:]]
    usage = extras.get(f"{place}.usage")
    if usage is not None and "usage" in obj:
        obj["usage"] = usage.get("usage", obj["usage"])
