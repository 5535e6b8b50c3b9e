"""The encoder of OpenAI Responses (us -> wire): StreamChunk -> the ``/v1/responses`` event stream.

``ResponsesEncoder`` renders a chunk stream as the Responses API streams it: ``response.created`` and
``response.in_progress``, per block one output item (``output_item.added``, its parts and deltas, the ``*.done``
events, ``output_item.done``), then ``response.completed`` (or ``response.incomplete``) with every item and the
usage; every event carries the next ``sequence_number``. Its own ``ProviderEvent``s go out untouched in their place,
so a stream the decoder read comes back event for event (less each delta's random ``obfuscation`` padding, which
carries nothing). What it cannot carry from another protocol it names in ``lost``.
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
    ServerToolCallBlock,
    ServerToolResultBlock,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from chunktape.wire._encoding import encoded_events, own_event, own_opening
from chunktape.wire._responses.fields import (
    PROTOCOL,
    default_item,
    finish_to_wire,
    server_item_type,
    usage_to_wire,
)
from chunktape.wire._sse import json_event

__all__ = [
    "MALFORMED_EVENT",
    "ResponsesEncoder",
    "chunks_to_responses_events",
    "response_from_chunks",
]

_decoder = msgspec.json.Decoder()

MALFORMED_EVENT = b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", "delta": "\n\n'
"""An event whose JSON is cut off: what a corrupted Responses stream looks like on the wire."""


def _envelope(model: str, id: str) -> dict[str, Any]:
    return {
        "id": id,
        "object": "response",
        "created_at": 0,
        "status": "in_progress",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "truncation": "disabled",
        "usage": None,
        "metadata": {},
    }


class _Open:
    """The output item being streamed, and what its parts hold so far."""

    __slots__ = ("index", "item", "kind", "parts", "pending", "texts", "wire_id")

    def __init__(self, index: int, kind: str, item: dict[str, Any] | None, wire_id: str | None = None) -> None:
        self.index = index
        self.kind = kind
        self.item = item
        self.wire_id = wire_id
        self.pending = item is None
        """A call item waiting for its call id and name (its first delta)."""
        self.parts: list[list[Any]] = []
        """Per part, the citations it got."""
        self.texts: list[list[str]] = []


class ResponsesEncoder:
    """Incremental: ``start()``, then ``feed(chunk)`` per chunk; each returns the SSE bytes to send.

    ``response`` is ``response.created``'s response as recorded (``ResponseMeta.extras["response"]``) and
    ``terminal`` what the terminal event's response changed (``ResponsesDecoder.terminal``); without them the
    response is chunktape's own (``id``, ``model``).
    """

    __slots__ = (
        "_blocks",
        "_final",
        "_open",
        "_output",
        "_response",
        "_sequence",
        "_terminal",
        "_usage",
        "finished",
        "lost",
    )

    def __init__(
        self,
        *,
        model: str,
        id: str = "resp_chunktape",
        response: dict[str, Any] | None = None,
        terminal: dict[str, Any] | None = None,
    ) -> None:
        self._terminal = terminal or {}
        self._response: dict[str, Any] = dict(response) if response is not None else _envelope(model, id)
        self._response.update(status="in_progress", output=[], usage=None)
        self._sequence = 0
        self._open: _Open | None = None
        self._output: list[dict[str, Any]] = []
        self._blocks = 0
        self._usage: TokenUsage | None = None
        self._final: dict[str, Any] | None = None
        self.finished = False
        self.lost: set[str] = set()

    def final(self) -> dict[str, Any]:
        """The response as the terminal event carried it (as it stands, without a finish)."""
        if self._final is not None:
            return self._final
        return {**self._response, "output": self._output, "usage": None}

    def failure(self, message: str, *, code: str) -> bytes:
        """An in-stream ``error`` event, then ``response.failed``: how the Responses API fails mid-stream."""
        failed = {**self._response, "status": "failed", "output": self._output}
        failed["error"] = {"code": code, "message": message}
        return self._event("error", code=code, message=message, param=None) + self._event(
            "response.failed", response=failed
        )

    @property
    def response_id(self) -> str:
        return str(self._response.get("id", "resp_chunktape"))

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = {"type": kind, **fields, "sequence_number": self._sequence}
        self._sequence += 1
        return json_event(event, event=kind)

    def start(self) -> bytes:
        return self._event("response.created", response=self._response) + self._event(
            "response.in_progress", response=self._response
        )

    # -- items ---------------------------------------------------------------------------------------

    def _added(self, block: _Open) -> bytes:
        assert block.item is not None
        block.pending = False
        return self._event("response.output_item.added", output_index=block.index, item=block.item)

    def _part_added(self, block: _Open) -> bytes:
        assert block.item is not None
        item_id, number = block.item["id"], len(block.parts)
        block.parts.append([])
        block.texts.append([])
        if block.kind == "message":
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            return self._event(
                "response.content_part.added",
                item_id=item_id,
                output_index=block.index,
                content_index=number,
                part=part,
            )
        part = {"type": "summary_text", "text": ""}
        return self._event(
            "response.reasoning_summary_part.added",
            item_id=item_id,
            output_index=block.index,
            part=part,
            summary_index=number,
        )

    def _part_done(self, block: _Open) -> bytes:
        assert block.item is not None
        item_id, number = block.item["id"], len(block.parts) - 1
        text = "".join(block.texts[number])
        if block.kind == "message":
            part = {"type": "output_text", "annotations": block.parts[number], "logprobs": [], "text": text}
            where = {"item_id": item_id, "output_index": block.index, "content_index": number}
            return self._event("response.output_text.done", **where, text=text, logprobs=[]) + self._event(
                "response.content_part.done", **where, part=part
            )
        where = {"item_id": item_id, "output_index": block.index, "summary_index": number}
        return self._event("response.reasoning_summary_text.done", **where, text=text) + self._event(
            "response.reasoning_summary_part.done", **where, part={"type": "summary_text", "text": text}
        )

    def _to_part(self, block: _Open, part: int) -> bytes:
        """Open parts up to ``part`` (closing the one before), as the provider moves from part to part."""
        out = b""
        while len(block.parts) <= part:
            if block.parts:
                out += self._part_done(block)
            out += self._part_added(block)
        return out

    def _item_id(self, chunk: BlockStart, prefix: str) -> str:
        return chunk.id or f"{prefix}_chunktape_{chunk.index}"

    def feed(self, chunk: StreamChunk) -> bytes:
        match chunk:
            case BlockStart():
                return self._start(chunk)
            case TextDelta():
                block = self._open
                if block is None or block.kind != "message":
                    return b""
                assert block.item is not None
                out = self._to_part(block, chunk.part or 0)
                where = {"item_id": block.item["id"], "output_index": block.index, "content_index": chunk.part or 0}
                if chunk.citation is not None:
                    citations = block.parts[chunk.part or 0]
                    citations.append(chunk.citation)
                    return out + self._event(
                        "response.output_text.annotation.added",
                        **where,
                        annotation_index=len(citations) - 1,
                        annotation=chunk.citation,
                    )
                block.texts[chunk.part or 0].append(chunk.text)
                return out + self._event("response.output_text.delta", **where, delta=chunk.text, logprobs=[])
            case ReasoningDelta():
                block = self._open
                if block is None or block.kind != "reasoning":
                    return b""
                if chunk.signature is not None:
                    self.lost.add("thinking signatures")
                    return b""
                assert block.item is not None
                out = self._to_part(block, chunk.part or 0)
                block.texts[chunk.part or 0].append(chunk.text)
                return out + self._event(
                    "response.reasoning_summary_text.delta",
                    item_id=block.item["id"],
                    output_index=block.index,
                    summary_index=chunk.part or 0,
                    delta=chunk.text,
                )
            case ToolCallDelta():
                block = self._open
                if block is None:
                    return b""
                out = b""
                if block.pending:
                    id = chunk.id or f"call_chunktape_{block.index}"
                    if block.kind == "function_call":
                        item_id = block.wire_id or f"fc_chunktape_{block.index}"
                        block.item = default_item("function_call", id=item_id, call_id=id, name=chunk.name)
                    else:
                        block.item = default_item(server_item_type(chunk.name or "server_tool"), id=id)
                    out = self._added(block)
                if block.kind == "function_call" and (chunk.arguments_delta or chunk.id is None):
                    assert block.item is not None
                    block.texts.append([chunk.arguments_delta])
                    out += self._event(
                        "response.function_call_arguments.delta",
                        item_id=block.item["id"],
                        output_index=block.index,
                        delta=chunk.arguments_delta,
                    )
                return out
            case BlockEnd():
                return self._end(chunk)
            case UsageChunk():
                self._usage = chunk.usage
                return b""
            case Finish():
                self.finished = True
                status, details = finish_to_wire(chunk.reason)
                response = {
                    **self._response,
                    **self._terminal,
                    "status": status,
                    "incomplete_details": details,
                    "output": self._output,
                    "usage": usage_to_wire(self._usage) if self._usage is not None else None,
                }
                self._final = response
                return self._event(f"response.{status}", response=response)
            case ProviderEvent():
                recorded = own_event(chunk, PROTOCOL, self.lost)
                if recorded is None:
                    return b""
                self._sequence += 1  # the recorded event holds its own sequence number
                return recorded

    def _start(self, chunk: BlockStart) -> bytes:
        opening = own_opening(chunk, PROTOCOL, self.lost)
        index = self._blocks
        self._blocks += 1
        match chunk.block_type:
            case "text":
                item = opening or default_item("message", id=self._item_id(chunk, "msg"))
                block = self._open = _Open(index, "message", dict(item))
                return self._added(block) + self._part_added(block)
            case "reasoning":
                item = opening or default_item("reasoning", id=self._item_id(chunk, "rs"))
                block = self._open = _Open(index, "reasoning", dict(item))
                return self._added(block)
            case "tool-call":
                block = self._open = _Open(index, "function_call", dict(opening) if opening else None, chunk.id)
                return self._added(block) if opening else b""
            case "server-tool-call":
                block = self._open = _Open(index, "server", dict(opening) if opening else None, chunk.id)
                return self._added(block) if opening else b""
            case "server-tool-result":
                if opening is None:
                    self.lost.add("server tool results")
                    self._blocks -= 1
                    self._open = None
                    return b""
                block = self._open = _Open(index, "other", dict(opening))
                return self._added(block)

    def _end(self, chunk: BlockEnd) -> bytes:
        block, self._open = self._open, None
        if block is None:
            return b""
        out = b""
        source = block.item or {}
        done: dict[str, Any]
        match chunk.block:
            case TextBlock():
                if not block.parts:
                    out += self._part_added(block)
                out += self._part_done(block)
                content = [
                    {"type": "output_text", "annotations": citations, "logprobs": [], "text": "".join(texts)}
                    for citations, texts in zip(block.parts, block.texts, strict=True)
                ]
                done = {**source, "status": "completed", "content": content}
            case ReasoningBlock() as reasoning:
                if block.parts:
                    out += self._part_done(block)
                summary = [{"type": "summary_text", "text": "".join(texts)} for texts in block.texts]
                done = {**source, "summary": summary}
                if reasoning.encrypted is not None:
                    done["encrypted_content"] = reasoning.encrypted
                if reasoning.signature is not None or reasoning.redacted is not None:
                    self.lost.add("thinking signatures and redacted thinking")
            case ToolCallBlock() as call:
                if block.pending:
                    item_id = block.wire_id or f"fc_chunktape_{block.index}"
                    block.item = default_item("function_call", id=item_id, call_id=call.id, name=call.name)
                    out += self._added(block)
                    source = block.item
                out += self._event(
                    "response.function_call_arguments.done",
                    arguments=call.arguments,
                    item_id=source["id"],
                    output_index=block.index,
                )
                done = {**source, "status": "completed", "arguments": call.arguments}
            case ServerToolCallBlock() as call:
                if block.pending or block.item is None:
                    block.item = default_item(server_item_type(call.name), id=call.id)
                    out += self._added(block)
                    source = block.item
                fields = _decoder.decode(call.arguments) if call.arguments else {}
                done = {**source, "status": "completed", **(fields if isinstance(fields, dict) else {})}
            case ServerToolResultBlock() as result:
                done = result.content if isinstance(result.content, dict) else source
        self._output.append(done)
        return out + self._event("response.output_item.done", output_index=block.index, item=done)


def chunks_to_responses_events(
    chunks: Iterable[StreamChunk], *, model: str, id: str = "resp_chunktape", response: dict[str, Any] | None = None
) -> Iterator[bytes]:
    """The SSE bytes of a whole chunk stream, event by event, as ``ResponsesDecoder`` reads back to ``==`` chunks."""
    yield from encoded_events(ResponsesEncoder(model=model, id=id, response=response), chunks)


def response_from_chunks(
    chunks: Iterable[StreamChunk], *, model: str, id: str = "resp_chunktape", response: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A non-streamed ``response``: the completed (or incomplete) response object the chunks' events end with."""
    encoder = ResponsesEncoder(model=model, id=id, response=response)
    encoder.start()
    for chunk in chunks:
        encoder.feed(chunk)
    return encoder.final()
