"""A cassette recorded through ``OpenAICompatAdapter`` answers the requests frameworks send under the default
matcher: each framework's spelling of the same two-turn tool conversation, hand-built in its shape (the openai
SDK, pydantic-ai, langchain-openai, litellm). Parameters that change the answer still miss, and say which
matcher failed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from chunktape import (
    BlockEnd,
    ErrorCode,
    GenerateOptions,
    LlmError,
    Message,
    RecordedRequest,
    RecordingAdapter,
    ReplayAdapter,
    StreamChunk,
    TextDelta,
    ToolCallBlock,
    ToolSpec,
)
from chunktape._cassettes.matching import DEFAULT_MATCH, RequestMatcher, parse_match_on
from chunktape._protocol import CallId
from chunktape.providers import OpenAICompatAdapter
from chunktape.wire._openai_chat import REASONING_FIELDS, options_from_openai_request
from fake_provider import FakeProvider, FakeResponse, chunk, sse, tool_delta

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = ToolSpec(name="get_weather", description="Weather for a city.", parameters=SCHEMA)
ASK = [Message(role="system", content="Be brief."), Message(role="user", content="Weather in Paris?")]
CALL = ToolCallBlock(id=CallId("call_1"), name="get_weather", arguments='{"city":"Paris"}')
ANSWER = [
    *ASK,
    Message(role="assistant", content=None, tool_calls=[CALL]),
    Message(role="tool", tool_call_id="call_1", content="sunny, 21C"),
]


async def record(fake_provider: FakeProvider, path: Path) -> None:
    """Two turns through the real adapter: a tool call, then the answer after the tool result."""
    fake_provider.enqueue(
        FakeResponse(
            body=sse(
                chunk(tool_delta(0, "", id="call_1", name="get_weather")),
                chunk(tool_delta(0, '{"city":"Paris"}')),
                chunk({}, finish_reason="tool_calls"),
            )
        ),
        FakeResponse(body=sse(chunk({"content": "Sunny in Paris."}), chunk({}, finish_reason="stop"))),
    )
    adapter = OpenAICompatAdapter(fake_provider.url, api_key="sk-test-0123456789", model="deepseek-chat")
    try:
        async with RecordingAdapter(adapter, path) as recorder:
            for messages in (ASK, ANSWER):
                options = GenerateOptions(model="deepseek-chat", messages=messages, tools=[TOOL])
                async for _ in recorder.stream(options):
                    pass
    finally:
        await adapter.aclose()


def _tool(strict: bool = False, **schema: Any) -> dict[str, Any]:
    parameters = {**SCHEMA, **schema}
    function: dict[str, Any] = {"name": "get_weather", "description": "Weather for a city.", "parameters": parameters}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _turns(
    *,
    top: dict[str, Any],
    tool: dict[str, Any],
    arguments: str,
    assistant_content: Any,
    system: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    system = system or {"role": "system", "content": "Be brief."}
    ask = [system, {"role": "user", "content": "Weather in Paris?"}]
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    answer = [
        *ask,
        {"role": "assistant", "content": assistant_content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
    ]
    base = {"model": "deepseek-chat", "stream": True, **top, "tools": [tool]}
    return [{**base, "messages": ask}, {**base, "messages": answer}]


FRAMEWORKS: dict[str, list[dict[str, Any]]] = {
    # openai SDK, as an agent author writes it: explicit defaults, an end-user id, no storage.
    "openai-sdk": _turns(
        top={"tool_choice": "auto", "parallel_tool_calls": True, "user": "u-42", "store": False, "n": 1},
        tool=_tool(),
        arguments='{"city":"Paris"}',
        assistant_content=None,
    ),
    # pydantic-ai (OpenAIChatModel): strict tools with additionalProperties false, tool_choice auto,
    # stream_options, arguments re-serialised from its parsed args, no content on the tool-call turn.
    "pydantic-ai": _turns(
        top={"n": 1, "stream_options": {"include_usage": True}, "tool_choice": "auto"},
        tool=_tool(strict=True, additionalProperties=False),
        arguments='{"city": "Paris"}',
        assistant_content=None,
    ),
    # langchain-openai (ChatOpenAI): n, stream_options, "" content beside tool calls, json.dumps arguments.
    "langchain-openai": _turns(
        top={"n": 1, "stream_options": {"include_usage": True}, "stop": None, "temperature": None},
        tool=_tool(),
        arguments='{"city": "Paris"}',
        assistant_content="",
    ),
    # litellm: its OpenAI-compatible route, with empty stop and a developer role for the system prompt.
    "litellm": _turns(
        top={"stream_options": {"include_usage": True}, "stop": [], "top_p": 1, "metadata": {"trace": "x"}},
        tool=_tool(required=["city"], additionalProperties=False),
        arguments='{\n  "city": "Paris"\n}',
        assistant_content=[],
        system={"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
    ),
}


def _request(body: dict[str, Any]) -> GenerateOptions:
    return options_from_openai_request(body, reasoning=REASONING_FIELDS)


async def _play(replay: ReplayAdapter, options: GenerateOptions) -> list[StreamChunk]:
    return [item async for item in replay.stream(options)]


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
async def test_each_frameworks_requests_replay_a_cassette_the_adapter_recorded(
    framework: str, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    path = tmp_path / "agent.msgpack"
    await record(fake_provider, path)
    replay = ReplayAdapter(path)
    first, second = (_request(body) for body in FRAMEWORKS[framework])
    called = await _play(replay, first)
    assert [item.block for item in called if isinstance(item, BlockEnd)] == [CALL]
    answered = await _play(replay, second)
    assert "".join(item.text for item in answered if isinstance(item, TextDelta)) == "Sunny in Paris."
    replay.assert_all_played()


ANSWER_CHANGERS: list[tuple[str, dict[str, Any], str]] = [
    ("temperature", {"temperature": 0.2}, "params"),
    ("temperature-zero", {"temperature": 0.0}, "params"),
    ("seed", {"seed": 7}, "params"),
    ("top-p", {"top_p": 0.5}, "params"),
    ("max-tokens", {"max_tokens": 16}, "params"),
    ("stop", {"stop": ["\nObservation:"]}, "params"),
    ("json-mode", {"response_format": {"type": "json_object"}}, "params"),
    ("tool-choice-required", {"tool_choice": "required"}, "params"),
    ("no-parallel-calls", {"parallel_tool_calls": False}, "params"),
    ("reasoning", {"reasoning_effort": "high"}, "params"),
]


@pytest.mark.parametrize(("field", "change", "matcher"), ANSWER_CHANGERS, ids=[c[0] for c in ANSWER_CHANGERS])
def test_parameters_that_change_the_answer_still_miss(field: str, change: dict[str, Any], matcher: str) -> None:
    recorded = RecordedRequest.from_options(GenerateOptions(model="deepseek-chat", messages=ASK, tools=[TOOL]))
    body = {**copy.deepcopy(FRAMEWORKS["pydantic-ai"][0]), **change}
    live = RecordedRequest.from_options(_request(body))
    matcher_set = RequestMatcher(DEFAULT_MATCH)
    assert not matcher_set(live, recorded)
    assert matcher_set.failing(live, recorded) == [matcher]
    error = matcher_set.mismatch(live, [recorded], "agent.msgpack")
    assert error.code is ErrorCode.CASSETTE_MISMATCH
    assert f"failing matchers: {matcher}" in str(error)


def test_different_arguments_schemas_or_content_still_miss() -> None:
    recorded = RecordedRequest.from_options(GenerateOptions(model="deepseek-chat", messages=ANSWER, tools=[TOOL]))
    matcher = RequestMatcher()
    other_city = copy.deepcopy(FRAMEWORKS["pydantic-ai"][1])
    other_city["messages"][2]["tool_calls"][0]["function"]["arguments"] = '{"city": "Lyon"}'
    other_schema = copy.deepcopy(FRAMEWORKS["pydantic-ai"][1])
    other_schema["tools"][0]["function"]["parameters"]["additionalProperties"] = True
    other_text = copy.deepcopy(FRAMEWORKS["langchain-openai"][1])
    other_text["messages"][2]["content"] = "Let me check."
    for body, failing in ((other_city, ["messages"]), (other_schema, ["tools"]), (other_text, ["messages"])):
        live = RecordedRequest.from_options(_request(body))
        assert matcher.failing(live, recorded) == failing


def test_single_field_matchers_ignore_defaults_too() -> None:
    recorded = RecordedRequest.from_options(GenerateOptions(model="m", messages=ASK))
    live = RecordedRequest.from_options(GenerateOptions(model="m", messages=ASK, temperature=1.0, extra={"n": 1}))
    assert RequestMatcher(["model", "temperature", "extra", "max_tokens", "last_message"])(live, recorded)
    assert not RequestMatcher("fingerprint")(live, recorded)  # the exact match stays exact


def test_match_on_parses_from_a_string_or_a_list() -> None:
    assert parse_match_on("model,messages,tools") == ("model", "messages", "tools")
    assert parse_match_on(["model, messages", "params"]) == ("model", "messages", "params")
    assert parse_match_on("model messages") == ("model", "messages")
    recorded = RecordedRequest.from_options(GenerateOptions(model="m", messages=ASK))
    live = RecordedRequest.from_options(GenerateOptions(model="m", messages=ASK, max_tokens=5))
    assert RequestMatcher("model,messages,tools")(live, recorded)
    assert not RequestMatcher("model,messages,tools,params")(live, recorded)
    for bad in ("model,colour", "", " , "):
        with pytest.raises(LlmError) as info:
            RequestMatcher(bad)
        assert info.value.code is ErrorCode.INVALID_CONFIG
        assert "valid matchers: extra, fingerprint" in info.value.message
