"""Hypothesis strategies for valid StreamChunk sequences (any, and those the OpenAI wire format can carry),
shared by the property tests."""

from __future__ import annotations

import functools
import itertools
import json
import string
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, get_args

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

T = TypeVar("T")

_JSON_SHAPES: tuple[Callable[[Any, Any, str], Any], ...] = (
    lambda a, b, k: a,
    lambda a, b, k: [],
    lambda a, b, k: {},
    lambda a, b, k: [a, b],
    lambda a, b, k: {k: a},
    lambda a, b, k: {k: a, k + "_": b},
    lambda a, b, k: {k: [a, b]},
    lambda a, b, k: [{k: a}, b],
    lambda a, b, k: [a, [b, []], {}],
    lambda a, b, k: {k: [a, {k: b}], "": None},
    lambda a, b, k: [[[a]], {k: {}}, b],
    lambda a, b, k: {k: {k: {k: [a, b, True]}}},
)
"""Nested lists and dicts (empty, flat, deep, mixed) with two leaves and a key to fill in."""


def json_of(leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """JSON values: a sampled shape filled with drawn leaves and a drawn key.

    As varied where it matters (any leaf and key text, every kind of nesting) as ``st.recursive``, at a few
    choices a draw instead of dozens: tool-call arguments are drawn for most streams.
    """
    return st.builds(lambda shape, a, b, k: shape(a, b, k), st.sampled_from(_JSON_SHAPES), leaves, leaves, keys)


json_values: st.SearchStrategy[Any] = json_of(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12), st.text(max_size=6)
)


# The strings r"call_[a-z0-9]{1,8}" matches; a third of the cost of ``st.from_regex`` per draw.
_call_ids = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=8).map("call_".__add__)


_kinds = st.sampled_from(["text", "reasoning", "tool-call"])
_tool_names = st.sampled_from(["bash", "read_file", "search"])
_texts = st.text(min_size=1, max_size=40)
_block_counts = [st.integers(min_blocks, 4) for min_blocks in range(5)]
_finish_kinds: st.SearchStrategy[FinishKind] = st.sampled_from(get_args(FinishKind))
_input_tokens = st.integers(0, 999)


@functools.cache
def _byte_strings(min_size: int, max_size: int) -> st.SearchStrategy[bytes]:
    return st.binary(min_size=min_size, max_size=max_size)


def cut_points(
    draw: Callable[[st.SearchStrategy[Any]], Any], length: int, *, max_cuts: int, min_cuts: int = 0, inner: bool = False
) -> list[int]:
    """Sorted places to cut a text of ``length`` at: anywhere in ``0..length``, repeats allowed (empty pieces), or
    with ``inner`` distinct and inside ``1..length-1`` (no piece empty).

    Drawn as one byte string, a byte a cut (two past 255 places) scaled onto the range so that every place can
    be drawn: one choice for hypothesis instead of two a cut. ``draw`` is a composite's ``draw`` or ``data.draw``.
    """
    low, span = (1, length - 2) if inner else (0, length)
    if span < 0:
        return []
    width = 1 if span <= 0xFF else 2
    raw = draw(_byte_strings(width * min_cuts, width * max_cuts))
    top = (1 << (8 * width)) - 1
    cuts = [
        low + round(int.from_bytes(raw[at : at + width]) * span / top) for at in range(0, len(raw) - width + 1, width)
    ]
    return sorted(set(cuts) if inner else cuts)


def picks(options: Sequence[T], *, min_size: int = 0, max_size: int) -> st.SearchStrategy[list[T]]:
    """Lists of ``options`` (repeats allowed) as long as ``st.lists(st.sampled_from(options), ...)`` draws them,
    drawn as one byte string (a byte an item): one choice for hypothesis instead of two an item."""
    return _byte_strings(min_size, max_size).map(lambda raw: [options[byte % len(options)] for byte in raw])


def _split(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at arbitrary points into deltas (pieces may be empty strings)."""
    bounds = [0, *cut_points(draw, len(text), max_cuts=6), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _block(draw: st.DrawFn, index: int) -> list[StreamChunk]:
    """One whole block at ``index``: text, reasoning or a tool call, its deltas split anyhow."""
    kind = draw(_kinds)
    if kind == "tool-call":
        arguments = msgspec.json.encode(draw(json_values)).decode()
        pieces = _split(draw, arguments)
        call_id = CallId(draw(_call_ids))
        name = draw(_tool_names)
        deltas: list[StreamChunk] = [ToolCallDelta(index=index, id=call_id, name=name, arguments_delta=pieces[0])]
        deltas += [ToolCallDelta(index=index, arguments_delta=piece) for piece in pieces[1:]]
        end = BlockEnd(index=index, block=ToolCallBlock(id=call_id, name=name, arguments=arguments))
        return [BlockStart(index=index, block_type="tool-call"), *deltas, end]
    text = draw(_texts)
    pieces = _split(draw, text)
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
    # Module-level strategies and plain helpers: a strategy built per draw costs hypothesis a validation each time.
    count = draw(_block_counts[min_blocks])
    chunks: list[StreamChunk] = []
    for index in range(count):
        chunks += _block(draw, index)
    usage = draw(st.booleans()) if with_usage is None else with_usage
    if usage:
        chunks.append(UsageChunk(usage=TokenUsage(input_tokens=draw(_input_tokens), output_tokens=count)))
    chunks.append(Finish(reason=FinishReason(kind=draw(_finish_kinds))))
    return chunks


_piece = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=6)
_json_value = json_of(st.none() | st.booleans() | st.integers() | st.text(max_size=5), st.text(max_size=4))
_wire_kinds = picks(["text", "reasoning", "tool"], max_size=6)
_wire_pieces = st.lists(_piece, min_size=1, max_size=4)
_wire_tool_names = st.sampled_from(["get_weather", "查询", "f"])
_tokens = st.integers(0, 10**6)
_optional_tokens = st.none() | _tokens
_wire_finish_kinds: st.SearchStrategy[FinishKind] = st.sampled_from(
    ["stop", "tool-calls", "length", "content-filter", "error", "cancelled"]
)
_error_details = st.sampled_from([None, "insufficient_system_resource"])


@st.composite
def wire_streams(draw: st.DrawFn) -> list[StreamChunk]:
    """Valid streams the OpenAI format can carry: no empty blocks, no two adjacent text/reasoning blocks."""
    kinds = draw(_wire_kinds)
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
            cuts = cut_points(draw, len(arguments), max_cuts=4)
            pieces = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True)]
            pieces = [pieces[0]] + [p for p in pieces[1:] if p]
            call_id, name = CallId(f"call_{index}"), draw(_wire_tool_names)
            chunks.append(ToolCallDelta(index=index, id=call_id, name=name, arguments_delta=pieces[0]))
            chunks += [ToolCallDelta(index=index, arguments_delta=p) for p in pieces[1:]]
            chunks.append(BlockEnd(index=index, block=ToolCallBlock(id=call_id, name=name, arguments=arguments)))
        else:
            pieces = draw(_wire_pieces)
            if kind == "text":
                chunks += [TextDelta(index=index, text=p) for p in pieces]
                chunks.append(BlockEnd(index=index, block=TextBlock(text="".join(pieces))))
            else:
                chunks += [ReasoningDelta(index=index, text=p) for p in pieces]
                chunks.append(BlockEnd(index=index, block=ReasoningBlock(text="".join(pieces))))
        index += 1
    if draw(st.booleans()):
        usage = TokenUsage(
            input_tokens=draw(_tokens),
            output_tokens=draw(_tokens),
            cached_input_tokens=draw(_optional_tokens),
            reasoning_tokens=draw(_optional_tokens),
        )
        chunks.append(UsageChunk(usage=usage))
    finish = draw(_wire_finish_kinds)
    detail = draw(_error_details) if finish == "error" else None
    chunks.append(Finish(reason=FinishReason(kind=finish, detail=detail)))
    validate(chunks)
    return chunks
