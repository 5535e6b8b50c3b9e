"""The encoder of Anthropic Messages (us -> wire): StreamChunk -> the ``/v1/messages`` event stream.

``AnthropicEncoder`` renders a chunk stream as Anthropic streams it: ``message_start``, per block a
``content_block_start`` (its recorded opening when it has one), its deltas and ``content_block_stop``, then
``message_delta`` (stop reason, whole usage) and ``message_stop``; Anthropic's own ``ProviderEvent``s (``ping``)
go out in their place, untouched, so a stream the decoder read comes back event for event. What it cannot carry
from another protocol it names in ``lost`` (for the cross-protocol warning).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    Finish,
    ProviderEvent,
    ReasoningBlock,
    ReasoningDelta,
    ReplyBuilder,
    ServerToolCallBlock,
    ServerToolResultBlock,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from chunktape.wire._anthropic.fields import PROTOCOL, default_opening, error_type, finish_to_wire, usage_to_wire
from chunktape.wire._encoding import encoded_events, own_event, own_opening
from chunktape.wire._sse import json_event

__all__ = [
    "AnthropicEncoder",
    "MALFORMED_EVENT",
    "chunks_to_anthropic_events",
    "error_event",
    "event_bytes",
    "message_from_chunks",
]

_decoder = msgspec.json.Decoder()

MALFORMED_EVENT = b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {"ty\n\n'
"""An event whose JSON is cut off: what a corrupted Messages stream looks like on the wire."""


def event_bytes(event: dict[str, Any]) -> bytes:
    """One event as Anthropic frames it: ``event: <type>`` and its JSON on one ``data:`` line."""
    return json_event(event, event=str(event["type"]))


def error_event(message: str, *, status: int | None) -> bytes:
    """An in-stream ``error`` event (``overloaded_error`` for 529), as Anthropic reports an error mid-stream."""
    return event_bytes({"type": "error", "error": {"type": error_type(status), "message": message}})


class _Pending:
    """A tool-call block whose ``content_block_start`` waits for its id and name (its first delta)."""

    __slots__ = ("index", "kind", "opening")

    def __init__(self, index: int, kind: str, opening: dict[str, Any] | None) -> None:
        self.index = index
        self.kind = kind
        self.opening = opening


class AnthropicEncoder:
    """Incremental: ``start()``, then ``feed(chunk)`` per chunk, then ``close()``; each returns the SSE bytes to send.

    ``message`` is ``message_start``'s message as recorded (``ResponseMeta.extras["message_start"]``); without it
    the message is chunktape's own (``id``, ``model``, zero usage until ``message_delta`` says it).
    """

    __slots__ = ("_message", "_pending", "_usage", "finished", "lost")

    def __init__(self, *, model: str, id: str = "msg_chunktape", message: dict[str, Any] | None = None) -> None:
        self._message: dict[str, Any] = message or {
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        self._pending: _Pending | None = None
        self._usage: TokenUsage | None = None
        self.finished = False
        """True once a ``Finish`` was fed (``message_stop`` was written)."""
        self.lost: set[str] = set()
        """What the chunks held that this protocol cannot carry (another protocol's events, reasoning parts...)."""

    def start(self) -> bytes:
        return event_bytes({"type": "message_start", "message": self._message})

    def _open(self, index: int, block: dict[str, Any]) -> bytes:
        return event_bytes({"type": "content_block_start", "index": index, "content_block": block})

    def _delta(self, index: int, delta: dict[str, Any]) -> bytes:
        return event_bytes({"type": "content_block_delta", "index": index, "delta": delta})

    def _flush(self, call_id: str | None, name: str | None) -> bytes:
        """The waiting tool-call start, with the id and name now known."""
        pending, self._pending = self._pending, None
        if pending is None:
            return b""
        if pending.opening is not None:
            return self._open(pending.index, pending.opening)
        return self._open(pending.index, default_opening(pending.kind, id=call_id, name=name))

    def feed(self, chunk: StreamChunk) -> bytes:
        """The events for one chunk (none for usage, which waits for the finish)."""
        match chunk:
            case TextDelta():
                if chunk.citation is not None:
                    return self._delta(chunk.index, {"type": "citations_delta", "citation": chunk.citation})
                if chunk.part:
                    self.lost.add("text parts (they join into one block)")
                return self._delta(chunk.index, {"type": "text_delta", "text": chunk.text})
            case ReasoningDelta():
                if chunk.signature is not None:
                    return self._delta(chunk.index, {"type": "signature_delta", "signature": chunk.signature})
                if chunk.part:
                    self.lost.add("reasoning summary parts (they join into one thinking block)")
                return self._delta(chunk.index, {"type": "thinking_delta", "thinking": chunk.text})
            case ToolCallDelta():
                head = self._flush(chunk.id, chunk.name) if self._pending is not None else b""
                if head and not chunk.arguments_delta and chunk.id is not None:
                    return head  # the opening event itself carried no input
                return head + self._delta(
                    chunk.index, {"type": "input_json_delta", "partial_json": chunk.arguments_delta}
                )
            case BlockStart():
                opening = own_opening(chunk, PROTOCOL, self.lost)
                match chunk.block_type:
                    case "text":
                        return self._open(chunk.index, opening or default_opening("text"))
                    case "reasoning":
                        return self._open(chunk.index, opening or default_opening("thinking"))
                    case "tool-call":
                        self._pending = _Pending(chunk.index, "tool_use", opening)
                    case "server-tool-call":
                        self._pending = _Pending(chunk.index, "server_tool_use", opening)
                    case "server-tool-result":
                        if opening is not None:
                            return self._open(chunk.index, opening)
                        self._pending = _Pending(chunk.index, "server_tool_result", None)
                return b""
            case BlockEnd():
                block = chunk.block
                head = b""
                if self._pending is not None:
                    if isinstance(block, ServerToolResultBlock):
                        head = self._open(
                            chunk.index,
                            {
                                "type": "web_search_tool_result",
                                "tool_use_id": block.tool_use_id,
                                "content": block.content,
                            },
                        )
                        self._pending = None
                    elif isinstance(block, ToolCallBlock | ServerToolCallBlock):
                        head = self._flush(block.id, block.name)
                    else:
                        head = self._flush(None, None)
                if isinstance(block, ReasoningBlock) and block.encrypted is not None:
                    self.lost.add("encrypted reasoning")
                if isinstance(block, ToolCallBlock) and block.cut:
                    return head  # max_tokens ended the message inside it: Anthropic sends no block stop then
                return head + event_bytes({"type": "content_block_stop", "index": chunk.index})
            case UsageChunk():
                self._usage = chunk.usage
                return b""
            case Finish():
                self.finished = True
                reason = chunk.reason
                delta: dict[str, Any] = {"stop_reason": finish_to_wire(reason), "stop_sequence": reason.stop_sequence}
                if reason.details is not None:
                    delta["stop_details"] = reason.details
                usage = usage_to_wire(self._usage) if self._usage is not None else {"output_tokens": 0}
                return event_bytes({"type": "message_delta", "delta": delta, "usage": usage}) + event_bytes(
                    {"type": "message_stop"}
                )
            case ProviderEvent():
                return own_event(chunk, PROTOCOL, self.lost) or b""

    def close(self) -> bytes:
        """Nothing more: a finished stream ended with ``message_stop``; a cut one just ends."""
        return b""


def chunks_to_anthropic_events(
    chunks: Iterable[StreamChunk], *, model: str, id: str = "msg_chunktape", message: dict[str, Any] | None = None
) -> Iterator[bytes]:
    """The SSE bytes of a whole chunk stream, event by event, as ``AnthropicDecoder`` reads back to ``==`` chunks."""
    yield from encoded_events(AnthropicEncoder(model=model, id=id, message=message), chunks)


def message_from_chunks(
    chunks: Iterable[StreamChunk], *, model: str, id: str = "msg_chunktape", message: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A non-streamed ``message``: the content blocks the chunks end with, the stop reason and usage."""
    chunks = list(chunks)
    fold = ReplyBuilder(chunks)
    openings: dict[int, dict[str, Any]] = {}
    content: list[dict[str, Any]] = []
    for chunk in chunks:
        if type(chunk) is BlockStart and PROTOCOL in chunk.opening:
            openings[chunk.index] = chunk.opening[PROTOCOL]
        if type(chunk) is not BlockEnd:
            continue
        block = chunk.block
        opening = dict(openings.get(chunk.index, {}))
        if isinstance(block, ToolCallBlock | ServerToolCallBlock):
            kind = "tool_use" if isinstance(block, ToolCallBlock) else opening.get("type", "server_tool_use")
            content.append(
                {**opening, "type": kind, "id": block.id, "name": block.name, "input": _json(block.arguments)}
            )
        elif isinstance(block, ServerToolResultBlock):
            content.append(
                opening
                or {"type": "web_search_tool_result", "tool_use_id": block.tool_use_id, "content": block.content}
            )
        elif isinstance(block, ReasoningBlock):
            if block.redacted is not None:
                content.append({"type": "redacted_thinking", "data": block.redacted})
            else:
                content.append(
                    {**opening, "type": "thinking", "thinking": block.text, "signature": block.signature or ""}
                )
        else:
            text: dict[str, Any] = {**opening, "type": "text", "text": block.text}
            if block.citations is not None:
                text["citations"] = block.citations
            content.append(text)
    body = dict(
        message
        or {
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "stop_reason": None,
            "stop_sequence": None,
        }
    )
    body["content"] = content
    finish = fold.finish
    if finish is not None:
        body["stop_reason"] = finish_to_wire(finish)
        body["stop_sequence"] = finish.stop_sequence
        if finish.details is not None:
            body["stop_details"] = finish.details
    body["usage"] = usage_to_wire(fold.usage) if fold.usage is not None else {"input_tokens": 0, "output_tokens": 0}
    return body


def _json(text: str) -> Any:
    try:
        return _decoder.decode(text)
    except msgspec.DecodeError:
        return {}
