"""The OpenAI-compatible chunk mapping: every provider quirk decodes to a valid stream; encoding round-trips."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    ErrorCode,
    Finish,
    FinishReason,
    GenerateOptions,
    LlmError,
    Message,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolSpec,
    UsageChunk,
    validate,
)
from chunktape.wire._openai_chat import (
    OpenAIChatDecoder,
    OpenAIChatEncoder,
    chunks_to_openai_dicts,
    chunks_to_openai_events,
    decode_openai_completion,
    decode_openai_sse,
    options_from_openai_request,
    options_to_openai_request,
)
from chunktape.wire._sse import SseParser
from fake_provider import (
    chunk,
    deepseek_parallel_tools,
    deepseek_reasoning_then_text,
    groq_error_event,
    openai_usage_after_finish,
    openrouter_inband_error,
    sse,
    tool_delta,
)
from helpers import blocks
from strategies import wire_streams


def tail(chunks: list[StreamChunk]) -> list[StreamChunk]:
    return [c for c in chunks if isinstance(c, UsageChunk | Finish)]


def test_deepseek_reasoning_then_text_with_usage_on_the_finish_chunk() -> None:
    chunks = decode_openai_sse(deepseek_reasoning_then_text())
    validate(chunks)
    assert blocks(chunks) == [
        ReasoningBlock(text="Hmm, a greeting. 🤔"),
        TextBlock(text="Hello there! 😊"),
    ]
    assert tail(chunks) == [
        UsageChunk(usage=TokenUsage(input_tokens=491, output_tokens=129, cached_input_tokens=448, reasoning_tokens=40)),
        Finish(reason=FinishReason(kind="stop")),
    ]


@pytest.mark.parametrize("interleaved", [False, True])
def test_parallel_tool_calls_come_out_as_consecutive_blocks_in_index_order(interleaved: bool) -> None:
    chunks = decode_openai_sse(deepseek_parallel_tools(interleaved=interleaved))
    validate(chunks)
    assert blocks(chunks) == [
        TextBlock(text="我可以帮。"),
        ToolCallBlock(
            id=CallId("call_00_beijing"),
            name="get_current_weather",
            arguments='{"location": "北京", "format": "celsius"}',
        ),
        ToolCallBlock(id=CallId("call_01_luoyang"), name="get_current_weather", arguments='{"location": "洛阳"}'),
    ]
    assert tail(chunks)[-1] == Finish(reason=FinishReason(kind="tool-calls"))


def test_in_order_tool_calls_stream_live() -> None:
    """The first call's block ends as soon as the second call starts: nothing waits for the finish chunk."""
    decoder = OpenAIChatDecoder()
    out = decoder.feed_data(json.dumps(chunk(tool_delta(0, '{"a": 1}', id="c0", name="f"))))
    assert out == [
        BlockStart(index=0, block_type="tool-call"),
        ToolCallDelta(index=0, id=CallId("c0"), name="f", arguments_delta='{"a": 1}'),
    ]
    out = decoder.feed_data(json.dumps(chunk(tool_delta(1, "{}", id="c1", name="g"))))
    assert out == [
        BlockEnd(index=0, block=ToolCallBlock(id=CallId("c0"), name="f", arguments='{"a": 1}')),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=1, id=CallId("c1"), name="g", arguments_delta="{}"),
    ]


def test_more_arguments_for_a_call_already_closed_is_an_invalid_response() -> None:
    body = sse(
        chunk(tool_delta(0, "{}", id="c0", name="f")),
        chunk(tool_delta(1, "{}", id="c1", name="g")),
        chunk(tool_delta(0, "")),  # empty: harmless, ignored
        chunk(tool_delta(0, "{}")),
    )
    with pytest.raises(LlmError, match="after it was complete") as info:
        decode_openai_sse(body)
    assert info.value.code is ErrorCode.INVALID_RESPONSE


def test_whitespace_after_a_call_already_closed_is_tolerated() -> None:
    body = sse(
        chunk(tool_delta(0, '{"x": 1}', id="c0", name="f")),
        chunk(tool_delta(1, "{}", id="c1", name="g")),
        chunk(tool_delta(0, "\n")),
        chunk(tool_delta(0, "  \t")),
        chunk({}, finish_reason="tool_calls"),
    )
    chunks = decode_openai_sse(body)
    validate(chunks)
    assert blocks(chunks) == [
        ToolCallBlock(id=CallId("c0"), name="f", arguments='{"x": 1}'),
        ToolCallBlock(id=CallId("c1"), name="g", arguments="{}"),
    ]


@pytest.mark.parametrize("repeat_id", [False, True])
def test_parallel_tool_calls_all_at_index_0_are_told_apart_by_id(repeat_id: bool) -> None:
    """ollama, litellm and dynamo send every parallel call with ``index: 0`` and its own id."""

    def more(call_id: str, arguments: str) -> dict[str, Any]:
        return tool_delta(0, arguments, id=call_id if repeat_id else None)

    body = sse(
        chunk(tool_delta(0, "", id="call_a", name="get_weather")),
        chunk(more("call_a", '{"city": ')),
        chunk(more("call_a", '"Paris"}')),
        chunk(tool_delta(0, '{"city": "Rome"}', id="call_b", name="get_time")),
        chunk(tool_delta(0, "", id="call_c", name="get_weather")),
        chunk(more("call_c", '{"city": "Oslo"}')),
        chunk({}, finish_reason="tool_calls"),
    )
    chunks = decode_openai_sse(body)
    validate(chunks)
    assert blocks(chunks) == [
        ToolCallBlock(id=CallId("call_a"), name="get_weather", arguments='{"city": "Paris"}'),
        ToolCallBlock(id=CallId("call_b"), name="get_time", arguments='{"city": "Rome"}'),
        ToolCallBlock(id=CallId("call_c"), name="get_weather", arguments='{"city": "Oslo"}'),
    ]


def test_tool_calls_without_an_index_are_told_apart_by_id() -> None:
    body = sse(
        chunk({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": '{"x"'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": ": 1}"}}]}),
        chunk({}, finish_reason="tool_calls", usage={"prompt_tokens": None, "completion_tokens": 3}),
    )
    chunks = decode_openai_sse(body)
    validate(chunks)
    assert blocks(chunks) == [
        ToolCallBlock(id=CallId("a"), name="f", arguments="{}"),
        ToolCallBlock(id=CallId("b"), name="g", arguments='{"x": 1}'),
    ]
    assert tail(chunks)[0] == UsageChunk(usage=TokenUsage(input_tokens=0, output_tokens=3))


def test_openai_usage_only_chunk_after_the_finish_chunk_still_comes_before_finish() -> None:
    chunks = decode_openai_sse(openai_usage_after_finish())
    validate(chunks)
    assert [(b.name, b.arguments) for b in blocks(chunks)] == [
        ("get_weather", '{"city": "Mexico City"}'),
        ("get_product_name", "{}"),
    ]
    assert tail(chunks) == [
        UsageChunk(usage=TokenUsage(input_tokens=417, output_tokens=44, cached_input_tokens=0, reasoning_tokens=0)),
        Finish(reason=FinishReason(kind="tool-calls")),
    ]


def test_openrouter_in_band_error_object_raises_with_the_providers_message() -> None:
    parser, decoder = SseParser(), OpenAIChatDecoder()
    emitted: list[StreamChunk] = []

    def consume() -> None:
        for item in parser.feed(openrouter_inband_error()):
            emitted.extend(decoder.feed_item(item))

    with pytest.raises(LlmError) as info:
        consume()
    assert info.value.code is ErrorCode.PROVIDER_HTTP_ERROR
    assert info.value.status == 400
    assert "Token limit reached" in str(info.value)
    assert emitted[-1] == ReasoningDelta(index=0, text=" to respond.")


def test_groq_error_event_raises_with_the_providers_message() -> None:
    with pytest.raises(LlmError, match="Tool call validation failed") as info:
        decode_openai_sse(groq_error_event())
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("error", "retry_after"),
    [
        ({"message": "Rate limit exceeded: slow down", "code": 429, "retry_after": 12}, 12.0),
        ({"message": "Rate limit exceeded: slow down", "code": 429, "metadata": {"retry_after": "3"}}, 3.0),
        ({"message": "Rate limit exceeded: slow down", "code": 429, "retry_after_ms": 1500}, 1.5),
        (
            {"message": "Rate limit exceeded: slow down", "code": 429, "metadata": {"headers": {"Retry-After": "4"}}},
            4.0,
        ),
        ({"message": "Rate limit exceeded: slow down", "code": 429, "retry_after": "nan"}, None),
        ({"message": "Rate limit exceeded: slow down", "code": 429}, None),
    ],
)
def test_in_band_errors_keep_the_providers_message_first_and_its_retry_after(
    error: dict[str, Any], retry_after: float | None
) -> None:
    with pytest.raises(LlmError) as info:
        decode_openai_sse(sse(chunk({"content": "x"}), {"error": error}))
    assert info.value.message.startswith("Rate limit exceeded: slow down (")
    assert info.value.status == 429
    assert info.value.retry_after == retry_after
    with pytest.raises(LlmError) as info:
        decode_openai_sse(sse(chunk({"content": "x"}), "event: error\ndata: " + json.dumps({"error": error}) + "\n\n"))
    assert info.value.message.startswith("Rate limit exceeded: slow down (")
    assert info.value.retry_after == retry_after


def test_in_band_error_without_a_status_is_a_broken_stream() -> None:
    with pytest.raises(LlmError, match="overloaded") as info:
        decode_openai_sse(sse(chunk({"content": "x"}), {"error": {"message": "overloaded"}}))
    assert info.value.code is ErrorCode.STREAM_ABORTED


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", FinishReason(kind="stop")),
        ("length", FinishReason(kind="length")),
        ("tool_calls", FinishReason(kind="tool-calls")),
        ("content_filter", FinishReason(kind="content-filter")),
        ("insufficient_system_resource", FinishReason(kind="error", detail="insufficient_system_resource")),
    ],
)
def test_finish_reasons(reason: str, expected: FinishReason) -> None:
    chunks = decode_openai_sse(sse(chunk({"content": "x"}), chunk({}, finish_reason=reason)))
    validate(chunks)
    assert chunks[-1] == Finish(reason=expected)


def test_empty_deltas_and_nulls_are_ignored() -> None:
    body = sse(
        "data: \n\n",
        chunk({}),
        chunk({"content": None}),
        chunk({"content": ""}),
        chunk({"content": "a"}),
        chunk({}, finish_reason="stop"),
    )
    assert decode_openai_sse(body) == [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="a"),
        BlockEnd(index=0, block=TextBlock(text="a")),
        Finish(reason=FinishReason(kind="stop")),
    ]


@pytest.mark.parametrize(
    "body",
    [
        sse("data: {not json\n\n"),
        sse({"choices": "nope"}),
        sse(chunk(tool_delta(0, '{"a":', id="c", name="f")), chunk({}, finish_reason="tool_calls")),
        sse({"choices": [{"index": 1, "delta": {"content": "x"}}]}),
    ],
    ids=["garbage", "wrong-shape", "arguments-not-json", "second-choice"],
)
def test_unparseable_data_is_an_invalid_response(body: bytes) -> None:
    with pytest.raises(LlmError) as info:
        decode_openai_sse(body)
    assert info.value.code is ErrorCode.INVALID_RESPONSE


def test_a_body_cut_short_is_a_broken_stream_but_done_without_finish_is_stop() -> None:
    with pytest.raises(LlmError) as info:
        decode_openai_sse(sse(chunk({"content": "x"}), done=False))
    assert info.value.code is ErrorCode.STREAM_ABORTED
    assert decode_openai_sse(sse(chunk({"content": "x"})))[-1] == Finish(reason=FinishReason(kind="stop"))


@pytest.mark.parametrize("cut", [b'data: {"cho', b'data: {"choices": [', b"data: [DO"])
def test_a_body_cut_mid_event_is_a_broken_stream_not_an_invalid_response(cut: bytes) -> None:
    body = sse(chunk({"content": "hi"}), done=False) + cut
    with pytest.raises(LlmError) as info:
        decode_openai_sse(body)
    assert info.value.code is ErrorCode.STREAM_ABORTED
    assert info.value.recoverable


def test_a_complete_final_event_without_its_blank_line_still_ends_the_stream() -> None:
    body = sse(chunk({"content": "hi"}, finish_reason="stop"), done=False) + b"data: [DONE]\n"
    assert tail(decode_openai_sse(body)) == [Finish(reason=FinishReason(kind="stop"))]


def test_missing_tool_call_id_and_empty_arguments_still_give_a_valid_block() -> None:
    body = sse(
        chunk({"tool_calls": [{"index": 0, "function": {"name": "now"}}]}), chunk({}, finish_reason="tool_calls")
    )
    chunks = decode_openai_sse(body)
    validate(chunks)
    assert blocks(chunks) == [ToolCallBlock(id=CallId("call_0"), name="now", arguments="{}")]


# -- encoding --------------------------------------------------------------------------------------


@given(chunks=wire_streams(), piece=st.integers(1, 64))
def test_encoder_decoder_round_trip(chunks: list[StreamChunk], piece: int) -> None:
    body = b"".join(chunks_to_openai_events(chunks, model="deepseek-chat", created=1, id="x"))
    parser, decoder = SseParser(), OpenAIChatDecoder()
    decoded: list[StreamChunk] = []
    for start in range(0, len(body), piece):
        for item in parser.feed(body[start : start + piece]):
            decoded += decoder.feed_item(item)
    for item in parser.close():
        decoded += decoder.feed_item(item)
    decoded += decoder.close()
    assert decoded == chunks


def test_encoded_stream_looks_like_openai() -> None:
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="tool-call"),
        ToolCallDelta(index=0, id=CallId("c"), name="f", arguments_delta="{}"),
        BlockEnd(index=0, block=ToolCallBlock(id=CallId("c"), name="f", arguments="{}")),
        UsageChunk(usage=TokenUsage(input_tokens=3, output_tokens=1)),
        Finish(reason=FinishReason(kind="tool-calls")),
    ]
    dicts = list(chunks_to_openai_dicts(chunks, model="m", created=5, id="i"))
    assert dicts[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert dicts[1]["choices"][0]["delta"]["tool_calls"] == [
        {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ]
    assert dicts[2]["choices"][0]["finish_reason"] == "tool_calls"
    assert dicts[3]["choices"] == []
    assert dicts[3]["usage"] == {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    assert all(d["object"] == "chat.completion.chunk" and d["model"] == "m" for d in dicts)
    events = list(chunks_to_openai_events(chunks, model="m"))
    assert events[-1] == b"data: [DONE]\n\n"
    assert b"[DONE]" not in b"".join(chunks_to_openai_events(chunks[:-1], model="m"))


# -- requests --------------------------------------------------------------------------------------


def test_request_body_carries_tools_tool_turns_reasoning_content_and_extra() -> None:
    call = ToolCallBlock(id=CallId("call_1"), name="get_weather", arguments='{"city": "Paris"}')
    options = GenerateOptions(
        model="deepseek-reasoner",
        messages=[
            Message(role="system", content="be brief"),
            Message(role="user", content="weather?"),
            Message(role="assistant", content=None, tool_calls=[call], reasoning_content="need the tool"),
            Message(role="tool", content="sunny", tool_call_id="call_1"),
            Message(role="assistant", content="Sunny.", reasoning_content="dropped: not a tool-call turn"),
        ],
        tools=[ToolSpec(name="get_weather", description="d", parameters={"type": "object"})],
        max_tokens=100,
        temperature=0.2,
        extra={"top_p": 0.9},
    )
    body = options_to_openai_request(options)
    assert body == {
        "model": "deepseek-reasoner",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
                "reasoning_content": "need the tool",
            },
            {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
            {"role": "assistant", "content": "Sunny."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object"}},
            }
        ],
        "max_tokens": 100,
        "temperature": 0.2,
        "top_p": 0.9,
    }


def test_a_tool_message_without_its_call_id_is_refused() -> None:
    options = GenerateOptions(model="m", messages=[Message(role="tool", content="x")])
    with pytest.raises(LlmError) as info:
        options_to_openai_request(options)
    assert info.value.code is ErrorCode.UNSUPPORTED_OPTION


# -- requests, decoded (the replay server and the vcrpy import) --------------------------------------


_REASONING: dict[str, dict[str, Any]] = {
    "thinking": {"thinking": {"type": "enabled"}},
    "high": {"reasoning_effort": "high"},
}


@pytest.mark.parametrize("reasoning", [None, "thinking", "high"])
def test_request_decoder_inverts_the_encoder(reasoning: str | None) -> None:
    call = ToolCallBlock(id=CallId("call_1"), name="get_weather", arguments='{"city": "Paris"}')
    options = GenerateOptions(
        model="deepseek-reasoner",
        messages=[
            Message(role="system", content="be brief"),
            Message(role="user", content="weather?", name="ann"),
            Message(role="assistant", content=None, tool_calls=[call], reasoning_content="need the tool"),
            Message(role="tool", content="sunny", tool_call_id="call_1"),
            Message(role="assistant", content="Sunny."),
        ],
        tools=[ToolSpec(name="get_weather", description="d", parameters={"type": "object"})],
        max_tokens=100,
        temperature=0.2,
        reasoning=reasoning,
        extra={"top_p": 0.9, "response_format": {"type": "text"}},
    )
    extra_fields = dict(_REASONING[reasoning]) if reasoning else None
    body = json.loads(json.dumps(options_to_openai_request(options, extra_fields=extra_fields)))
    assert options_from_openai_request(body, reasoning=_REASONING) == options


def test_request_decoder_accepts_what_sdks_send() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
            {"role": "user", "content": "hi"},
        ],
        "max_completion_tokens": 5,
        "temperature": 1,
        "stream": False,
    }
    options = options_from_openai_request(body)
    assert options.messages[0] == Message(role="system", content="be brief")
    assert (options.max_tokens, options.temperature, options.extra) == (5, 1.0, {})


PARTS: list[dict[str, Any]] = [
    {"type": "text", "text": "compare ", "cache_control": {"type": "ephemeral"}},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"}},
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "file", "file": {"file_id": "file-1"}},
    {"type": "text", "text": "these"},
]


def test_content_parts_beyond_text_are_kept_as_sent_and_sent_back_the_same() -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": PARTS}]}
    message = options_from_openai_request(json.loads(json.dumps(body))).messages[0]
    assert (message.content, message.content_parts, message.text) == (None, PARTS, "compare these")
    assert options_to_openai_request(options_from_openai_request(body))["messages"] == body["messages"]
    # Text parts alone stay one string, as before: a text-only request matches its recordings of any version.
    texts = {"model": "m", "messages": [{"role": "user", "content": [PARTS[0], PARTS[4]]}]}
    assert options_from_openai_request(texts).messages[0] == Message(role="user", content="compare these")


def test_a_message_has_content_or_content_parts_not_both() -> None:
    with pytest.raises(ValueError, match="not both"):
        Message(role="user", content="x", content_parts=PARTS)


def test_a_messages_other_fields_are_kept_as_sent_and_sent_back_after_the_named_ones() -> None:
    """Fields this library has no name for (DeepSeek's chat-prefix flag, an assistant turn's audio reference, a
    field a provider adds next year) were dropped as the request was decoded: recorded without them, and two
    requests that differ only there matched the same recording."""
    body = {
        "model": "deepseek-chat",
        "messages": [
            {"role": "user", "content": "write a haiku"},
            {"role": "assistant", "content": "Autumn", "prefix": True, "audio": {"id": "audio_1"}},
            {"role": "user", "content": "", "extra": 1, "content_parts": 2},  # chunktape's own names, as fields
        ],
    }
    message = options_from_openai_request(json.loads(json.dumps(body))).messages[1]
    assert (message.content, message.extra) == ("Autumn", {"prefix": True, "audio": {"id": "audio_1"}})
    assert options_from_openai_request(body).messages[2].extra == {"extra": 1, "content_parts": 2}
    assert options_to_openai_request(options_from_openai_request(body))["messages"] == body["messages"]
    assert msgspec.json.decode(msgspec.json.encode(message), type=Message) == message


def test_extra_cannot_hold_a_field_a_message_has_by_name() -> None:
    with pytest.raises(ValueError, match="content, name"):
        Message(role="user", extra={"name": "x", "content": "y", "prefix": True})


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"messages": []},
        {"model": "m"},
        {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
        {"model": "m", "messages": [{"role": "user", "content": [{"image_url": {}}]}]},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
        {"model": "m", "messages": [{"role": "user", "content": 3}]},
        {"model": "m", "messages": [], "tools": [{"type": "function"}]},
    ],
)
def test_request_decoder_refuses_what_it_cannot_represent(body: Any) -> None:
    with pytest.raises(LlmError) as info:
        options_from_openai_request(body)
    assert info.value.code is ErrorCode.UNSUPPORTED_OPTION


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"max_tokens": "many"}, "max_tokens"),
        ({"max_tokens": 1.5}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"max_completion_tokens": "9"}, "max_completion_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}, "tools[0].parameters"),
        ({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]}, "tools[0].description"),
        ({"messages": [{"role": "user", "content": "x", "name": 7}]}, "messages[0].name"),
        ({"messages": [{"role": "tool", "content": "x", "tool_call_id": 7}]}, "messages[0].tool_call_id"),
    ],
)
def test_request_decoder_checks_field_types_and_names_the_field(extra: dict[str, Any], field: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
    with pytest.raises(LlmError) as info:
        options_from_openai_request(body)
    assert info.value.code is ErrorCode.UNSUPPORTED_OPTION
    assert f"`{field}`" in info.value.message


def test_request_decoder_accepts_an_integer_temperature() -> None:
    options = options_from_openai_request({"model": "m", "messages": [], "temperature": 1, "max_tokens": 5})
    assert (options.temperature, options.max_tokens) == (1.0, 5)
    assert isinstance(options.temperature, float)


@given(chunks=wire_streams())
def test_the_incremental_encoder_matches_the_batch_one(chunks: list[StreamChunk]) -> None:
    encoder = OpenAIChatEncoder(model="m")
    incremental = [encoder.start()]
    for item in chunks:
        incremental += encoder.feed(item)
    incremental += encoder.close()
    assert incremental == list(chunks_to_openai_dicts(chunks, model="m"))
    assert encoder.finished


def test_a_non_streamed_completion_decodes_to_the_chunks_its_stream_would_give() -> None:
    completion = {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "reasoning_content": "think",
                    "content": "Two calls.",
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
                        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    chunks = decode_openai_completion(json.dumps(completion).encode())
    assert chunks == decode_openai_completion(completion)
    validate(chunks)
    assert blocks(chunks) == [
        ReasoningBlock(text="think"),
        TextBlock(text="Two calls."),
        ToolCallBlock(id=CallId("a"), name="f", arguments='{"x": 1}'),
        ToolCallBlock(id=CallId("b"), name="g", arguments="{}"),
    ]
    assert tail(chunks) == [
        UsageChunk(usage=TokenUsage(input_tokens=3, output_tokens=2)),
        Finish(reason=FinishReason(kind="tool-calls")),
    ]


@pytest.mark.parametrize("body", [b'{"choices": [', b'{"choices": [1]}', b"[1]", {"choices": [{"message": 3}]}])
def test_a_misshapen_completion_is_an_invalid_response(body: Any) -> None:
    with pytest.raises(LlmError, match=r"not a chat\.completion object") as info:
        decode_openai_completion(body)
    assert info.value.code is ErrorCode.INVALID_RESPONSE


def test_reasoning_fields_live_in_the_wire_module() -> None:
    from chunktape.providers import _openai_compat as openai_compat
    from chunktape.wire import _openai_chat as openai_chat

    assert openai_chat.REASONING_FIELDS == {**openai_chat.DEEPSEEK_REASONING, **openai_chat.OPENAI_REASONING}
    assert openai_compat.DEEPSEEK_REASONING is openai_chat.DEEPSEEK_REASONING
    assert (
        options_from_openai_request(
            {"model": "m", "messages": [], "reasoning_effort": "high"}, reasoning=openai_chat.REASONING_FIELDS
        ).reasoning
        == "high"
    )


def test_a_length_finish_inside_the_last_tool_call_keeps_it_as_cut() -> None:
    body = sse(
        chunk(tool_delta(0, '{"path": "a', id="call_1", name="write")),
        chunk(tool_delta(0, '.md", "text": "#')),
        chunk({}, finish_reason="length"),
    )
    chunks = decode_openai_sse(body)
    (cut,) = blocks(chunks)
    assert isinstance(cut, ToolCallBlock)
    assert (cut.cut, cut.arguments) == (True, '{"path": "a.md", "text": "#')
    with pytest.raises(LlmError) as raised:  # any other finish: the arguments are broken, not cut
        decode_openai_sse(body.replace(b'"length"', b'"tool_calls"'))
    assert raised.value.code is ErrorCode.INVALID_RESPONSE
