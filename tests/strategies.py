"""Hypothesis strategies for valid StreamChunk sequences (any, and those the OpenAI wire format can carry),
shared by the property tests."""

from __future__ import annotations

import itertools
import json
import string
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
    validate,
)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


# The strings r"call_[a-z0-9]{1,8}" matches; a third of the cost of ``st.from_regex`` per draw.
_call_ids = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=8).map("call_".__add__)


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
        call_id = CallId(draw(_call_ids))
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


_piece = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=6)
_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@st.composite
def wire_streams(draw: st.DrawFn) -> list[StreamChunk]:
    """Valid streams the OpenAI format can carry: no empty blocks, no two adjacent text/reasoning blocks."""
    kinds = draw(st.lists(st.sampled_from(["text", "reasoning", "tool"]), max_size=6))
    chunks: list[StreamChunk] = []
    previous = None
    index = 0
    for kind in kinds:
        if kind == previous and kind != "tool":
            continue
        previous = kind
        chunks.append(BlockStart(index=index, block_type="tool-call" if kind == "tool" else kind))  # type: ignore[arg-type]
        if kind == "tool":
            arguments = json.dumps(draw(_json_value), ensure_ascii=draw(st.booleans()))
            cuts = sorted(draw(st.lists(st.integers(0, len(arguments)), max_size=4)))
            pieces = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True)]
            pieces = [pieces[0]] + [p for p in pieces[1:] if p]
            call_id, name = CallId(f"call_{index}"), draw(st.sampled_from(["get_weather", "查询", "f"]))
            chunks.append(ToolCallDelta(index=index, id=call_id, name=name, arguments_delta=pieces[0]))
            chunks += [ToolCallDelta(index=index, arguments_delta=p) for p in pieces[1:]]
            chunks.append(BlockEnd(index=index, block=ToolCallBlock(id=call_id, name=name, arguments=arguments)))
        else:
            pieces = draw(st.lists(_piece, min_size=1, max_size=4))
            if kind == "text":
                chunks += [TextDelta(index=index, text=p) for p in pieces]
                chunks.append(BlockEnd(index=index, block=TextBlock(text="".join(pieces))))
            else:
                chunks += [ReasoningDelta(index=index, text=p) for p in pieces]
                chunks.append(BlockEnd(index=index, block=ReasoningBlock(text="".join(pieces))))
        index += 1
    optional = st.none() | st.integers(0, 10**6)
    if draw(st.booleans()):
        usage = TokenUsage(
            input_tokens=draw(st.integers(0, 10**6)),
            output_tokens=draw(st.integers(0, 10**6)),
            cached_input_tokens=draw(optional),
            reasoning_tokens=draw(optional),
        )
        chunks.append(UsageChunk(usage=usage))
    finish: FinishKind = draw(st.sampled_from(["stop", "tool-calls", "length", "content-filter", "error", "cancelled"]))
    detail = draw(st.sampled_from([None, "insufficient_system_resource"])) if finish == "error" else None
    chunks.append(Finish(reason=FinishReason(kind=finish, detail=detail)))
    validate(chunks)
    return chunks
