"""The decoder of Anthropic Messages (provider -> us): the ``/v1/messages`` event stream -> StreamChunk.

``AnthropicDecoder`` turns the events into a *valid* StreamChunk sequence, one content block per block:

- ``content_block_start``: ``text`` -> a text block, ``thinking`` and ``redacted_thinking`` -> a reasoning block,
  ``tool_use`` -> a tool-call block (its id and name on a first ``ToolCallDelta``), ``server_tool_use`` /
  ``mcp_tool_use`` -> a server-tool-call block, any block with a ``tool_use_id`` (``web_search_tool_result``...)
  or of a type this library does not know -> a server-tool-result block. A block that opens otherwise than
  ``default_opening`` says (``citations: []``, a ``caller``, a result's content) keeps its opening
  (``BlockStart.opening["anthropic"]``), so the encoder opens it the same way.
- ``content_block_delta``: ``text_delta`` -> ``TextDelta``, ``citations_delta`` -> ``TextDelta(text="",
  citation=...)``, ``thinking_delta`` -> ``ReasoningDelta``, ``signature_delta`` -> ``ReasoningDelta(text="",
  signature=...)``, ``input_json_delta`` -> ``ToolCallDelta``; ``content_block_stop`` -> the ``BlockEnd``.
- ``message_start`` and ``message_delta`` carry the usage (cumulative: the delta's counts replace the start's)
  and the stop reason; both are held until the stream ends (``message_stop`` or end of body), so ``usage``
  precedes ``finish``.
- ``ping``, and any event type this library does not know, pass through untouched as ``ProviderEvent``.
- ``event: error`` (``overloaded_error``...) raises ``PROVIDER_HTTP_ERROR`` with the status the error type is
  answered with (529 for ``overloaded_error``: recoverable); a body cut before ``message_stop`` and any stop
  reason is ``STREAM_ABORTED``; unparseable data ``INVALID_RESPONSE``.

A tool call whose input is not complete JSON when its block ends is ``cut`` (``ToolCallBlock.cut``) when
``max_tokens`` stopped the message there, as Anthropic's token limit does; anywhere else it is
``INVALID_RESPONSE``. A block the provider leaves open when the message ends is closed then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._json_prefix import unfinished_json
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    BlockType,
    CallId,
    FinishReason,
    ProviderEvent,
    ReasoningBlock,
    ReasoningDelta,
    ServerToolCallBlock,
    ServerToolResultBlock,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
)
from chunktape.wire._anthropic.fields import (
    ERROR_STATUS,
    PROTOCOL,
    default_opening,
    finish_from_wire,
    usage_from_wire,
)
from chunktape.wire._decoding import decode_body, ending, event_object, invalid, require_finished
from chunktape.wire._http_errors import error_from_payload, snippet
from chunktape.wire._sse import SseComment, SseItem

__all__ = ["AnthropicDecoder", "decode_anthropic_message", "decode_anthropic_sse", "error_from_anthropic"]

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_SERVER_CALLS = frozenset({"server_tool_use", "mcp_tool_use"})


def error_from_anthropic(payload: Any, *, what: str = "the provider sent an error event") -> LlmError:
    """An Anthropic error object (``{"type": "error", "error": {"type": "overloaded_error", ...}}``) as an
    ``LlmError``: ``PROVIDER_HTTP_ERROR`` with the status its type is answered with (529 for overloaded)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    status = ERROR_STATUS.get(kind) if isinstance(kind, str) else None
    base = error_from_payload(payload, what=what)
    if status is None:
        return base
    return LlmError(base.message, ErrorCode.PROVIDER_HTTP_ERROR, status=status, retry_after=base.retry_after)


class _Open:
    """The block being streamed: its kind, our index, the provider's, and what its deltas added up to."""

    __slots__ = ("citations", "id", "index", "kind", "name", "opening", "pieces", "signature", "wire_index")

    def __init__(self, kind: BlockType, index: int, wire_index: Any, opening: dict[str, Any]) -> None:
        self.kind = kind
        self.index = index
        self.wire_index = wire_index
        self.opening = opening
        self.pieces: list[str] = []
        self.signature: list[str] = []
        self.citations: list[Any] | None = None
        self.id = ""
        self.name = ""


class AnthropicDecoder:
    """Stateful decoder: feed SSE items (or event JSON), get StreamChunks; ``close()`` at the end of the body.

    Every chunk list returned, concatenated, is a stream that satisfies ``validate()``; a failure raises ``LlmError``.
    """

    __slots__ = ("_cut", "_done", "_next", "_open", "_stop", "_usage", "message")

    def __init__(self) -> None:
        self._next = 0
        self._open: _Open | None = None
        self._usage: dict[str, Any] | None = None
        self._stop: FinishReason | None = None
        self._done = False
        self._cut: str | None = None
        """The name of a tool call whose input ended before it was valid JSON (``max_tokens`` must have cut it)."""
        self.message: dict[str, Any] | None = None
        """``message_start``'s message, as sent (its id, model and usage), once it came."""

    @property
    def done(self) -> bool:
        """True once ``message_stop`` arrived."""
        return self._done

    def feed_item(self, item: SseItem, *, unterminated: bool = False) -> list[StreamChunk]:
        """Decode one SSE item (comments are skipped); ``unterminated``: the body ended inside it."""
        if isinstance(item, SseComment) or item.data is None:
            return []
        return self.feed_data(item.data, event=item.event, unterminated=unterminated)

    def feed_data(self, data: str, *, event: str | None = None, unterminated: bool = False) -> list[StreamChunk]:
        """Decode one event's ``data`` (its ``event:`` name, if any, names an event the data may not)."""
        if not data.strip():
            return []
        # An ``error`` event is the provider's error whatever its data holds.
        payload = event_object(data, unterminated=unterminated, error_event=event == "error")
        kind = payload.get("type") if isinstance(payload.get("type"), str) else event
        if kind == "error" or event == "error":
            raise error_from_anthropic(payload)
        out: list[StreamChunk] = []
        match kind:
            case "message_start":
                message = payload.get("message")
                if isinstance(message, dict):
                    self.message = message
                    usage = message.get("usage")
                    if isinstance(usage, dict):
                        self._usage = dict(usage)
            case "content_block_start":
                self._start(payload, out)
            case "content_block_delta":
                self._delta(payload, data, event, out)
            case "content_block_stop":
                self._check_index(payload)
                self._end(out)
            case "message_delta":
                delta = payload.get("delta")
                reason = delta.get("stop_reason") if isinstance(delta, dict) else None
                self._end(out, stop=reason if isinstance(reason, str) else None)
                if isinstance(delta, dict):
                    sequence = delta.get("stop_sequence")
                    self._stop = finish_from_wire(
                        reason if isinstance(reason, str) else None,
                        sequence if isinstance(sequence, str) else None,
                        delta.get("stop_details"),
                    )
                if self._cut is not None and reason != "max_tokens":
                    raise invalid(
                        f"tool call {self._cut!r} has input that is not valid JSON, and the stop reason is "
                        f"{reason!r}, not max_tokens"
                    )
                usage = payload.get("usage")
                if isinstance(usage, dict):
                    self._usage = {**(self._usage or {}), **{k: v for k, v in usage.items() if v is not None}}
            case "message_stop":
                self._end(out)
                self._done = True
            case _:
                out.append(ProviderEvent(protocol=PROTOCOL, event=event, data=data))
        return out

    def close(self) -> list[StreamChunk]:
        """End of body: close the open block, emit ``usage`` then ``finish``; a body cut short is ``STREAM_ABORTED``."""
        require_finished(self._done or self._stop is not None)
        out: list[StreamChunk] = []
        self._end(out)
        usage = usage_from_wire(self._usage) if self._usage is not None else None
        return out + ending(usage, self._stop or finish_from_wire(None))

    # -- blocks --------------------------------------------------------------------------------------

    def _check_index(self, payload: Mapping[str, Any]) -> None:
        block = self._open
        if block is not None and payload.get("index", block.wire_index) != block.wire_index:
            raise invalid(f"an event for block {payload.get('index')!r} inside block {block.wire_index!r}")

    def _start(self, payload: Mapping[str, Any], out: list[StreamChunk]) -> None:
        self._end(out)
        if self._cut is not None:
            raise invalid(f"a content block after tool call {self._cut!r}, whose input is not valid JSON")
        block = payload.get("content_block")
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise invalid(f"content_block_start without a content block: {snippet(repr(payload))}")
        wire_type: str = block["type"]
        kind: BlockType
        if wire_type == "text":
            kind = "text"
        elif wire_type in ("thinking", "redacted_thinking"):
            kind = "reasoning"
        elif wire_type == "tool_use":
            kind = "tool-call"
        elif wire_type in _SERVER_CALLS:
            kind = "server-tool-call"
        else:
            kind = "server-tool-result"
        # The opening as sent, its streamed content left out (the deltas carry it): kept when not the default.
        opening = dict(block)
        content: dict[str, Any] = {}
        for field, empty in (("text", ""), ("thinking", ""), ("signature", ""), ("input", {})):
            if field in opening and kind != "server-tool-result":
                content[field] = opening[field]
                opening[field] = empty
        call_id = block.get("id") if isinstance(block.get("id"), str) else None
        name = block.get("name") if isinstance(block.get("name"), str) else None
        default = default_opening(wire_type, id=call_id, name=name)
        index = self._next
        self._next += 1
        current = self._open = _Open(kind, index, payload.get("index"), opening)
        out.append(BlockStart(index=index, block_type=kind, opening={} if opening == default else {PROTOCOL: opening}))
        if kind in ("tool-call", "server-tool-call"):
            if call_id is None or name is None:
                raise invalid(f"a {wire_type} block without an id and a name: {snippet(repr(block))}")
            current.id, current.name = call_id, name
            out.append(ToolCallDelta(index=index, id=CallId(call_id), name=name, arguments_delta=""))
            started = content.get("input")
            if started:  # a block that opened with its input (not Anthropic's own way): the input as its first piece
                self._piece(_encoder.encode(started).decode(), out)
        elif kind == "text":
            if "citations" in block:
                current.citations = list(block["citations"] or [])
            if content.get("text"):
                self._text(str(content["text"]), out)
        elif kind == "reasoning":
            if content.get("thinking"):
                self._text(str(content["thinking"]), out)
            if content.get("signature"):
                current.signature.append(str(content["signature"]))
                out.append(ReasoningDelta(index=index, text="", signature=str(content["signature"])))

    def _delta(self, payload: Mapping[str, Any], data: str, event: str | None, out: list[StreamChunk]) -> None:
        block = self._open
        delta = payload.get("delta")
        if block is None:
            raise invalid(f"content_block_delta outside any block: {snippet(data)}")
        self._check_index(payload)
        kind = delta.get("type") if isinstance(delta, dict) else None
        if not isinstance(delta, dict):
            raise invalid(f"content_block_delta without a delta: {snippet(data)}")
        if kind == "text_delta" and block.kind == "text" and isinstance(delta.get("text"), str):
            self._text(delta["text"], out)
        elif kind == "citations_delta" and block.kind == "text":
            citation = delta.get("citation")
            block.citations = [*(block.citations or []), citation]
            out.append(TextDelta(index=block.index, text="", citation=citation))
        elif kind == "thinking_delta" and block.kind == "reasoning" and isinstance(delta.get("thinking"), str):
            self._text(delta["thinking"], out)
        elif kind == "signature_delta" and block.kind == "reasoning" and isinstance(delta.get("signature"), str):
            block.signature.append(delta["signature"])
            out.append(ReasoningDelta(index=block.index, text="", signature=delta["signature"]))
        elif kind == "input_json_delta" and block.kind in ("tool-call", "server-tool-call"):
            partial = delta.get("partial_json")
            if not isinstance(partial, str):
                raise invalid(f"input_json_delta without partial_json: {snippet(data)}")
            self._piece(partial, out)
        elif kind in ("text_delta", "thinking_delta", "signature_delta", "input_json_delta", "citations_delta"):
            raise invalid(f"a {kind} inside a {block.kind} block: {snippet(data)}")
        else:
            out.append(ProviderEvent(protocol=PROTOCOL, event=event, data=data))  # a delta type newer than us

    def _text(self, text: str, out: list[StreamChunk]) -> None:
        block = self._open
        assert block is not None
        block.pieces.append(text)
        if block.kind == "text":
            out.append(TextDelta(index=block.index, text=text))
        else:
            out.append(ReasoningDelta(index=block.index, text=text))

    def _piece(self, partial: str, out: list[StreamChunk]) -> None:
        block = self._open
        assert block is not None
        block.pieces.append(partial)
        out.append(ToolCallDelta(index=block.index, arguments_delta=partial))

    def _end(self, out: list[StreamChunk], *, stop: str | None = None) -> None:
        """Close the open block; ``stop``: the stop reason, when the block ends with the message (no block stop)."""
        block, self._open = self._open, None
        if block is None:
            return
        text = "".join(block.pieces)
        ended: Any
        if block.kind == "text":
            ended = TextBlock(text=text, citations=block.citations)
        elif block.kind == "reasoning":
            redacted = block.opening.get("data") if block.opening.get("type") == "redacted_thinking" else None
            ended = ReasoningBlock(
                text=text,
                signature="".join(block.signature) if block.signature else None,
                redacted=redacted if isinstance(redacted, str) else None,
            )
        elif block.kind == "server-tool-result":
            tool_use_id = block.opening.get("tool_use_id")
            content = block.opening.get("content", {k: v for k, v in block.opening.items() if k != "type"})
            ended = ServerToolResultBlock(
                tool_use_id=tool_use_id if isinstance(tool_use_id, str) else "", content=content
            )
        else:
            if not text:
                # No input at all (a tool without parameters): "{}" keeps the block valid JSON.
                text = "{}"
                out.append(ToolCallDelta(index=block.index, arguments_delta=text))
            try:
                _decoder.decode(text)
                cut = False
            except msgspec.DecodeError:
                # max_tokens cut it (the stop reason says so now, or in the message_delta that follows).
                if block.kind != "tool-call" or stop not in (None, "max_tokens") or not unfinished_json(text):
                    raise invalid(
                        f"tool call {block.name!r} has input that is not valid JSON when its block ends: "
                        f"{snippet(text)}"
                    ) from None
                cut = True
                self._cut = block.name
            if block.kind == "tool-call":
                ended = ToolCallBlock(id=CallId(block.id), name=block.name, arguments=text, cut=cut)
            else:
                ended = ServerToolCallBlock(id=CallId(block.id), name=block.name, arguments=text)
        out.append(BlockEnd(index=block.index, block=ended))


def decode_anthropic_sse(body: bytes) -> list[StreamChunk]:
    """Decode a whole recorded ``/v1/messages`` event stream into StreamChunks."""
    return decode_body(body, AnthropicDecoder())


def decode_anthropic_message(body: bytes | str | Mapping[str, Any]) -> list[StreamChunk]:
    """A non-streamed ``message`` object (JSON or decoded) as the chunks its stream would give: each content
    block as a start, its content as one delta, an end; then usage and the stop reason."""
    try:
        message: Any = _decoder.decode(body) if isinstance(body, bytes | str) else body
    except msgspec.DecodeError as exc:
        raise invalid(f"not a message object: {exc}") from exc
    if not isinstance(message, dict) or message.get("type") == "error":
        raise error_from_anthropic(message, what="the provider answered with an error")
    content = message.get("content")
    if not isinstance(content, list):
        raise invalid("not a message object: `content` must be a list")
    decoder = AnthropicDecoder()
    out: list[StreamChunk] = []
    start = {key: value for key, value in message.items() if key != "content"}
    out.extend(decoder.feed_data(_encoder.encode({"type": "message_start", "message": start}).decode()))
    events: list[dict[str, Any]] = []
    for index, block in enumerate(content):
        if not isinstance(block, dict):
            raise invalid(f"content[{index}] is not a content block")
        opening = dict(block)
        delta: dict[str, Any] | None = None
        match block.get("type"):
            case "text":
                opening["text"] = ""
                if "citations" in opening:
                    opening["citations"] = []  # each citation follows as a delta
                delta = {"type": "text_delta", "text": block.get("text", "")}
            case "thinking":
                opening.update(thinking="", signature="")
                delta = {"type": "thinking_delta", "thinking": block.get("thinking", "")}
            case "tool_use" | "server_tool_use" | "mcp_tool_use":
                opening["input"] = {}
                delta = {"type": "input_json_delta", "partial_json": _encoder.encode(block.get("input", {})).decode()}
        events.append({"type": "content_block_start", "index": index, "content_block": opening})
        if delta is not None and (delta.get("text") or delta.get("thinking") or delta.get("partial_json")):
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        if block.get("type") == "thinking" and block.get("signature"):
            signature = {"type": "signature_delta", "signature": block["signature"]}
            events.append({"type": "content_block_delta", "index": index, "delta": signature})
        for citation in block.get("citations") or () if block.get("type") == "text" else ():
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "citations_delta", "citation": citation},
                }
            )
        events.append({"type": "content_block_stop", "index": index})
    stop = {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")}
    if message.get("stop_details") is not None:
        stop["stop_details"] = message["stop_details"]
    events.append({"type": "message_delta", "delta": stop, "usage": message.get("usage") or {}})
    events.append({"type": "message_stop"})
    for event in events:
        out.extend(decoder.feed_data(_encoder.encode(event).decode()))
    out.extend(decoder.close())
    return out
