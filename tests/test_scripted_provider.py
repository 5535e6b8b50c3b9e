"""The scripted provider (``serve --script``): a user scripts the turns of their own conversation, records their
own SDK agent against it in one step, and replays that cassette; scripted HTTP and in-stream errors, and every
injected fault on top, reach the SDK as a real provider's would."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from chunktape import ErrorCode, LlmError, load_cassette
from chunktape.http import ReplayServer, ReplayTransport
from chunktape.http._server.scripted import load_script
from helpers import serving

SCRIPT = """
pace = { first_chunk_s = 0.0, between_s = 0.0 }

[[turns]]
when = "weather"
text = "Let me check."
tool_calls = [{ name = "get_weather", arguments = { city = "Paris" }, id = "call_1" }]
usage = { input_tokens = 12, output_tokens = 9 }

[[turns]]
text = "It is sunny in Paris."
finish = "stop"
"""
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


async def agent(sdk: openai.AsyncOpenAI) -> str:
    """The user's agent: asks, runs the tool the model calls, asks again."""
    messages: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    while True:
        stream = await sdk.chat.completions.create(model="my-model", messages=messages, tools=TOOLS, stream=True)
        text, calls = "", dict[int, dict[str, Any]]()
        async for event in stream:
            for choice in event.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or ():
                    entry = calls.setdefault(call.index, {"id": call.id, "name": "", "arguments": ""})
                    if call.function is not None:
                        entry["name"] += call.function.name or ""
                        entry["arguments"] += call.function.arguments or ""
        if not calls:
            await sdk.close()
            return text
        messages.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls.values()
                ],
            }
        )
        for c in calls.values():
            city = json.loads(c["arguments"])["city"]
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": f"sunny in {city}"})


def _script(tmp_path: Path, text: str = SCRIPT) -> Path:
    path = tmp_path / "turns.toml"
    path.write_text(textwrap.dedent(text))
    return path


async def test_an_agent_is_recorded_against_its_script_in_one_step_and_replays(tmp_path: Path) -> None:
    cassette = tmp_path / "agent.msgpack"
    async with ReplayServer(script=_script(tmp_path), record=cassette) as server:
        answer = await agent(openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0))
        assert server.script is not None
        server.script.assert_all_played()
    assert answer == "It is sunny in Paris."
    recorded = load_cassette(cassette).interactions
    assert [interaction.request.messages[-1].role for interaction in recorded] == ["user", "tool"]
    assert recorded[1].request.messages[-1].content == "sunny in Paris"
    transport = ReplayTransport(cassette)
    client = httpx2.AsyncClient(transport=transport)
    replayed = await agent(openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k", http_client=client))
    assert replayed == answer
    transport.assert_all_played()


async def test_a_recording_numbers_attempts_of_the_very_same_call_only(tmp_path: Path) -> None:
    """The same question once streamed, once not, then streamed again: only the third repeats a call (attempt 2)."""
    script = _script(tmp_path, '[[turns]]\ntext = "Sunny."\nrepeat = true\n')
    cassette = tmp_path / "agent.msgpack"
    messages: Any = [{"role": "user", "content": "weather?"}]
    async with ReplayServer(script=script, record=cassette) as server:
        sdk = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        async with sdk:
            async for _ in await sdk.chat.completions.create(model="m", messages=messages, stream=True):
                pass
            await sdk.chat.completions.create(model="m", messages=messages)
            async for _ in await sdk.chat.completions.create(model="m", messages=messages, stream=True):
                pass
    assert [interaction.attempt for interaction in load_cassette(cassette).interactions] == [1, 1, 2]


ERRORS = """
[[turns]]
when = "limit"
error = { status = 429, retry_after = 0.001, message = "slow down" }

[[turns]]
when = "break"
text = "one two three four"
error = { code = "STREAM_ABORTED", after_chunks = 3, message = "connection reset" }

[[turns]]
when = "inband"
text = "one two three four"
error = { status = 500, after_chunks = 3, message = "overloaded" }

[[turns]]
text = "fine"
repeat = true
"""


@pytest.mark.parametrize(
    ("question", "raised"),
    [
        ("limit", openai.RateLimitError),
        ("break", openai.APIConnectionError),
        ("inband", openai.APIError),
    ],
)
async def test_scripted_errors_reach_the_sdk_as_a_providers(tmp_path: Path, question: str, raised: type) -> None:
    async with ReplayServer(script=_script(tmp_path, ERRORS)) as server:
        sdk = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        with pytest.raises(raised):
            stream = await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": question}], stream=True
            )
            async for _ in stream:
                pass
        await sdk.close()


async def test_an_injected_fault_on_top_leaves_the_turn_for_the_sdks_retry(tmp_path: Path) -> None:
    async with ReplayServer(script=_script(tmp_path, ERRORS), faults=["http-503"]) as server:
        sdk = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=1)
        stream = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        text = "".join([event.choices[0].delta.content or "" async for event in stream if event.choices])
        await sdk.close()
        assert server.script is not None
        assert (text, server.script.injected) == ("fine", ["http-503", None])


def test_a_bad_script_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LlmError) as bad:
        load_script(_script(tmp_path, "[[turns]]\ntext = 3\n"))
    assert bad.value.code is ErrorCode.INVALID_CONFIG
    assert "turns" in bad.value.message


def test_serve_script_records_in_one_command(tmp_path: Path) -> None:
    """``chunktape serve --script turns.toml --record agent.msgpack``, the documented recipe, as a user runs it."""
    script = _script(tmp_path)
    cassette = tmp_path / "agent.msgpack"
    with serving("--script", script, "--record", cassette) as served:
        answer = asyncio.run(agent(openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="k", max_retries=0)))
    assert answer == "It is sunny in Paris."
    assert f"saved {cassette}" in served.out
    assert len(load_cassette(cassette).interactions) == 2


def test_a_request_number_no_cassette_can_store_is_refused_and_the_recording_kept(tmp_path: Path) -> None:
    """A client's ``"seed": <30 digits>`` was served, then made the whole recording unsavable at Ctrl-C (an
    ``OverflowError`` of msgpack, every interaction lost): it is a 400 naming the field, and the rest is saved."""
    script = _script(tmp_path, '[[turns]]\ntext = "Sunny."\nrepeat = true\n')
    cassette = tmp_path / "agent.msgpack"
    with serving("--script", script, "--record", cassette) as served:
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        with httpx2.Client(base_url=served.url) as client:
            assert client.post("/v1/chat/completions", json=chat).status_code == 200
            wide = client.post("/v1/chat/completions", json={**chat, "seed": 10**30})
            messages = {"model": "m", "max_tokens": 10**25, "messages": chat["messages"]}
            anthropic = client.post("/v1/messages", json=messages)
            responses = client.post("/v1/responses", json={"model": "m", "input": "hi", "top_logprobs": -(10**20)})
    for refused, field in ((wide, "seed"), (anthropic, "max_tokens"), (responses, "top_logprobs")):
        assert refused.status_code == 400, refused.text
        assert f"field `{field}` holds an integer outside" in refused.json()["error"]["message"]
    assert "Traceback" not in served.err
    assert len(load_cassette(cassette).interactions) == 1


def test_record_against_a_loopback_provider_needs_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from chunktape.cli import app

    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    script = _script(tmp_path, '[[turns]]\ntext = "Hello there."\n')
    cassette = tmp_path / "hello.msgpack"
    with ReplayServer(script=script) as server:
        result = CliRunner().invoke(
            app, ["record", "--prompt", "Say hello", "-o", str(cassette), "--base-url", server.url + "/v1"]
        )
    assert result.exit_code == 0, result.output
    assert "Hello there." in result.output
    assert len(load_cassette(cassette).interactions) == 1
