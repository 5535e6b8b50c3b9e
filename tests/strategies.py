"""Hypothesis strategies for valid StreamChunk sequences, shared by the property tests."""

from __future__ import annotations

import itertools
from typing import Any, get_args

import msgspec
from hypothesis import strategies as st

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    Finish,
    FinishKind,
    FinishReason,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def split_text(draw: st.DrawFn, text: str, *, min_pieces: int = 1) -> list[str]:
    """Split ``text`` at arbitrary points (pieces may be empty strings)."""
    if not text:
        return [""] * min_pieces
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), min_size=min_pieces - 1, max_size=6)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def blocks(draw: st.DrawFn, index: int) -> list[StreamChunk]:
    kind = draw(st.sampled_from(["text", "reasoning", "tool-call"]))
    if kind == "tool-call":
        arguments = msgspec.json.encode(draw(json_values)).decode()
        pieces = draw(split_text(arguments))
        call_id = CallId(draw(st.from_regex(r"call_[a-z0-9]{1,8}", fullmatch=True)))
        name = draw(st.sampled_from(["bash", "read_file", "search"]))
        deltas: list[StreamChunk] = [ToolCallDelta(index=index, id=call_id, name=name, arguments_delta=pieces[0])]
        deltas += [ToolCallDelta(index=index, arguments_delta=piece) for piece in pieces[1:]]
        end = BlockEnd(index=index, block=ToolCallBlock(id=call_id, name=name, arguments=arguments))
        return [BlockStart(index=index, block_type="tool-call"), *deltas, end]
    text = draw(st.text(min_size=1, max_size=40))
    pieces = draw(split_text(text))
    if kind == "text":
        return [
            BlockStart(index=index, block_type="text"),
            *(TextDelta(index=index, text=p) for p in pieces),
            BlockEnd(index=index, block=TextBlock(text=text)),
        ]
    return [
        BlockStart(index=index, block_type="reasoning"),
        *(ReasoningDelta(index=index, text=p) for p in pieces),
        BlockEnd(index=index, block=ReasoningBlock(text=text)),
    ]


@st.composite
def valid_streams(draw: st.DrawFn, *, min_blocks: int = 0, with_usage: bool | None = None) -> list[StreamChunk]:
    """A stream that obeys every rule: blocks in order, optional usage, then finish."""
    count = draw(st.integers(min_blocks, 4))
    chunks: list[StreamChunk] = []
    for index in range(count):
        chunks += draw(blocks(index))
    usage = draw(st.booleans()) if with_usage is None else with_usage
    if usage:
        chunks.append(UsageChunk(usage=TokenUsage(input_tokens=draw(st.integers(0, 999)), output_tokens=count)))
    kind: FinishKind = draw(st.sampled_from(get_args(FinishKind)))
    chunks.append(Finish(reason=FinishReason(kind=kind)))
    return chunks
