"""Checks a chunk stream against the StreamChunk rules, incrementally, one chunk at a time.

Rules (each violation raises ``ProtocolViolation`` naming one of these):

``block-pairs``         block-start and block-end come in pairs; deltas, usage and finish only outside
                        or inside the right place
``index-order``         indexes start at 0 and increase by one; a delta or block-end carries its
                        block's index (no interleaving)
``arguments-delta``     argumentsDelta pieces concatenate to the block-end's arguments, valid JSON (a
                        tool call the token limit ``cut`` stops early: the start of a JSON text, in the last
                        block, before a ``length`` finish)
``finish-last``         finish is the last chunk, exactly once
``usage-before-finish`` at most one usage chunk, before finish
``block-content``       a block-end's block is the concatenation of its deltas, of the started type
``chunk-shape``         the object is a StreamChunk with sane fields (e.g. no negative index)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NoReturn, get_args

import msgspec

from chunktape._errors import ProtocolViolation
from chunktape._json_prefix import unfinished_json
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    BlockType,
    Finish,
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
    UsageChunk,
)

__all__ = [
    "RULES",
    "StreamValidator",
    "shortened",
    "validate",
]

RULES = (
    "block-pairs",
    "index-order",
    "arguments-delta",
    "finish-last",
    "usage-before-finish",
    "block-content",
    "chunk-shape",
)

_DELTA_BLOCK_TYPE: dict[type, BlockType] = {
    TextDelta: "text",
    ReasoningDelta: "reasoning",
    ToolCallDelta: "tool-call",
}
_BLOCK_TYPE: dict[type, BlockType] = {
    TextBlock: "text",
    ReasoningBlock: "reasoning",
    ToolCallBlock: "tool-call",
    ServerToolCallBlock: "server-tool-call",
    ServerToolResultBlock: "server-tool-result",
}
_DELTAS_IN: dict[BlockType, type] = {
    "text": TextDelta,
    "reasoning": ReasoningDelta,
    "tool-call": ToolCallDelta,
    "server-tool-call": ToolCallDelta,
}
"""The delta type each block type streams (a server tool's input streams like a tool call's arguments; a server
tool's result has no deltas)."""
_BLOCK_TYPES = frozenset(get_args(BlockType))
_json_decoder = msgspec.json.Decoder()


class StreamValidator:
    """Feed every chunk in order, then ``close()``; the first broken rule raises ``ProtocolViolation``.

    ``require_finish`` makes ``close()`` insist the stream is complete: no block left open, a final ``finish``.
    Turn it off to validate a stream that was cut short on purpose (a recorded cancellation, a crash), which
    may stop anywhere, mid-block included; every chunk up to the cut is still checked.
    """

    __slots__ = (
        "_cut_at",
        "_extras",
        "_finished",
        "_next_index",
        "_open_id",
        "_open_index",
        "_open_name",
        "_open_type",
        "_pieces",
        "_saw_usage",
        "position",
        "require_finish",
    )

    def __init__(self, *, require_finish: bool = True) -> None:
        self.require_finish = require_finish
        self.position = 0
        """How many chunks were accepted so far."""
        self._next_index = 0
        self._open_index = -1
        self._open_type: BlockType | None = None
        self._open_id: str | None = None
        self._open_name: str | None = None
        self._pieces: list[str] = []
        self._extras: list[object] = []
        """The open block's signature pieces (reasoning) or citations (text), in order."""
        self._saw_usage = False
        self._finished = False
        self._cut_at: int | None = None
        """Where a tool call the token limit cut ended: no block may follow it, and the finish must be ``length``."""

    def feed(self, chunk: StreamChunk) -> None:
        """Accept the next chunk or raise ``ProtocolViolation``."""
        if type(chunk) is TextDelta or type(chunk) is ReasoningDelta:
            # Most chunks: a delta inside its open block, accepted here after the same checks as below (an open
            # block means no finish yet); anything else takes the full path, which names what is wrong.
            index, text = chunk.index, chunk.text
            if (
                index == self._open_index
                and _DELTA_BLOCK_TYPE[type(chunk)] == self._open_type
                and type(index) is int
                and type(text) is str
                and (chunk.signature if isinstance(chunk, ReasoningDelta) else chunk.citation) is None
            ):
                self._pieces.append(text)
                self.position += 1
                return
        if self._finished:
            if type(chunk) is UsageChunk:
                self._fail("usage-before-finish", "usage arrived after finish")
            self._fail("finish-last", f"{_tag(chunk)} arrived after finish")
        match chunk:
            case TextDelta():
                self._delta(chunk, chunk.index)
                self._check_str("text", chunk.text)
                self._pieces.append(chunk.text)
                if chunk.citation is not None:
                    self._extras.append(chunk.citation)
            case ReasoningDelta():
                self._delta(chunk, chunk.index)
                self._check_str("text", chunk.text)
                self._check_str("signature", chunk.signature, optional=True)
                self._pieces.append(chunk.text)
                if chunk.signature is not None:
                    self._extras.append(chunk.signature)
            case ToolCallDelta():
                self._delta(chunk, chunk.index)
                self._check_str("argumentsDelta", chunk.arguments_delta)
                self._check_str("id", chunk.id, optional=True)
                self._check_str("name", chunk.name, optional=True)
                self._pieces.append(chunk.arguments_delta)
                if chunk.id is not None:
                    if self._open_id is not None and chunk.id != self._open_id:
                        self._fail("block-content", f"tool call id changed from {self._open_id!r} to {chunk.id!r}")
                    self._open_id = chunk.id
                if chunk.name is not None:
                    if self._open_name is not None and chunk.name != self._open_name:
                        self._fail("block-content", f"tool name changed from {self._open_name!r} to {chunk.name!r}")
                    self._open_name = chunk.name
            case BlockStart():
                self._check_index(chunk.index)
                if chunk.block_type not in _BLOCK_TYPES:
                    self._fail("chunk-shape", f"unknown blockType {chunk.block_type!r}")
                if self._open_type is not None:
                    self._fail("block-pairs", f"block-start {chunk.index} while block {self._open_index} is still open")
                if chunk.index != self._next_index:
                    self._fail("index-order", f"block-start index {chunk.index}, expected {self._next_index}")
                if self._cut_at is not None:
                    self._fail("arguments-delta", f"a block after the tool call the token limit cut at {self._cut_at}")
                self._open_index = chunk.index
                self._open_type = chunk.block_type
                self._open_id = self._open_name = None
                self._pieces = []
                self._extras = []
            case BlockEnd():
                self._end(chunk)
            case UsageChunk():
                if self._open_type is not None:
                    self._fail("block-pairs", f"usage while block {self._open_index} is still open")
                if self._saw_usage:
                    self._fail("usage-before-finish", "a second usage chunk")
                self._saw_usage = True
            case Finish():
                if self._open_type is not None:
                    self._fail("block-pairs", f"finish while block {self._open_index} is still open")
                if self._cut_at is not None and chunk.reason.kind != "length":
                    kind = chunk.reason.kind
                    self._fail("arguments-delta", f"a tool call cut at chunk {self._cut_at}, then a {kind} finish")
                self._finished = True
            case ProviderEvent():
                self._check_str("protocol", chunk.protocol)
                self._check_str("data", chunk.data)
            case _:
                self._fail("chunk-shape", f"not a StreamChunk: {type(chunk).__name__}")
        self.position += 1

    def close(self) -> None:
        """Declare the end of the stream; by default raises if a block is open or finish is missing."""
        if not self.require_finish:
            return
        if self._open_type is not None:
            self._fail("block-pairs", f"stream ended while block {self._open_index} is still open")
        if not self._finished:
            self._fail("finish-last", "stream ended without a finish chunk")

    # -- helpers ----------------------------------------------------------------------------

    def _check_str(self, field: str, value: object, *, optional: bool = False) -> None:
        if type(value) is not str and not (optional and value is None):
            self._fail("chunk-shape", f"{field} must be a string, got {type(value).__name__}")

    def _check_index(self, index: object) -> None:
        if type(index) is not int or index < 0:
            self._fail("chunk-shape", f"index must be a non-negative int, got {index!r}")

    def _delta(self, chunk: StreamChunk, index: int) -> None:
        self._check_index(index)
        if self._open_type is None:
            self._fail("block-pairs", f"{_tag(chunk)} for index {index} outside any block")
        if index != self._open_index:
            self._fail("index-order", f"{_tag(chunk)} carries index {index} inside block {self._open_index}")
        if _DELTAS_IN.get(self._open_type) is not type(chunk):
            self._fail("block-content", f"{_tag(chunk)} inside a {self._open_type} block")

    def _end(self, chunk: BlockEnd) -> None:
        self._check_index(chunk.index)
        if self._open_type is None:
            self._fail("block-pairs", f"block-end {chunk.index} without a block-start")
        if chunk.index != self._open_index:
            self._fail("index-order", f"block-end index {chunk.index} inside block {self._open_index}")
        block = chunk.block
        block_type = _BLOCK_TYPE.get(type(block))
        if block_type is None:
            self._fail("chunk-shape", f"block-end carries {type(block).__name__}, not a block")
        if block_type != self._open_type:
            self._fail("block-content", f"block-end carries a {block_type} block for a {self._open_type} block")
        streamed = "".join(self._pieces)
        if isinstance(block, ToolCallBlock | ServerToolCallBlock):
            for field in ("id", "name", "arguments"):
                self._check_str(field, getattr(block, field))
            if block.arguments != streamed:
                self._fail(
                    "arguments-delta",
                    f"argumentsDelta pieces give {shortened(streamed)}, block-end says {shortened(block.arguments)}",
                )
            if isinstance(block, ToolCallBlock) and block.cut:
                if not unfinished_json(block.arguments):
                    self._fail(
                        "arguments-delta",
                        f"a cut tool call's arguments are not the start of a JSON text: {shortened(block.arguments)}",
                    )
                self._cut_at = self.position
            else:
                try:
                    _json_decoder.decode(block.arguments)
                except msgspec.DecodeError:
                    self._fail("arguments-delta", f"arguments are not valid JSON: {shortened(block.arguments)}")
            if self._open_id is not None and block.id != self._open_id:
                self._fail("block-content", f"block-end id {block.id!r}, deltas said {self._open_id!r}")
            if self._open_name is not None and block.name != self._open_name:
                self._fail("block-content", f"block-end name {block.name!r}, deltas said {self._open_name!r}")
        elif isinstance(block, TextBlock | ReasoningBlock):
            self._check_str("text", block.text)
            if block.text != streamed:
                said = shortened(block.text)
                self._fail("block-content", f"deltas give {shortened(streamed)}, block-end says {said}")
            if isinstance(block, ReasoningBlock):
                signature = "".join(str(piece) for piece in self._extras)
                if signature != (block.signature or ""):
                    said = shortened(block.signature or "")
                    self._fail("block-content", f"signature pieces give {shortened(signature)}, block-end says {said}")
            elif self._extras != (block.citations or []):
                self._fail("block-content", f"{len(self._extras)} streamed citation(s) differ from the block-end's")
        elif isinstance(block, ServerToolResultBlock):
            self._check_str("toolUseId", block.tool_use_id)
        self._open_type = None
        self._next_index = self._open_index + 1
        self._pieces = []

    def _fail(self, rule: str, detail: str) -> NoReturn:
        raise ProtocolViolation(rule, self.position, detail)


def validate(chunks: Iterable[StreamChunk], *, require_finish: bool = True) -> None:
    """Validate a whole stream at once; raises ``ProtocolViolation`` at the first broken rule."""
    validator = StreamValidator(require_finish=require_finish)
    for chunk in chunks:
        validator.feed(chunk)
    validator.close()


def _tag(chunk: object) -> str:
    config = getattr(type(chunk), "__struct_config__", None)
    tag = getattr(config, "tag", None)
    return str(tag) if tag is not None else type(chunk).__name__


def shortened(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
