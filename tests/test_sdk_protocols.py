"""The real anthropic and openai SDKs on the Messages and Responses protocols: recorded through RecordingTransport
from the loopback stand-in provider, then replayed through ReplayTransport (in process) and by a ReplayServer; each
face gives the SDK exactly what was recorded, and its own exceptions and retries for faults.

The streams are synthetic: each reproduces a feature of the real captures (thinking with a signature, a tool-use
turn, a function call, pings, cache usage), none is a copy of one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import msgspec
import pytest

from chunktape import BlockEnd, Raised, Timing, load_cassette
from chunktape.faults import FailFirst, HttpError
from chunktape.http import RecordingTransport, ReplayServer, ReplayTransport
from fake_provider import FakeProvider, FakeResponse
from protocol_streams import messages_stream, overloaded_mid_stream, responses_stream, tool_input_cut_by_max_tokens
from sdk_agents import one_worker

KEY = "sk-ant-test-0123456789abcdefghij"
OFFLINE = "http://127.0.0.1:9"


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


# -- the in-stream error fault on each protocol -----------------------------------------------------------------


@one_worker("anthropic")
async def test_an_injected_error_mid_stream_is_what_an_overloaded_provider_sends(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    """``error-mid-stream`` over a clean recording gives the SDK what a real overloaded provider gave it: its own
    error for an ``overloaded_error`` event after the stream began, once; the retry gets the recording."""
    import anthropic

    fake_provider.enqueue(FakeResponse(body=overloaded_mid_stream()), FakeResponse(body=messages_stream()))
    overloaded, clean = tmp_path / "overloaded.json", tmp_path / "clean.json"

    async def once(base_url: str, client: httpx2.AsyncClient) -> str:
        sdk = anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, http_client=client, max_retries=0)
        events: list[str] = []
        try:
            async for event in await sdk.messages.create(**QUESTION, stream=True):
                events.append(event.type)
        except anthropic.APIStatusError as error:
            return f"{type(error).__name__}: {error.body['error']['type']} after {events[:1]}"  # type: ignore[index]
        return f"no error: {len(events)} events"

    for path in (overloaded, clean):
        async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path)) as client:
            if path is overloaded:
                live = await once(fake_provider.url, client)
            else:
                await once(fake_provider.url, client)
    assert live == "APIStatusError: overloaded_error after ['message_start']"
    transport = ReplayTransport(clean, faults=["error-mid-stream"])
    async with httpx2.AsyncClient(transport=transport) as client:
        assert await once(OFFLINE, client) == live
        assert (await once(OFFLINE, client)).startswith("no error")  # transient: the retry replays the recording
    with ReplayServer(clean, timing=Timing.instant(), faults=["error-mid-stream"]) as server:
        async with httpx2.AsyncClient() as plain:
            assert await once(server.url, plain) == live


async def test_an_injected_error_mid_stream_fails_a_responses_stream_and_a_chat_stream(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    """The same fault in the other protocols' own forms: ``response.failed`` for Responses, an ``error`` object
    inside a chat-completions stream; the openai SDK reports each as the stream failing, after the first events."""
    import openai

    from sdk_agents import text_and_tool_call

    fake_provider.enqueue(FakeResponse(body=responses_stream()), FakeResponse(body=text_and_tool_call()))
    responses_path, chat_path = tmp_path / "responses.json", tmp_path / "chat.json"
    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), responses_path)) as c:
        sdk = openai.AsyncOpenAI(base_url=fake_provider.url + "/v1", api_key="sk-test", http_client=c)
        async for _ in await sdk.responses.create(model="gpt-test", input="Weather in Paris?", stream=True):
            pass
    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), chat_path)) as c:
        sdk = openai.AsyncOpenAI(base_url=fake_provider.url + "/v1", api_key="sk-test", http_client=c)
        messages: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
        async for _ in await sdk.chat.completions.create(model="m", messages=messages, stream=True):
            pass

    async def responses_once(client: httpx2.AsyncClient) -> tuple[list[str], str | None]:
        sdk = openai.AsyncOpenAI(base_url=OFFLINE + "/v1", api_key="sk-test", http_client=client, max_retries=0)
        kinds: list[str] = []
        async for event in await sdk.responses.create(model="gpt-test", input="Weather in Paris?", stream=True):
            kinds.append(event.type)
            if event.type == "response.failed":
                return kinds, event.response.error.code if event.response.error else None
        return kinds, None

    async def chat_once(client: httpx2.AsyncClient) -> str:
        sdk = openai.AsyncOpenAI(base_url=OFFLINE + "/v1", api_key="sk-test", http_client=client, max_retries=0)
        try:
            async for _ in await sdk.chat.completions.create(model="m", messages=messages, stream=True):
                pass
        except openai.APIError as error:
            return f"{type(error).__name__}: {error.message}"
        return "no error"

    async with httpx2.AsyncClient(transport=ReplayTransport(responses_path, faults=["error-mid-stream"])) as client:
        kinds, code = await responses_once(client)
        assert kinds[0] == "response.created"
        assert (kinds[-1], code) == ("response.failed", "server_error")
        assert "response.completed" not in kinds
    async with httpx2.AsyncClient(transport=ReplayTransport(chat_path, faults=["error-mid-stream"])) as client:
        assert "overloaded [injected fault error-mid-stream" in await chat_once(client)
        assert await chat_once(client) == "no error"


@one_worker("anthropic")
async def test_a_tool_input_cut_by_max_tokens_replays_as_the_provider_sent_it(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    """The stream is kept as a cut tool call (not refused): the SDK gets the same partial input and stop reason back,
    and the harness, which cannot run a cut call, ends the turn with ``length``."""
    import anthropic

    from chunktape import ReplayAdapter, ToolCallBlock
    from chunktape.harness import collect, stream_with_retry

    fake_provider.enqueue(FakeResponse(body=tool_input_cut_by_max_tokens()))
    path = tmp_path / "cut.json"

    async def once(base_url: str, client: httpx2.AsyncClient) -> tuple[Any, ...]:
        sdk = anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, http_client=client, max_retries=0)
        async with sdk.messages.stream(**QUESTION) as stream:
            final = await stream.get_final_message()
        said, call = final.content
        return final.stop_reason, said.text, call.name, call.input  # type: ignore[union-attr]

    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path)) as client:
        live = await once(fake_provider.url, client)
    assert live[:3] == ("max_tokens", "Writing it.", "write_file")
    (recorded,) = load_cassette(path).interactions
    cut = [chunk.block for chunk in recorded.chunks if type(chunk) is BlockEnd][-1]
    assert type(cut) is ToolCallBlock
    assert (cut.cut, cut.arguments) == (True, '{"path": "a.md", "text": "#')
    async with httpx2.AsyncClient(transport=ReplayTransport(path)) as client:
        assert await once(OFFLINE, client) == live
    with ReplayServer(path, timing=Timing.instant()) as server:
        async with httpx2.AsyncClient() as plain:
            assert await once(server.url, plain) == live
    question = msgspec.structs.replace(recorded.request.to_options(), reasoning=None)  # no effort to check
    transcript = await collect(stream_with_retry(ReplayAdapter(path, match_on="model"), question))
    assert transcript.tool_calls == []
    assert transcript.done is not None
    assert transcript.done.reason == "length"
