"""The vcrpy bridge: ``vcr_config()`` keeps credentials out, ``import_vcr`` turns the traffic into chunks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import vcr
import yaml

from chunktape import (
    Completed,
    ErrorCode,
    GenerateOptions,
    LlmError,
    Message,
    Raised,
    StreamChunk,
    ToolSpec,
)
from chunktape._replayer import ReplayAdapter
from chunktape.http import import_vcr, vcr_config
from chunktape.providers import OpenAICompatAdapter
from chunktape.providers._openai_compat import DEEPSEEK_REASONING
from fake_provider import (
    DEEPSEEK_400_BODY,
    FakeProvider,
    FakeResponse,
    deepseek_parallel_tools,
    deepseek_reasoning_then_text,
    openai_usage_after_finish,
)
from helpers import drain

KEY = "sk-vcr-secret-0123456789abcdef"
OPTIONS = [
    GenerateOptions(model="deepseek-chat", messages=[Message(role="user", content="weather in Beijing and Luoyang?")]),
    GenerateOptions(
        model="deepseek-reasoner",
        messages=[Message(role="system", content="be brief"), Message(role="user", content="hi")],
        reasoning="thinking",
        max_tokens=64,
        tools=[ToolSpec(name="get_weather", description="weather", parameters={"type": "object"})],
    ),
    GenerateOptions(model="gpt-4o", messages=[Message(role="user", content="two tools please")], temperature=0.5),
    GenerateOptions(model="deepseek-chat", messages=[Message(role="user", content="too long")]),
]
BODIES = [
    FakeResponse(body=deepseek_parallel_tools(), headers={"set-cookie": "session=abc"}),
    FakeResponse(body=deepseek_reasoning_then_text()),
    FakeResponse(body=openai_usage_after_finish()),
    FakeResponse(
        body=DEEPSEEK_400_BODY, status=400, content_type="application/octet-stream", headers={"retry-after": "3"}
    ),
]


async def live_run(provider: FakeProvider) -> list[tuple[list[StreamChunk], LlmError | None]]:
    provider.enqueue(*BODIES)
    adapter = OpenAICompatAdapter(provider.url, api_key=KEY, reasoning=DEEPSEEK_REASONING)
    results: list[tuple[list[StreamChunk], LlmError | None]] = []
    try:
        for options in OPTIONS:
            results.append(await drain(adapter.stream(options)))
    finally:
        await adapter.aclose()
    return results


async def test_vcrpy_round_trip(fake_provider: FakeProvider, tmp_path: Path) -> None:
    path = tmp_path / "provider.yaml"
    with vcr.VCR(**vcr_config()).use_cassette(str(path)):
        live = await live_run(fake_provider)
    assert len(fake_provider.requests) == len(OPTIONS)

    text = path.read_text(encoding="utf-8")
    assert KEY not in text
    document = yaml.safe_load(text)
    for recorded in document["interactions"]:
        assert not {name.lower() for name in recorded["request"]["headers"]} & {"authorization", "cookie"}
        assert "set-cookie" not in {name.lower() for name in recorded["response"]["headers"]}

    cassette = import_vcr(path)
    assert len(cassette.interactions) == len(OPTIONS)
    for interaction, options, (chunks, error) in zip(cassette.interactions, OPTIONS, live, strict=True):
        assert interaction.chunks == chunks
        assert interaction.request.to_options() == options
        if error is None:
            assert isinstance(interaction.outcome, Completed)
        else:
            assert isinstance(interaction.outcome, Raised)
            assert (interaction.outcome.code, interaction.outcome.status) == (error.code, error.status)
            assert interaction.outcome.retry_after == error.retry_after == 3.0
            assert "No tool output found" in interaction.outcome.message

    # The imported cassette replays what the live run saw.
    replay = ReplayAdapter(cassette)
    for options, (chunks, error) in zip(OPTIONS, live, strict=True):
        replayed, replay_error = await drain(replay.stream(options))
        assert replayed == chunks
        assert (None if replay_error is None else replay_error.status) == (None if error is None else error.status)


def test_vcr_config_defaults() -> None:
    config = vcr_config()
    assert {"authorization", "api-key", "x-api-key", "cookie", "set-cookie"} <= set(config["filter_headers"])
    assert config["match_on"] == ["method", "scheme", "host", "port", "path", "query", "body"]
    assert config["decode_compressed_response"] is True
    vcr.VCR(**config)  # vcrpy accepts every key


def test_import_vcr_errors(tmp_path: Path) -> None:
    with pytest.raises(LlmError) as info:
        import_vcr(tmp_path / "missing.yaml")
    assert info.value.code is ErrorCode.CASSETTE_NOT_FOUND
    empty = tmp_path / "empty.yaml"
    empty.write_text("interactions: []\nversion: 1\n", encoding="utf-8")
    with pytest.raises(LlmError) as info:
        import_vcr(empty)
    assert info.value.code is ErrorCode.CASSETTE_CORRUPT


def write_vcr(path: Path, *responses: dict[str, Any]) -> Path:
    """A vcrpy cassette of chat-completions exchanges, one per ``response`` (vcrpy's YAML layout)."""
    request = {
        "body": json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}),
        "headers": {},
        "method": "POST",
        "uri": "https://api.deepseek.com/chat/completions",
    }
    interactions = [{"request": request, "response": response} for response in responses]
    path.write_text(yaml.safe_dump({"interactions": interactions, "version": 1}), encoding="utf-8")
    return path


def vcr_response(body: str, status: Any = 200, ctype: str = "text/event-stream", **headers: str) -> dict[str, Any]:
    return {
        "body": {"string": body},
        "headers": {"content-type": [ctype], **{name.replace("_", "-"): [value] for name, value in headers.items()}},
        "status": {"code": status, "message": "OK"},
    }


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry_after": "Wed, 21 Oct 2099 07:28:00 GMT"}, 86_400.0),
        ({"retry_after": "nan"}, None),
        ({"retry_after": "inf"}, None),
        ({"retry_after_ms": "1500", "retry_after": "9"}, 1.5),
    ],
)
def test_import_vcr_reads_retry_after_like_the_adapter(
    tmp_path: Path, headers: dict[str, str], expected: float | None
) -> None:
    path = write_vcr(tmp_path / "c.yaml", vcr_response('{"error": {"message": "slow"}}', 429, **headers))
    outcome = import_vcr(path).interactions[0].outcome
    assert isinstance(outcome, Raised)
    assert (outcome.status, outcome.retry_after) == (429, expected)


@pytest.mark.parametrize(
    ("response", "what"),
    [
        (vcr_response('{"choices": [', ctype="application/json"), "JSON response body cannot be parsed"),
        (vcr_response('{"choices": [1]}'), "not a readable chat.completion"),
        (vcr_response('{"choices": [{"message": {"content": 5}}]}'), "not a readable chat.completion"),
        (vcr_response("data: [DONE]\n\n", status="abc"), "status 'abc' is not a number"),
        (vcr_response("data: [DONE]\n\n", status=None), "status None is not a number"),
    ],
)
def test_import_vcr_names_the_bad_interaction(tmp_path: Path, response: dict[str, Any], what: str) -> None:
    ok = vcr_response('data: {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}]}\n\n')
    path = write_vcr(tmp_path / "c.yaml", ok, response)
    with pytest.raises(LlmError) as info:
        import_vcr(path)
    assert info.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "vcr interaction #1 (POST https://api.deepseek.com/chat/completions)" in info.value.message
    assert what in info.value.message
    assert info.value.__cause__ is None or isinstance(info.value.__cause__, Exception)


def test_import_vcr_reads_a_non_streamed_completion_and_a_200_that_is_not_sse(tmp_path: Path) -> None:
    completion = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "content": "Paris",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    html = vcr_response("<html>proxy login</html>", ctype="text/html")
    path = write_vcr(tmp_path / "c.yaml", vcr_response(json.dumps(completion)), html)
    with pytest.raises(LlmError, match=r"vcr interaction #1 .*cannot be decoded"):
        import_vcr(path)  # an undecodable answer is never imported silently
    cassette = import_vcr(path, keep_undecodable=True)
    first, second = cassette.interactions
    assert isinstance(first.outcome, Completed)
    assert [type(c).__name__ for c in first.chunks][-2:] == ["UsageChunk", "Finish"]
    assert isinstance(second.outcome, Raised)
    assert second.outcome.code == ErrorCode.INVALID_RESPONSE.value
    assert "text/html" in second.outcome.message
