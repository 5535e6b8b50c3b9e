"""The encoder of OpenAI chat completions (us -> wire): StreamChunk -> ``chat.completion.chunk`` objects and SSE.

``chunks_to_openai_dicts`` / ``chunks_to_openai_events`` render a chunk stream as an
OpenAI-style stream (role chunk, one chunk per delta, finish chunk, usage-only chunk, ``[DONE]``) that the
decoder turns back into ``==`` chunks. What the format cannot carry: a finish ``detail`` except on ``error``
(where it becomes the ``finish_reason``), two adjacent blocks of the same text/reasoning type (they merge),
and blocks without deltas.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    Finish,
    ProviderEvent,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from chunktape.wire._openai_chat.fields import DONE, finish_to_wire, usage_to_wire
from chunktape.wire._sse import json_event

__all__ = [
    "DONE_EVENT",
    "MALFORMED_EVENT",
    "OpenAIChatEncoder",
    "chunks_to_openai_dicts",
    "chunks_to_openai_events",
    "data_event",
]


MALFORMED_EVENT = b'data: {"id": "chatcmpl-chunktape", "choices": [{"delta": {"content": "\n\n'
"""A ``data:`` line whose JSON is cut off: what a corrupted chat-completions stream looks like on the wire."""


class OpenAIChatEncoder:
    """Incremental form of ``chunks_to_openai_dicts``: ``start()``, then ``feed(chunk)`` per chunk, then ``close()``.

    For servers that render a stream as it is replayed; each call returns the chunk objects ready to send.
    """

    __slots__ = ("_base", "_tool_numbers", "_usage", "finished")

    def __init__(self, *, model: str, created: int = 0, id: str = "chatcmpl-chunktape") -> None:
        self._base: dict[str, Any] = {"id": id, "object": "chat.completion.chunk", "created": created, "model": model}
        self._tool_numbers: dict[int, int] = {}
        self._usage: TokenUsage | None = None
        self.finished = False
        """True once a ``Finish`` was fed (the stream may then end with ``[DONE]``)."""

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._base, "choices": [choice]}

    def start(self) -> dict[str, Any]:
        """The role chunk every OpenAI stream opens with."""
        return self._chunk({"role": "assistant", "content": ""})

    def feed(self, item: StreamChunk) -> list[dict[str, Any]]:
        """The chunk objects for one StreamChunk (none for block starts/ends and usage, which waits for the end)."""
        match item:
            case TextDelta():
                return [self._chunk({"content": item.text})]
            case ReasoningDelta():
                return [self._chunk({"reasoning_content": item.text})]
            case BlockStart() | BlockEnd() | ProviderEvent():
                # Blocks are implicit here; another protocol's events have no place in this one. Tested third: every
                # stream has two block events for each block, and each case above them is one more isinstance.
                return []
            case ToolCallDelta():
                number = self._tool_numbers.setdefault(item.index, len(self._tool_numbers))
                call: dict[str, Any] = {"index": number}
                function: dict[str, Any] = {}
                if item.id is not None:
                    call["id"] = item.id
                    call["type"] = "function"
                if item.name is not None:
                    function["name"] = item.name
                function["arguments"] = item.arguments_delta
                call["function"] = function
                return [self._chunk({"tool_calls": [call]})]
            case UsageChunk():
                self._usage = item.usage
                return []
            case Finish():
                self.finished = True
                return [self._chunk({}, finish_to_wire(item.reason))]

    def close(self) -> list[dict[str, Any]]:
        """The usage-only chunk (``choices: []``), when the stream had usage."""
        if self._usage is None:
            return []
        return [{**self._base, "choices": [], "usage": usage_to_wire(self._usage)}]


def chunks_to_openai_dicts(
    chunks: Iterable[StreamChunk], *, model: str, created: int = 0, id: str = "chatcmpl-chunktape"
) -> Iterator[dict[str, Any]]:
    """Render StreamChunks as ``chat.completion.chunk`` objects that ``OpenAIChatDecoder`` maps back to ``==``.

    Layout: a role chunk, one chunk per delta, a chunk with ``finish_reason``, then a usage-only chunk with
    ``choices: []`` (OpenAI's ``include_usage`` shape). Block starts and ends are implicit in the format.
    """
    encoder = OpenAIChatEncoder(model=model, created=created, id=id)
    yield encoder.start()
    for item in chunks:
        yield from encoder.feed(item)
    yield from encoder.close()


DONE_EVENT = b"data: " + DONE.encode() + b"\n\n"
"""The event that ends an OpenAI stream."""


data_event = json_event
"""One chunk object as an SSE ``data:`` event (``json_event``: compact JSON holds no newline, so one line is enough)."""


def chunks_to_openai_events(
    chunks: Iterable[StreamChunk], *, model: str, created: int = 0, id: str = "chatcmpl-chunktape"
) -> Iterator[bytes]:
    """The SSE bytes of ``chunks_to_openai_dicts``, one ``data:`` event each, then ``data: [DONE]``.

    ``[DONE]`` is written only when the stream has a ``finish`` (a cut-short recording ends without it).
    """
    encoder = OpenAIChatEncoder(model=model, created=created, id=id)
    yield data_event(encoder.start())
    for item in chunks:
        for obj in encoder.feed(item):
            yield data_event(obj)
    for obj in encoder.close():
        yield data_event(obj)
    if encoder.finished:
        yield DONE_EVENT
