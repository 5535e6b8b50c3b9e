"""Each StreamChunk rule has a failing stream naming it; valid streams always pass."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    ErrorCode,
    Finish,
    FinishReason,
    LlmError,
    ProtocolViolation,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    StreamValidator,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    validate,
)
from chunktape._validation import RULES
from strategies import valid_streams

USAGE = UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=1))
FINISH = Finish(reason=FinishReason(kind="stop"))


def text_block(index: int, *pieces: str) -> list[StreamChunk]:
    return [
        BlockStart(index=index, block_type="text"),
        *(TextDelta(index=index, text=p) for p in pieces),
        BlockEnd(index=index, block=TextBlock(text="".join(pieces))),
    ]


def tool_block(index: int, *pieces: str, arguments: str | None = None) -> list[StreamChunk]:
    call_id = CallId(f"call_{index}")
    return [
        BlockStart(index=index, block_type="tool-call"),
        ToolCallDelta(index=index, id=call_id, name="bash", arguments_delta=pieces[0]),
        *(ToolCallDelta(index=index, arguments_delta=p) for p in pieces[1:]),
        BlockEnd(
            index=index,
            block=ToolCallBlock(id=call_id, name="bash", arguments="".join(pieces) if arguments is None else arguments),
        ),
    ]


def violation(chunks: list[StreamChunk]) -> ProtocolViolation:
    with pytest.raises(ProtocolViolation) as raised:
        validate(chunks)
    assert raised.value.code is ErrorCode.PROTOCOL_VIOLATION
    assert raised.value.rule in RULES
    return raised.value


def test_a_complete_stream_passes() -> None:
    validate([*text_block(0, "he", "llo"), *tool_block(1, '{"a"', ":1}"), USAGE, FINISH])


def test_a_stream_without_usage_passes_but_not_without_finish() -> None:
    validate([*text_block(0, "hi"), FINISH])
    error = violation([*text_block(0, "hi"), USAGE])
    assert (error.rule, error.position) == ("finish-last", 4)
    validate([*text_block(0, "hi")], require_finish=False)
    validate([BlockStart(index=0, block_type="text"), TextDelta(index=0, text="cut here")], require_finish=False)
    with pytest.raises(ProtocolViolation):  # cut short, but what came before the cut must still be valid
        validate([BlockStart(index=0, block_type="text"), TextDelta(index=1, text="x")], require_finish=False)


# -- rule 1: block-start and block-end come in pairs --------------------------------------


def test_rule_block_pairs_missing_block_end() -> None:
    error = violation([BlockStart(index=0, block_type="text"), TextDelta(index=0, text="x"), USAGE, FINISH])
    assert error.rule == "block-pairs"
    assert error.position == 2
    assert "rule 'block-pairs' broken at chunk #2" in str(error)


def test_rule_block_pairs_block_end_without_start() -> None:
    assert violation([BlockEnd(index=0, block=TextBlock(text="")), FINISH]).rule == "block-pairs"


def test_rule_block_pairs_delta_outside_a_block() -> None:
    assert violation([TextDelta(index=0, text="x"), FINISH]).rule == "block-pairs"


def test_rule_block_pairs_stream_ends_inside_a_block() -> None:
    error = violation([BlockStart(index=0, block_type="text")])
    assert (error.rule, error.position) == ("block-pairs", 1)


# -- rule 2: indexes start at 0 and increase, one block at a time --------------------------


def test_rule_index_order_must_start_at_zero() -> None:
    error = violation([*text_block(1, "x"), FINISH])
    assert (error.rule, error.position) == ("index-order", 0)


def test_rule_index_order_must_increase_by_one() -> None:
    assert violation([*text_block(0, "x"), *text_block(2, "y"), FINISH]).rule == "index-order"
    assert violation([*text_block(0, "x"), *text_block(0, "y"), FINISH]).rule == "index-order"


def test_rule_index_order_delta_must_carry_its_blocks_index() -> None:
    chunks: list[StreamChunk] = [BlockStart(index=0, block_type="text"), TextDelta(index=1, text="x")]
    assert violation(chunks).rule == "index-order"


# -- rule 3: argumentsDelta concatenates to the block-end's arguments -----------------------


def test_rule_arguments_delta_concatenation_must_match() -> None:
    error = violation([*tool_block(0, '{"a"', ":1}", arguments='{"a":2}'), FINISH])
    assert error.rule == "arguments-delta"
    assert "argumentsDelta pieces give" in str(error)


def test_rule_arguments_delta_assembled_arguments_must_be_json() -> None:
    assert violation([*tool_block(0, '{"a":', "1"), FINISH]).rule == "arguments-delta"


# -- rule 4: finish is the last chunk ------------------------------------------------------


def test_rule_finish_last_nothing_after_finish() -> None:
    error = violation([FINISH, *text_block(0, "x")])
    assert (error.rule, error.position) == ("finish-last", 1)


def test_rule_finish_last_only_one_finish() -> None:
    assert violation([FINISH, FINISH]).rule == "finish-last"


# -- rule 5: usage comes before finish -----------------------------------------------------


def test_rule_usage_before_finish() -> None:
    error = violation([*text_block(0, "x"), FINISH, USAGE])
    assert (error.rule, error.position) == ("usage-before-finish", 4)


def test_rule_usage_only_once() -> None:
    assert violation([USAGE, USAGE, FINISH]).rule == "usage-before-finish"


# -- the block-end carries the concatenation of its deltas ---------------------------------


def test_block_content_text_must_equal_its_deltas() -> None:
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="ab"),
        BlockEnd(index=0, block=TextBlock(text="abc")),
        FINISH,
    ]
    assert violation(chunks).rule == "block-content"


def test_block_content_type_must_match_the_started_block() -> None:
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="text"),
        ReasoningDelta(index=0, text="hm"),
        BlockEnd(index=0, block=ReasoningBlock(text="hm")),
    ]
    assert violation(chunks).rule == "block-content"
    chunks = [BlockStart(index=0, block_type="reasoning"), BlockEnd(index=0, block=TextBlock(text=""))]
    assert violation(chunks).rule == "block-content"


def test_block_content_tool_id_and_name_must_match_the_deltas() -> None:
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="tool-call"),
        ToolCallDelta(index=0, id=CallId("call_a"), name="bash", arguments_delta="{}"),
        BlockEnd(index=0, block=ToolCallBlock(id=CallId("call_b"), name="bash", arguments="{}")),
    ]
    assert violation(chunks).rule == "block-content"


# -- bad input is an LlmError, never a bare exception --------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        object(),
        "text-delta",
        {"type": "text-delta", "index": 0, "text": "x"},
        TextBlock(text="a block is not a chunk"),
        None,
    ],
)
def test_non_chunks_are_rejected_with_chunk_shape(bad: object) -> None:
    validator = StreamValidator()
    with pytest.raises(LlmError) as raised:
        validator.feed(bad)  # type: ignore[arg-type]
    assert isinstance(raised.value, ProtocolViolation)
    assert raised.value.rule == "chunk-shape"


@pytest.mark.parametrize(
    "chunk",
    [
        BlockStart(index=-1, block_type="text"),
        BlockStart(index="0", block_type="text"),  # type: ignore[arg-type]
        BlockStart(index=0, block_type="image"),  # type: ignore[arg-type]
    ],
)
def test_bad_field_values_are_rejected_with_chunk_shape(chunk: StreamChunk) -> None:
    assert violation([chunk]).rule == "chunk-shape"


@pytest.mark.parametrize(
    "bad",
    [
        TextDelta(index=0, text=None),  # type: ignore[arg-type]
        TextDelta(index=0, text=3),  # type: ignore[arg-type]
        BlockEnd(index=0, block=TextBlock(text=None)),  # type: ignore[arg-type]
        BlockEnd(index=0, block="text"),  # type: ignore[arg-type]
    ],
)
def test_fields_of_the_wrong_type_are_rejected_with_chunk_shape(bad: StreamChunk) -> None:
    assert violation([BlockStart(index=0, block_type="text"), bad]).rule == "chunk-shape"


def test_tool_delta_fields_of_the_wrong_type_are_rejected_with_chunk_shape() -> None:
    start = BlockStart(index=0, block_type="tool-call")
    for bad in (
        ToolCallDelta(index=0, arguments_delta=7),  # type: ignore[arg-type]
        ToolCallDelta(index=0, id=5, arguments_delta="{}"),  # type: ignore[arg-type]
        ToolCallDelta(index=0, name=["x"], arguments_delta="{}"),  # type: ignore[arg-type]
    ):
        assert violation([start, bad]).rule == "chunk-shape"


def test_negative_index_in_a_delta_is_rejected() -> None:
    chunks: list[StreamChunk] = [BlockStart(index=0, block_type="text"), TextDelta(index=-3, text="x")]
    assert violation(chunks).rule == "chunk-shape"


def test_incremental_feed_reports_the_first_violation_position() -> None:
    validator = StreamValidator()
    for chunk in text_block(0, "a", "b"):
        validator.feed(chunk)
    assert validator.position == 4
    with pytest.raises(ProtocolViolation) as raised:
        validator.feed(TextDelta(index=0, text="late"))
    assert raised.value.position == 4


# -- properties ----------------------------------------------------------------------------


@settings(max_examples=300)
@given(valid_streams())
def test_every_valid_stream_passes(chunks: list[StreamChunk]) -> None:
    validate(chunks)


def _positions(chunks: list[StreamChunk], kind: type) -> list[int]:
    return [i for i, chunk in enumerate(chunks) if type(chunk) is kind]


def drop_a_block_end(chunks: list[StreamChunk], pick: int) -> list[StreamChunk]:
    ends = _positions(chunks, BlockEnd)
    assume(ends)
    at = ends[pick % len(ends)]
    return chunks[:at] + chunks[at + 1 :]


def swap_two_indexes(chunks: list[StreamChunk], pick: int) -> list[StreamChunk]:
    starts = _positions(chunks, BlockStart)
    assume(len(starts) >= 2)
    a = pick % (len(starts) - 1)
    mapping = {a: a + 1, a + 1: a}
    out: list[StreamChunk] = []
    for chunk in chunks:
        index = getattr(chunk, "index", None)
        if isinstance(index, int) and index in mapping:
            out.append(_with_index(chunk, mapping[index]))
        else:
            out.append(chunk)
    return out


def interleave_two_blocks(chunks: list[StreamChunk], pick: int) -> list[StreamChunk]:
    """Move the first delta of block k+1 inside block k (before k's block-end)."""
    deltas = [i for i, c in enumerate(chunks) if isinstance(c, TextDelta | ReasoningDelta | ToolCallDelta)]
    ends = _positions(chunks, BlockEnd)
    candidates = [(e, d) for e, d in itertools.pairwise(ends)]
    pairs = []
    for end_k, end_next in candidates:
        following = [d for d in deltas if end_k < d < end_next]
        if following:
            pairs.append((end_k, following[0]))
    assume(pairs)
    end_k, delta_next = pairs[pick % len(pairs)]
    moved = chunks[delta_next]
    rest = chunks[:delta_next] + chunks[delta_next + 1 :]
    return [*rest[:end_k], moved, *rest[end_k:]]


def append_after_finish(chunks: list[StreamChunk], pick: int) -> list[StreamChunk]:
    extras: list[StreamChunk] = [FINISH, TextDelta(index=0, text="x"), BlockStart(index=0, block_type="text")]
    extra = extras[pick % 3]
    return [*chunks, extra]


def usage_after_finish(chunks: list[StreamChunk], pick: int) -> list[StreamChunk]:
    without = [c for c in chunks if type(c) is not UsageChunk]
    return [*without, USAGE]


def split_arguments_differently(chunks: list[StreamChunk], pick: int) -> list[StreamChunk]:
    tool_deltas = _positions(chunks, ToolCallDelta)
    assume(tool_deltas)
    at = tool_deltas[pick % len(tool_deltas)]
    delta = chunks[at]
    assert isinstance(delta, ToolCallDelta)
    changed = ToolCallDelta(
        index=delta.index, id=delta.id, name=delta.name, arguments_delta=delta.arguments_delta + " "
    )
    return [*chunks[:at], changed, *chunks[at + 1 :]]


def _with_index(chunk: StreamChunk, index: int) -> StreamChunk:
    import msgspec

    return msgspec.structs.replace(chunk, index=index)


MUTATIONS: list[tuple[Callable[[list[StreamChunk], int], list[StreamChunk]], str]] = [
    (drop_a_block_end, "block-pairs"),
    (swap_two_indexes, "index-order"),
    (interleave_two_blocks, "index-order"),
    (append_after_finish, "finish-last"),
    (usage_after_finish, "usage-before-finish"),
    (split_arguments_differently, "arguments-delta"),
]


def _broken_rule(chunks: list[StreamChunk]) -> str | None:
    """The rule ``validate`` names for ``chunks``, or None when they pass."""
    try:
        validate(chunks)
    except ProtocolViolation as error:
        return error.rule
    return None


ALWAYS_APPLY = [(mutate, rule) for mutate, rule in MUTATIONS if mutate is not split_arguments_differently]
"""The mutations that find something to mutate in every stream of two blocks or more."""


@settings(max_examples=200)
@given(chunks=valid_streams(min_blocks=2), pick=st.integers(0, 50))
def test_every_single_mutation_fails_with_its_rule(chunks: list[StreamChunk], pick: int) -> None:
    # One drawn stream, each mutation of it validated on its own: 200 streams per mutation, one draw for all.
    broken = {mutate.__name__: _broken_rule(mutate(chunks, pick)) for mutate, _ in ALWAYS_APPLY}
    assert broken == {mutate.__name__: rule for mutate, rule in ALWAYS_APPLY}


@settings(max_examples=200)
@given(chunks=valid_streams(min_blocks=2), pick=st.integers(0, 50))
def test_splitting_tool_arguments_differently_fails_with_its_rule(chunks: list[StreamChunk], pick: int) -> None:
    # Its own test: it needs a tool call, which not every stream has (the others would lose examples to assume).
    assert _broken_rule(split_arguments_differently(chunks, pick)) == "arguments-delta"


def _cut_call(index: int, arguments: str) -> list[StreamChunk]:
    return [
        BlockStart(index=index, block_type="tool-call"),
        ToolCallDelta(index=index, id=CallId("call_cut"), name="write", arguments_delta=arguments),
        BlockEnd(index=index, block=ToolCallBlock(id=CallId("call_cut"), name="write", arguments=arguments, cut=True)),
    ]


LENGTH = Finish(reason=FinishReason(kind="length"))


def test_a_tool_call_the_token_limit_cut_may_stop_anywhere_as_the_last_block_of_a_length_finish() -> None:
    validate([*text_block(0, "Writing."), *_cut_call(1, '{"path": "a'), USAGE, LENGTH])


@pytest.mark.parametrize(
    ("after", "finish", "detail"),
    [
        ([], FINISH, "then a stop finish"),
        (text_block(2, "more"), LENGTH, "a block after the tool call the token limit cut"),
    ],
)
def test_a_cut_tool_call_anywhere_else_breaks_the_arguments_rule(
    after: list[StreamChunk], finish: Finish, detail: str
) -> None:
    found = violation([*text_block(0, "Writing."), *_cut_call(1, '{"path": "a'), *after, finish])
    assert found.rule == "arguments-delta"
    assert detail in str(found)
