"""Real SDKs and frameworks recorded through RecordingTransport against a loopback provider, then replayed
offline through ReplayTransport (no server running): the same text and tool calls, and the SDK's own errors.

The SDKs are imported inside the tests, so the rest of the suite does not pay for importing them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

from chunktape import load_cassette
from chunktape.faults import FailFirst, HttpError
from chunktape.http import RecordingTransport, ReplayTransport
from fake_provider import FakeProvider, FakeResponse, chunk, sse, tool_delta
from sdk_agents import one_worker

OFFLINE = "http://127.0.0.1:9/v1"
"""Where replayed SDKs point: nothing listens there, and ReplayTransport never opens a socket."""


def _answer(text: str) -> bytes:
    pieces = [text[: len(text) // 2], text[len(text) // 2 :]]
    return sse(
        chunk({"role": "assistant", "content": ""}, model="gpt-4o-mini-2024-07-18"),
        *(chunk({"content": piece}, model="gpt-4o-mini-2024-07-18") for piece in pieces),
        chunk({}, finish_reason="stop", model="gpt-4o-mini-2024-07-18"),
        chunk(choices=False, usage={"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}),
    )


def _tool_answer() -> bytes:
    return sse(
        chunk(tool_delta(0, "", id="call_paris", name="get_weather")),
        chunk(tool_delta(0, '{"city": ')),
        chunk(tool_delta(0, '"Paris"}')),
        chunk({}, finish_reason="tool_calls"),
    )


async def _record_and_replay(
    fake_provider: FakeProvider,
    tmp_path: Path,
    body: bytes,
    run: Callable[[str, httpx2.AsyncClient], Any],
) -> tuple[Any, Any]:
    """``run(base_url, client)`` once against the fake provider (recorded), once offline (replayed)."""
    fake_provider.enqueue(FakeResponse(body=body, headers={"x-request-id": "req_sdk"}))
    path = tmp_path / "sdk.msgpack"
    recording = RecordingTransport(httpx2.AsyncHTTPTransport(), path)
    async with httpx2.AsyncClient(transport=recording) as client:
        live = await run(fake_provider.url + "/v1", client)
    assert len(load_cassette(path).interactions) == 1
    replay = ReplayTransport(path)
    async with httpx2.AsyncClient(transport=replay) as client:
        replayed = await run(OFFLINE, client)
    replay.assert_all_played()
    return live, replayed


async def test_openai_tool_calls_and_a_429_once(fake_provider: FakeProvider, tmp_path: Path) -> None:
    import openai

    async def run(base_url: str, client: httpx2.AsyncClient) -> list[tuple[str, str]]:
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="test", http_client=client)
        stream = await sdk.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "weather in Paris?"}], stream=True
        )
        calls: dict[int, list[str]] = {}
        async for event in stream:
            for call in (event.choices[0].delta.tool_calls or []) if event.choices else []:
                calls.setdefault(call.index, []).append((call.function and call.function.arguments) or "")
        return [("get_weather", "".join(pieces)) for pieces in calls.values()]

    live, replayed = await _record_and_replay(fake_provider, tmp_path, _tool_answer(), run)
    assert live == replayed == [("get_weather", '{"city": "Paris"}')]
    flaky = ReplayTransport(tmp_path / "sdk.msgpack", faults=[FailFirst(n=1, fault=HttpError(429, retry_after=0.001))])
    async with httpx2.AsyncClient(transport=flaky) as client:
        assert await run(OFFLINE, client) == live  # the SDK's own retry got past the 429
    assert flaky.injected[1] is None


def test_openai_sync_over_httpx(fake_provider: FakeProvider, tmp_path: Path) -> None:
    import openai

    def run(base_url: str, transport: httpx.BaseTransport) -> str:
        with httpx.Client(transport=transport) as client:
            sdk = openai.OpenAI(base_url=base_url, api_key="test", http_client=client)  # type: ignore[arg-type]
            stream = sdk.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            return "".join(event.choices[0].delta.content or "" for event in stream if event.choices)

    fake_provider.enqueue(FakeResponse(body=_answer("Hello there")))
    path = tmp_path / "sync.json"
    assert run(fake_provider.url + "/v1", RecordingTransport(httpx.HTTPTransport(), path)) == "Hello there"
    assert run(OFFLINE, ReplayTransport(path)) == "Hello there"


@one_worker("anthropic")
async def test_anthropic_non_streamed_message_is_recorded_and_replayed(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    import anthropic

    seen: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.path)
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [{"type": "text", "text": "Bonjour"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
        return httpx2.Response(200, json=message)

    path = tmp_path / "anthropic.json"
    transport = RecordingTransport(httpx2.MockTransport(answer), path)
    async with httpx2.AsyncClient(transport=transport) as client:
        sdk = anthropic.AsyncAnthropic(base_url="http://127.0.0.1", api_key="test", http_client=client)
        reply = await sdk.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert reply.content[0].text == "Bonjour"  # type: ignore[union-attr]
    assert seen == ["/v1/messages"]
    (recorded,) = load_cassette(path).interactions
    assert recorded.response is not None
    assert recorded.response.id == "msg_1"
    async with httpx2.AsyncClient(transport=ReplayTransport(path)) as client:
        sdk = anthropic.AsyncAnthropic(base_url=OFFLINE, api_key="test", http_client=client)
        again = await sdk.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert again.content[0].text == "Bonjour"  # type: ignore[union-attr]
    assert (again.id, again.stop_reason, again.usage.input_tokens, again.usage.output_tokens) == (
        "msg_1",
        "end_turn",
        3,
        1,
    )


@one_worker("pydantic-ai")
async def test_pydantic_ai(fake_provider: FakeProvider, tmp_path: Path) -> None:
    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async def run(base_url: str, client: httpx2.AsyncClient) -> str:
        sdk = AsyncOpenAI(base_url=base_url, api_key="test", http_client=client)
        agent = Agent(OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=sdk)))
        async with agent.run_stream("Say hello") as result:
            return await result.get_output()

    live, replayed = await _record_and_replay(fake_provider, tmp_path, _answer("Hello from pydantic-ai"), run)
    assert live == replayed == "Hello from pydantic-ai"


@one_worker("langchain-openai")
async def test_langchain_openai(fake_provider: FakeProvider, tmp_path: Path) -> None:
    from langchain_openai import ChatOpenAI

    async def run(base_url: str, client: httpx2.AsyncClient) -> tuple[str, list[Any]]:
        model = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="test", http_async_client=client)  # type: ignore[arg-type]
        text, calls = "", []
        async for piece in model.astream("weather in Paris?"):
            text += str(piece.content)
            calls.extend(piece.tool_call_chunks)
        return text, calls

    live, replayed = await _record_and_replay(fake_provider, tmp_path, _tool_answer(), run)
    assert live == replayed
    assert "".join(call["args"] or "" for call in live[1]) == '{"city": "Paris"}'


@one_worker("litellm")
async def test_litellm(fake_provider: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches a cost map from the net otherwise
    monkeypatch.setenv("LITELLM_TELEMETRY", "False")
    import litellm
    from openai import AsyncOpenAI

    async def run(base_url: str, client: httpx2.AsyncClient) -> str:
        sdk = AsyncOpenAI(base_url=base_url, api_key="test", http_client=client)
        stream = await litellm.acompletion(
            model="openai/gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            client=sdk,
            api_base=base_url,
            api_key="test",
        )
        return "".join([piece.choices[0].delta.content or "" async for piece in stream])

    live, replayed = await _record_and_replay(fake_provider, tmp_path, _answer("Hello from litellm"), run)
    assert live == replayed == "Hello from litellm"
