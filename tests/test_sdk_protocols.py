"""The real anthropic and openai SDKs on the Messages and Responses protocols: recorded through RecordingTransport
from the loopback stand-in provider, then replayed through ReplayTransport (in process) and by a ReplayServer; each
face gives the SDK exactly what was recorded, and its own exceptions and retries for faults.

The streams are synthetic: each reproduces a feature of the real captures (thinking with a signature, a tool-use
turn, a function call, pings, cache usage), none is a copy of one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chunktape import Raised, Timing, load_cassette
from chunktape.faults import FailFirst, HttpError
from chunktape.http import RecordingTransport, ReplayServer, ReplayTransport
from fake_provider import FakeProvider, FakeResponse
from sdk_agents import one_worker

KEY = "sk-ant-test-0123456789abcdefghij"
OFFLINE = "http://127.0.0.1:9"


def _events(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def messages_stream() -> bytes:
    """Thinking with its signature, text, then a tool call whose input arrives in pieces; a ping inside a block."""
    return _events(
        {
            "type": "message_start",
            "message": {
                "id": "msg_synthetic",
                "type": "message",
                "role": "assistant",
                "model": "claude-test-1",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 12, "cache_read_input_tokens": 30, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Weather "}},
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "needs a tool."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2lnbmVk"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Checking "}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Paris."}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {}},
        },
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 41},
        },
        {"type": "message_stop"},
    )


def overloaded_mid_stream() -> bytes:
    """A stream that starts, then reports Anthropic's overloaded error in-stream (the real payload's shape)."""
    head = messages_stream().split(b"event: content_block_start")[0]
    error = {"type": "error", "error": {"details": None, "type": "overloaded_error", "message": "Overloaded"}}
    return head + _events(error)


QUESTION: Any = {
    "model": "claude-test",
    "max_tokens": 2048,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "tools": [{"name": "get_weather", "description": "Weather.", "input_schema": {"type": "object"}}],
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
}


async def anthropic_run(base_url: str, client: httpx2.AsyncClient, *, max_retries: int = 2) -> dict[str, Any]:
    """``messages.create(stream=True)`` read event by event, then ``messages.stream(...)`` with its helpers."""
    import anthropic

    sdk = anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, http_client=client, max_retries=max_retries)
    seen: list[str] = []
    async for event in await sdk.messages.create(**QUESTION, stream=True):
        seen.append(event.type)
    async with sdk.messages.stream(**QUESTION) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    thinking, said, call = final.content
    return {
        "events": seen,
        "text": text,
        "thinking": (thinking.thinking, thinking.signature),  # type: ignore[union-attr]
        "said": said.text,  # type: ignore[union-attr]
        "call": (call.id, call.name, call.input),  # type: ignore[union-attr]
        "stop": final.stop_reason,
        "usage": (final.usage.input_tokens, final.usage.cache_read_input_tokens, final.usage.output_tokens),
        "id": final.id,
    }


@one_worker("anthropic")
async def test_anthropic_sdk_gets_the_recorded_stream_from_every_face(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(FakeResponse(body=messages_stream()), FakeResponse(body=messages_stream()))
    path = tmp_path / "messages.json"
    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path)) as client:
        live = await anthropic_run(fake_provider.url, client)
    assert live["text"] == "Checking Paris."
    assert live["thinking"] == ("Weather needs a tool.", "c2lnbmVk")
    assert live["call"] == ("toolu_paris", "get_weather", {"city": "Paris"})
    assert (live["stop"], live["usage"], live["id"]) == ("tool_use", (12, 30, 41), "msg_synthetic")
    assert [fake_provider.requests[0].json["thinking"]] == [{"type": "enabled", "budget_tokens": 1024}]
    recorded = load_cassette(path).interactions
    assert [interaction.request.reasoning for interaction in recorded] == ["thinking-1024"] * 2

    transport = ReplayTransport(path)
    async with httpx2.AsyncClient(transport=transport) as client:
        in_process = await anthropic_run(OFFLINE, client)
    transport.assert_all_played()
    with ReplayServer(path, timing=Timing.instant()) as server:
        async with httpx2.AsyncClient() as client:
            served = await anthropic_run(server.url, client)
    assert in_process == served == live


@one_worker("anthropic")
async def test_anthropic_sdk_retries_a_529_and_raises_its_own_errors(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    import anthropic

    fake_provider.enqueue(FakeResponse(body=messages_stream()), FakeResponse(body=messages_stream()))
    path = tmp_path / "messages.msgpack"
    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path)) as client:
        live = await anthropic_run(fake_provider.url, client)

    overloaded = FailFirst(n=1, fault=HttpError(status=529, retry_after=0.001, message="Overloaded"))
    flaky = ReplayTransport(path, faults=[overloaded])
    async with httpx2.AsyncClient(transport=flaky) as client:
        assert await anthropic_run(OFFLINE, client) == live  # the SDK's own retry got past the 529
    assert flaky.injected[0] is not None

    for status, kind in ((529, anthropic.APIStatusError), (429, anthropic.RateLimitError)):
        failing = ReplayTransport(path, faults=[FailFirst(n=1, fault=HttpError(status=status, retry_after=0.001))])
        async with httpx2.AsyncClient(transport=failing) as client:
            with pytest.raises(kind) as raised:
                await anthropic_run(OFFLINE, client, max_retries=0)
        assert raised.value.status_code == status
        if status == 529:
            assert raised.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


@one_worker("anthropic")
async def test_an_overloaded_error_mid_stream_is_recorded_and_replayed(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    import anthropic

    fake_provider.enqueue(FakeResponse(body=overloaded_mid_stream()))
    path = tmp_path / "overloaded.json"

    async def once(base_url: str, client: httpx2.AsyncClient) -> str:
        sdk = anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, http_client=client, max_retries=0)
        try:
            async for _ in await sdk.messages.create(**QUESTION, stream=True):
                pass
        except anthropic.APIStatusError as error:
            return f"{type(error).__name__}: {error.body['error']['type']}"  # type: ignore[index]
        return "no error"

    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path)) as client:
        live = await once(fake_provider.url, client)
    assert live.endswith("overloaded_error")
    (recorded,) = load_cassette(path).interactions
    assert type(recorded.outcome) is Raised
    assert (recorded.outcome.status, recorded.outcome.code) == (529, "PROVIDER_HTTP_ERROR")
    async with httpx2.AsyncClient(transport=ReplayTransport(path)) as client:
        assert await once(OFFLINE, client) == live
    with ReplayServer(path, timing=Timing.instant()) as server:
        async with httpx2.AsyncClient() as plain:
            assert await once(server.url, plain) == live


# -- OpenAI Responses --------------------------------------------------------------------------------------------


def responses_stream() -> bytes:
    """A reasoning item with a summary, text, then a function call whose arguments arrive in pieces."""
    response = {"id": "resp_synthetic", "object": "response", "created_at": 1700000000, "model": "gpt-test-1"}
    base = {**response, "status": "in_progress", "output": [], "usage": None, "error": None, "incomplete_details": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": base},
        {"type": "response.in_progress", "response": base},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": []},
        },
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": ""},
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "delta": "Use the tool.",
        },
        {
            "type": "response.reasoning_summary_text.done",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "text": "Use the tool.",
        },
        {
            "type": "response.reasoning_summary_part.done",
            "item_id": "rs_1",
            "output_index": 0,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": "Use the tool."},
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Use the tool."}]},
        },
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"id": "msg_1", "type": "message", "status": "in_progress", "content": [], "role": "assistant"},
        },
        {
            "type": "response.content_part.added",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""},
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "Checking ",
            "logprobs": [],
        },
        {
            "type": "response.output_text.delta",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "delta": "Paris.",
            "logprobs": [],
        },
        {
            "type": "response.output_text.done",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "text": "Checking Paris.",
            "logprobs": [],
        },
        {
            "type": "response.content_part.done",
            "item_id": "msg_1",
            "output_index": 1,
            "content_index": 0,
            "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": "Checking Paris."},
        },
        {
            "type": "response.output_item.done",
            "output_index": 1,
            "item": {
                "id": "msg_1",
                "type": "message",
                "status": "completed",
                "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Checking Paris."}],
                "role": "assistant",
            },
        },
        {
            "type": "response.output_item.added",
            "output_index": 2,
            "item": {
                "id": "fc_1",
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": "call_paris",
                "name": "get_weather",
            },
        },
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2, "delta": '{"city": '},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 2, "delta": '"Paris"}'},
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 2,
            "arguments": '{"city": "Paris"}',
        },
    ]
    call = {
        "id": "fc_1",
        "type": "function_call",
        "status": "completed",
        "arguments": '{"city": "Paris"}',
        "call_id": "call_paris",
        "name": "get_weather",
    }
    events.append({"type": "response.output_item.done", "output_index": 2, "item": call})
    usage = {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 8},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 4},
        "total_tokens": 29,
    }
    done = {**base, "status": "completed", "usage": usage}
    done["output"] = [events[7]["item"], events[14]["item"], call]
    events.append({"type": "response.completed", "response": done})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return _events(*events)


TOOLS: Any = [{"type": "function", "name": "get_weather", "description": "Weather.", "parameters": {"type": "object"}}]


async def openai_run(base_url: str, client: httpx2.AsyncClient, *, max_retries: int = 2) -> dict[str, Any]:
    """``responses.create(stream=True)`` event by event, then ``responses.stream(...)`` and its final response."""
    import openai

    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", http_client=client, max_retries=max_retries)
    text: list[str] = []
    async for event in await sdk.responses.create(
        model="gpt-test", input="Weather in Paris?", tools=TOOLS, stream=True
    ):
        if event.type == "response.output_text.delta":
            text.append(event.delta)
    async with sdk.responses.stream(model="gpt-test", input="Weather in Paris?", tools=TOOLS) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    reasoning, message, call = final.output
    assert message.type == "message"
    return {
        "text": "".join(text),
        "summary": reasoning.summary[0].text,  # type: ignore[union-attr]
        "said": final.output_text,
        "call": (call.call_id, call.name, call.arguments),  # type: ignore[union-attr]
        "usage": (final.usage.input_tokens, final.usage.output_tokens) if final.usage else None,
        "ids": (final.id, message.id),
    }


async def test_openai_responses_sdk_gets_the_recorded_stream_from_every_face(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(FakeResponse(body=responses_stream()), FakeResponse(body=responses_stream()))
    path = tmp_path / "responses.json"
    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path)) as client:
        live = await openai_run(fake_provider.url + "/v1", client)
    assert live == {
        "text": "Checking Paris.",
        "summary": "Use the tool.",
        "said": "Checking Paris.",
        "call": ("call_paris", "get_weather", '{"city": "Paris"}'),
        "usage": (20, 9),
        "ids": ("resp_synthetic", "msg_1"),
    }
    transport = ReplayTransport(path)
    async with httpx2.AsyncClient(transport=transport) as client:
        in_process = await openai_run(OFFLINE + "/v1", client)
    with ReplayServer(path, timing=Timing.instant()) as server:
        async with httpx2.AsyncClient() as client:
            served = await openai_run(server.url + "/v1", client)
    assert in_process == served == live

    import openai

    flaky = ReplayTransport(path, faults=[FailFirst(n=1, fault=HttpError(status=429, retry_after=0.001))])
    async with httpx2.AsyncClient(transport=flaky) as client:
        assert await openai_run(OFFLINE + "/v1", client) == live  # the SDK's retry got past the 429
    failing = ReplayTransport(path, faults=[FailFirst(n=1, fault=HttpError(status=429, retry_after=0.001))])
    async with httpx2.AsyncClient(transport=failing) as client:
        with pytest.raises(openai.RateLimitError):
            await openai_run(OFFLINE + "/v1", client, max_retries=0)
