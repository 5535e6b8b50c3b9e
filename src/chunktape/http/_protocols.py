"""The wire protocols the HTTP faces speak, found by a request's route: one object per protocol that knows how to
read its request, decode its answers as they are recorded and render recorded interactions back in its format.

``protocol_for(path)``: ``.../chat/completions`` is OpenAI chat completions, ``.../messages`` Anthropic Messages,
``.../responses`` OpenAI Responses. The replay server, ``ReplayTransport`` and ``RecordingTransport`` dispatch on it,
so a protocol is added here, never in them. ``carried_over`` names what a recording made on one protocol loses when
it is served on another (the cross-protocol warning).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import msgspec

from chunktape._cassettes.model import Interaction, ResponseMeta
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import BlockStart, Finish, ProviderEvent, StreamChunk, TextDelta
from chunktape.http._render import Ending, SseRenderer, completion_from_chunks, error_body, render_sse
from chunktape.http._render_events import AnthropicRenderer, ResponsesRenderer, anthropic_error_body
from chunktape.wire import _anthropic as anthropic
from chunktape.wire import _openai_chat as chat
from chunktape.wire import _responses as responses
from chunktape.wire._decoding import StreamDecoder
from chunktape.wire._requests import DecodedRequest

__all__ = [
    "ANTHROPIC",
    "CHAT",
    "PROTOCOLS",
    "CrossProtocolWarning",
    "RESPONSES",
    "Renderer",
    "WireProtocol",
    "across_message",
    "carried_over",
    "protocol_for",
    "recorded_protocol",
    "refuse",
]


class CrossProtocolWarning(UserWarning):
    """A recording made on one wire protocol is served on another's route: the message names what does not
    carry over (text, reasoning, tool calls and usage always do)."""


class Renderer(Protocol):
    """What every protocol's renderer offers (``SseRenderer``, ``AnthropicRenderer``, ``ResponsesRenderer``)."""

    def head(self) -> bytes: ...

    def chunk(self, chunk: StreamChunk) -> bytes: ...

    def end(self, *, done: bool = True) -> bytes: ...

    def ending(self, error: Any) -> Ending: ...

    def outcome(self, outcome: Any) -> Ending: ...

    def error(self, error: LlmError) -> bytes:
        """The protocol's in-band error event, as a provider reports an error once the stream started."""
        ...


class WireProtocol:
    """One protocol's HTTP side. ``name`` is how chunks name it (``ProviderEvent.protocol``)."""

    name = ""
    route = ""
    """The end of its request path (``/chat/completions``)."""
    streams = ""
    """What its endpoint streams, for hints."""

    def matches(self, path: str) -> bool:
        return path.endswith(self.route)

    def decode_request(self, raw: bytes, *, model: str | None = None) -> DecodedRequest:
        """``raw`` as this protocol's request; ``model``: the model the route names (Azure's deployment), taken
        when the body names none."""
        raise NotImplementedError

    def renderer(self, *, model: str, include_usage: bool = True, meta: ResponseMeta | None = None) -> Renderer:
        raise NotImplementedError

    def render(self, interaction: Interaction, *, model: str | None = None, include_usage: bool = True) -> bytes:
        """A recorded interaction as one whole body."""
        renderer = self.renderer(
            model=model or interaction.request.model, include_usage=include_usage, meta=interaction.response
        )
        parts = [renderer.head()]
        parts.extend(renderer.chunk(event.chunk) for event in interaction.events)
        parts.append(renderer.outcome(interaction.outcome).data)
        return b"".join(parts)

    def completion(self, chunks: Iterable[StreamChunk], *, model: str, meta: ResponseMeta | None = None) -> Any:
        """The non-streamed answer the chunks add up to."""
        raise NotImplementedError

    def error_body(
        self, message: str, *, status: int | None, code: str | None = None, retry_after: float | None = None
    ) -> dict[str, Any]:
        return error_body(message, status=status, code=code, retry_after=retry_after)

    def decoder(self) -> StreamDecoder:
        raise NotImplementedError

    def decode_whole(self, obj: Any) -> list[StreamChunk] | None:
        """A non-streamed answer's chunks, or None when ``obj`` is no answer of this protocol."""
        raise NotImplementedError

    def observed(self, meta: ResponseMeta, decoder: Any) -> ResponseMeta:
        """``meta`` with what the decoder saw of the response envelope (its id, model, first event)."""
        return meta

    def observed_whole(self, meta: ResponseMeta, obj: dict[str, Any]) -> ResponseMeta:
        return meta


class _Chat(WireProtocol):
    name = "chat"
    route = "/chat/completions"
    streams = "chat completions"

    def decode_request(self, raw: bytes, *, model: str | None = None) -> DecodedRequest:
        return chat.decode_chat_request(raw, model=model)

    def renderer(self, *, model: str, include_usage: bool = True, meta: ResponseMeta | None = None) -> Renderer:
        return SseRenderer(model=model, include_usage=include_usage, meta=meta)

    def render(self, interaction: Interaction, *, model: str | None = None, include_usage: bool = True) -> bytes:
        return render_sse(interaction, model=model, include_usage=include_usage)

    def completion(self, chunks: Iterable[StreamChunk], *, model: str, meta: ResponseMeta | None = None) -> Any:
        return completion_from_chunks(chunks, model=model, meta=meta)

    def decoder(self) -> StreamDecoder:
        return chat.OpenAIChatDecoder()

    def decode_whole(self, obj: Any) -> list[StreamChunk] | None:
        if not isinstance(obj, dict) or "choices" not in obj:
            return None
        return chat.decode_openai_completion(obj)


class _Anthropic(WireProtocol):
    name = anthropic.PROTOCOL
    route = "/messages"
    streams = "Anthropic messages"

    def decode_request(self, raw: bytes, *, model: str | None = None) -> DecodedRequest:
        return anthropic.decode_messages_request(raw)

    def renderer(self, *, model: str, include_usage: bool = True, meta: ResponseMeta | None = None) -> Renderer:
        return AnthropicRenderer(model=model, meta=meta)

    def completion(self, chunks: Iterable[StreamChunk], *, model: str, meta: ResponseMeta | None = None) -> Any:
        message = meta.extras.get("message_start") if meta is not None else None
        return anthropic.message_from_chunks(chunks, model=model, message=message)

    def error_body(
        self, message: str, *, status: int | None, code: str | None = None, retry_after: float | None = None
    ) -> dict[str, Any]:
        return anthropic_error_body(message, status=status, code=code)

    def decoder(self) -> StreamDecoder:
        return anthropic.AnthropicDecoder()

    def decode_whole(self, obj: Any) -> list[StreamChunk] | None:
        if not isinstance(obj, dict) or obj.get("type") != "message":
            return None
        return anthropic.decode_anthropic_message(obj)

    def observed(self, meta: ResponseMeta, decoder: Any) -> ResponseMeta:
        message = getattr(decoder, "message", None)
        return self._with_message(meta, message)

    def observed_whole(self, meta: ResponseMeta, obj: dict[str, Any]) -> ResponseMeta:
        return self._with_message(meta, {key: value for key, value in obj.items() if key != "content"})

    def _with_message(self, meta: ResponseMeta, message: Any) -> ResponseMeta:
        if not isinstance(message, dict):
            return meta
        id, model = message.get("id"), message.get("model")
        return msgspec.structs.replace(
            meta,
            id=id if isinstance(id, str) else meta.id,
            model=model if isinstance(model, str) else meta.model,
            extras={**meta.extras, "message_start": message},
        )


class _Responses(WireProtocol):
    name = responses.PROTOCOL
    route = "/responses"
    streams = "OpenAI responses"

    def decode_request(self, raw: bytes, *, model: str | None = None) -> DecodedRequest:
        return responses.decode_responses_request(raw)

    def renderer(self, *, model: str, include_usage: bool = True, meta: ResponseMeta | None = None) -> Renderer:
        return ResponsesRenderer(model=model, meta=meta)

    def completion(self, chunks: Iterable[StreamChunk], *, model: str, meta: ResponseMeta | None = None) -> Any:
        created = meta.extras.get("response") if meta is not None else None
        terminal = meta.extras.get("terminal") if meta is not None else None
        encoder = responses.ResponsesEncoder(model=model, response=created, terminal=terminal)
        encoder.start()
        status = None
        for chunk in chunks:
            encoder.feed(chunk)
            if type(chunk) is Finish:
                status = chunk.reason.provider_reason
        whole = encoder.final()
        if isinstance(status, str) and status not in ("completed", "incomplete"):
            # A whole answer's own status (a background request's "queued") goes back as it came; a stream's
            # terminal event can only be completed or incomplete.
            whole = {**whole, "status": status}
        return whole

    def decoder(self) -> StreamDecoder:
        return responses.ResponsesDecoder()

    def decode_whole(self, obj: Any) -> list[StreamChunk] | None:
        if not isinstance(obj, dict) or obj.get("object") != "response":
            return None
        return responses.decode_responses_response(obj)

    def observed(self, meta: ResponseMeta, decoder: Any) -> ResponseMeta:
        response = getattr(decoder, "response", None)
        terminal = getattr(decoder, "terminal", None) or {}
        return self._with_response(meta, response, terminal)

    def observed_whole(self, meta: ResponseMeta, obj: dict[str, Any]) -> ResponseMeta:
        created = {key: value for key, value in obj.items() if key not in ("output", "usage")}
        return self._with_response(meta, created, {})

    def _with_response(self, meta: ResponseMeta, response: Any, terminal: dict[str, Any]) -> ResponseMeta:
        if not isinstance(response, dict):
            return meta
        id, model, created = response.get("id"), response.get("model"), response.get("created_at")
        extras = {**meta.extras, "response": response}
        if terminal:
            extras["terminal"] = terminal
        return msgspec.structs.replace(
            meta,
            id=id if isinstance(id, str) else meta.id,
            model=model if isinstance(model, str) else meta.model,
            created=created if isinstance(created, int) and not isinstance(created, bool) else meta.created,
            extras=extras,
        )


CHAT = _Chat()
ANTHROPIC = _Anthropic()
RESPONSES = _Responses()
PROTOCOLS: Sequence[WireProtocol] = (CHAT, ANTHROPIC, RESPONSES)
"""Every protocol the HTTP faces speak, by route."""


def protocol_for(path: str) -> WireProtocol | None:
    """The protocol a request path is for (``/v1/messages`` is Anthropic Messages), or None."""
    for protocol in PROTOCOLS:
        if protocol.matches(path):
            return protocol
    return None


def recorded_protocol(interaction: Interaction) -> str | None:
    """The protocol an interaction was recorded on, as far as it says: its provider events and block openings name
    it; a recording with neither is protocol-neutral (an adapter's, or chat completions')."""
    for event in interaction.events:
        chunk = event.chunk
        if type(chunk) is TextDelta:  # most of a stream, and none names a protocol: one test each, not two
            continue
        if type(chunk) is ProviderEvent:
            return chunk.protocol
        if type(chunk) is BlockStart and chunk.opening:
            return next(iter(chunk.opening))
    meta = interaction.response
    if meta is not None:
        if "message_start" in meta.extras:
            return ANTHROPIC.name
        if "response" in meta.extras:
            return RESPONSES.name
        return CHAT.name
    return None


def carried_over(interaction: Interaction, protocol: WireProtocol, lost: Iterable[str] = ()) -> str | None:
    """The warning for serving ``interaction`` on ``protocol``'s route when it was recorded on another, naming what
    does not carry over (``lost``: what the renderer could not carry), or None when it is the same protocol."""
    source = recorded_protocol(interaction)
    what = sorted(set(lost))
    if source is None or source == protocol.name:
        return None if not what else f"not carried over to {protocol.name}: {', '.join(what)}"
    detail = f"; not carried over: {', '.join(what)}" if what else ""
    return (
        f"an interaction recorded on {source} is served as {protocol.name}: text, reasoning, tool calls and usage "
        f"carry over{detail}"
    )


def across_message(interaction: Interaction, protocol: WireProtocol, model: str) -> str | None:
    """What the cross-protocol warning says when ``interaction`` was recorded on another protocol than ``protocol``
    (naming what its renderer could not carry), else None."""
    if carried_over(interaction, protocol) is None:
        return None
    renderer = protocol.renderer(model=model)
    for event in interaction.events:
        renderer.chunk(event.chunk)
    return carried_over(interaction, protocol, getattr(renderer, "lost", ()))


def refuse(path: str) -> LlmError:
    """What a face answers for a path no protocol speaks."""
    routes = ", ".join(f"...{protocol.route}" for protocol in PROTOCOLS)
    return LlmError(f"{path} is no route chunktape replays (routes: {routes})", ErrorCode.CASSETTE_MISMATCH)
