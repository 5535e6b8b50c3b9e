"""The chunk layer of the fault transforms: ``CHUNKS``, the codec for ``StreamChunk`` streams, and the
corruptions of the chunk protocol (each breaks exactly the ``StreamValidator`` rule ``CORRUPT_RULES`` names).
"""

from __future__ import annotations

import random

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    BlockType,
    CallId,
    Finish,
    FinishReason,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from chunktape.faults._specs import Corrupt

__all__ = ["CHUNKS", "ChunkCodec"]

_DELTA_KINDS: dict[type, BlockType] = {TextDelta: "text", ReasoningDelta: "reasoning", ToolCallDelta: "tool-call"}


class ChunkCodec:
    """Every chunk counts and is paced; a chunk cannot be cut; ``after_bytes`` counts streamed content (UTF-8);
    a broken connection is ``STREAM_ABORTED``; unparseable data is the ``INVALID_RESPONSE`` a client parsing
    it would raise."""

    can_cut = False
    bytes_of = "of content"

    def counts(self, item: StreamChunk) -> bool:
        return True

    def paced(self, item: StreamChunk) -> bool:
        return True

    def finishes(self, item: StreamChunk) -> bool:
        return type(item) is Finish

    def tail(self, item: StreamChunk) -> bool:
        return type(item) is Finish or type(item) is UsageChunk

    def size(self, item: StreamChunk) -> int:
        if type(item) is TextDelta or type(item) is ReasoningDelta:
            return len(item.text.encode())
        if type(item) is ToolCallDelta:
            return len(item.arguments_delta.encode())
        return 0

    def cut(self, item: StreamChunk, size: int | None) -> StreamChunk:
        return item

    def carries(self, item: StreamChunk, kind: BlockType) -> bool:
        return _DELTA_KINDS.get(type(item)) == kind

    def opens(self, item: StreamChunk) -> BlockType | None:
        return item.block_type if type(item) is BlockStart else None

    def closes(self, item: StreamChunk) -> bool:
        return type(item) is BlockEnd

    def aborted(self, message: str) -> Exception:
        return LlmError(f"connection dropped {message}", ErrorCode.STREAM_ABORTED)

    def malformed(self, variant: int, label: str) -> StreamChunk:
        raise LlmError(f"unparseable chunk from the provider [{label}]", ErrorCode.INVALID_RESPONSE)

    def corrupter(self, fault: Corrupt, label: str) -> _Corrupter:
        return _Corrupter(fault, label)

    def reported(self, error: LlmError) -> StreamChunk:
        raise error  # a chunk stream has no error item: the adapter raises what the provider reported


CHUNKS = ChunkCodec()
"""The codec of chunk streams (``ReplayAdapter``, the replay server)."""


def _delta_like(chunk: StreamChunk | BlockStart, index: int, text: str) -> StreamChunk:
    """A delta of the same block type as ``chunk``'s block, carrying ``index``."""
    block_type = chunk.block_type if isinstance(chunk, BlockStart) else None
    if isinstance(chunk, ToolCallDelta) or block_type == "tool-call":
        return ToolCallDelta(index=index, id=CallId("call_interleaved"), name="interleaved", arguments_delta="{}")
    if isinstance(chunk, ReasoningDelta) or block_type == "reasoning":
        return ReasoningDelta(index=index, text=text)
    return TextDelta(index=index, text=text)


class _Corrupter:
    """Rewrites a valid stream, chunk by chunk, so that it breaks exactly the rule its kind names."""

    def __init__(self, fault: Corrupt, label: str) -> None:
        self.label = label
        self.kind = fault.kind
        rng = random.Random(fault.seed)
        self.variant = rng.randrange(3)
        self.after_deltas = rng.randrange(1, 4)
        self.junk = rng.choice((",", "}", '"', "{"))
        self.done = False
        self.next_index = 0
        self.open: BlockStart | None = None
        self.deltas = 0
        self.held_usage: UsageChunk | None = None

    def _note(self) -> str:
        return self.label

    def _finish(self) -> Finish:
        return Finish(reason=FinishReason(kind="stop", detail=self._note()))

    def feed(self, chunk: StreamChunk) -> list[StreamChunk]:
        """The chunks to emit in place of ``chunk``."""
        out = self._feed(chunk) if not self.done else [chunk]
        if isinstance(chunk, BlockStart):
            self.open, self.deltas = chunk, 0
        elif isinstance(chunk, BlockEnd):
            self.open = None
            self.next_index = chunk.index + 1
        elif isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
            self.deltas += 1
        return out

    def end(self) -> list[StreamChunk]:
        """The chunks to emit when the stream ends without having been corrupted yet."""
        if self.done:
            return []
        if self.kind in ("finish-not-last", "usage-after-finish", "duplicate-finish"):
            return self._tail(self._finish())  # the source never finished: corrupt around a finish of our own
        return self._before_tail()

    def _before_tail(self) -> list[StreamChunk]:
        """Structural corruptions for a stream that had no suitable block: inject one before usage/finish."""
        self.done = True
        index = self.next_index
        match self.kind:
            case "unpaired-block":
                return [BlockEnd(index=index, block=TextBlock(text=""))]
            case "bad-index":
                return [BlockStart(index=index + 1, block_type="text")]
            case "interleaved":
                return [BlockStart(index=index, block_type="text"), TextDelta(index=index + 1, text=self._note())]
            case "bad-arguments-json":
                arguments = '{"broken":}'  # no token limit cuts JSON so
                call_id = CallId("call_corrupt")
                return [
                    BlockStart(index=index, block_type="tool-call"),
                    ToolCallDelta(index=index, id=call_id, name="corrupt", arguments_delta=arguments),
                    BlockEnd(index=index, block=ToolCallBlock(id=call_id, name="corrupt", arguments=arguments)),
                ]
            case _:
                return []

    def _feed(self, chunk: StreamChunk) -> list[StreamChunk]:
        kind = self.kind
        if kind in ("finish-not-last", "usage-after-finish", "duplicate-finish"):
            return self._tail(chunk)
        if isinstance(chunk, UsageChunk | Finish) and self.open is None:
            return [*self._before_tail(), chunk]
        match kind:
            case "unpaired-block":
                if self.variant == 0 and not self.open and isinstance(chunk, BlockStart):
                    # A block-end with no block-start, right before the first block.
                    self.done = True
                    return [BlockEnd(index=chunk.index, block=TextBlock(text="")), chunk]
                if isinstance(chunk, BlockEnd):
                    self.done = True  # drop the first block-end: its block never closes
                    return []
            case "bad-index":
                if self.variant == 0 and isinstance(chunk, BlockStart):
                    self.done = True
                    return [msgspec.structs.replace(chunk, index=chunk.index + 1)]
                if self.variant == 1 and isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
                    self.done = True
                    return [msgspec.structs.replace(chunk, index=chunk.index + 1)]
                if self.variant != 0 and isinstance(chunk, BlockEnd):
                    self.done = True
                    return [msgspec.structs.replace(chunk, index=chunk.index + 1)]
            case "interleaved":
                if self.open is not None and isinstance(chunk, BlockEnd):
                    self.done = True  # the block ended before enough deltas: interleave right here
                    return [_delta_like(self.open, chunk.index + 1, self._note()), chunk]
                if (
                    isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta)
                    and self.deltas + 1 >= self.after_deltas
                ):
                    self.done = True
                    return [chunk, _delta_like(chunk, chunk.index + 1, self._note())]
            case "bad-arguments-json":
                if isinstance(chunk, BlockEnd) and isinstance(chunk.block, ToolCallBlock):
                    self.done = True
                    block = msgspec.structs.replace(chunk.block, arguments=chunk.block.arguments + self.junk)
                    return [
                        ToolCallDelta(index=chunk.index, arguments_delta=self.junk),
                        BlockEnd(index=chunk.index, block=block),
                    ]
        return [chunk]

    def _tail(self, chunk: StreamChunk) -> list[StreamChunk]:
        match self.kind:
            case "usage-after-finish":
                if isinstance(chunk, UsageChunk):
                    self.held_usage = chunk
                    return []
                if isinstance(chunk, Finish):
                    self.done = True
                    return [chunk, self.held_usage or UsageChunk(usage=TokenUsage(input_tokens=0, output_tokens=0))]
            case "duplicate-finish":
                if isinstance(chunk, Finish):
                    self.done = True
                    return [chunk, chunk]
            case "finish-not-last":
                if isinstance(chunk, Finish):
                    self.done = True
                    trailing: StreamChunk = BlockStart(index=self.next_index, block_type="text")
                    return [chunk, trailing]
        return [chunk]
