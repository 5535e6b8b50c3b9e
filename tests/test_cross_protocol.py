"""One recording, several provider clients: a cassette recorded on one protocol is served on another's route, the
content that maps (text, tool calls, usage) carried over, with a warning naming what does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from chunktape import Timing
from chunktape.http import CrossProtocolWarning, RecordingTransport, ReplayServer, ReplayTransport
from fake_provider import FakeProvider, FakeResponse
from protocol_streams import messages_stream
from sdk_agents import one_worker, text_and_tool_call

QUESTION: Any = [{"role": "user", "content": "Weather in Paris?"}]


async def _record_chat(fake: FakeProvider, path: Path) -> None:
    import openai

    fake.enqueue(FakeResponse(body=text_and_tool_call()))
    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path)) as client:
        sdk = openai.AsyncOpenAI(base_url=fake.url + "/v1", api_key="sk-test", http_client=client)
        async for _ in await sdk.chat.completions.create(model="gpt-4o-mini", messages=QUESTION, stream=True):
            pass


@one_worker("anthropic")
async def test_a_chat_recording_answers_the_anthropic_sdk(fake_provider: FakeProvider, tmp_path: Path) -> None:
    import anthropic

    path = tmp_path / "chat.json"
    await _record_chat(fake_provider, path)
    transport = ReplayTransport(path, match_on="messages")
    async with httpx2.AsyncClient(transport=transport) as client:
        sdk = anthropic.AsyncAnthropic(base_url="http://127.0.0.1:9", api_key="k", http_client=client, max_retries=0)
        with pytest.warns(CrossProtocolWarning, match="recorded on chat is served as anthropic"):
            async with sdk.messages.stream(model="claude-x", max_tokens=64, messages=QUESTION) as stream:
                final = await stream.get_final_message()
    text, call = final.content
    assert text.text == "Let me check."  # type: ignore[union-attr]
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (9, 7)


async def test_an_anthropic_recording_answers_the_openai_sdk_on_both_routes(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    import openai

    fake_provider.enqueue(FakeResponse(body=messages_stream()))
    path = tmp_path / "messages.json"
    async with httpx2.AsyncClient(transport=RecordingTransport(httpx2.AsyncHTTPTransport(), path)) as client:
        request = {"model": "claude-x", "max_tokens": 64, "messages": QUESTION, "stream": True}
        async with client.stream("POST", fake_provider.url + "/v1/messages", json=request) as answer:
            await answer.aread()
    with ReplayServer(path, timing=Timing.instant(), match_on="messages", allow_repeats=True) as server:
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0) as sdk:
            pieces: list[str] = []
            calls: list[str] = []
            async for event in await sdk.chat.completions.create(model="gpt-x", messages=QUESTION, stream=True):
                for choice in event.choices:
                    pieces.append(choice.delta.content or "")
                    calls.extend(
                        (call.function.arguments or "") for call in choice.delta.tool_calls or () if call.function
                    )
            assert "".join(pieces) == "Checking Paris."
            assert "".join(calls) == '{"city": "Paris"}'
            raw = await sdk.responses.with_raw_response.create(model="gpt-x", input="Weather in Paris?")
            assert "not carried over" in raw.headers["x-chunktape-warning"]
            assert "anthropic events" in raw.headers["x-chunktape-warning"]  # its pings
            response = raw.parse()
    assert response.output_text == "Checking Paris."
