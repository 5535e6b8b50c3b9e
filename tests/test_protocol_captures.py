"""Conformance against real recorded Anthropic Messages and OpenAI Responses streams (``../shared/captures``).

Each capture is served from the loopback stand-in provider, whole and dribbled in 7-byte pieces, read by the
protocol's adapter, and must decode to the chunks its events mean (a valid stream, the same chunks either way), then
render back to equivalent events: the same events in the same order with the same fields, up to what carries no
meaning (a delta's random ``obfuscation`` padding, an encrypted reasoning blob the provider re-encrypts per event,
the split of Anthropic's usage counts between ``message_start`` and ``message_delta``, which SDKs merge).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from chunktape import (
    BlockEnd,
    BlockStart,
    ErrorCode,
    Finish,
    GenerateOptions,
    LlmError,
    Message,
    ProviderEvent,
    ReasoningBlock,
    ReasoningDelta,
    ServerToolCallBlock,
    ServerToolResultBlock,
    StreamChunk,
    TextBlock,
    ToolCallBlock,
    UsageChunk,
    validate,
)
from chunktape.providers import AnthropicAdapter, OpenAIResponsesAdapter
from chunktape.wire import (
    AnthropicDecoder,
    AnthropicEncoder,
    ResponsesDecoder,
    ResponsesEncoder,
    SseEvent,
    decode_anthropic_sse,
    decode_responses_sse,
    parse_sse,
)
from fake_provider import FakeProvider, FakeResponse

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
ANTHROPIC = sorted(path.name for path in CAPTURES.glob("anthropic-*.sse"))
RESPONSES = sorted(path.name for path in CAPTURES.glob("openai-responses-*.sse"))
CUT_TOOL_INPUT = "anthropic-sdkfixture-max-tokens-mid-tool-input.sse"
"""The SDK's fixture whose tool input max_tokens cut: a tool call the token limit cut (``ToolCallBlock.cut``)."""


def _events(body: bytes) -> list[tuple[str | None, Any]]:
    return [(item.event, json.loads(item.data)) for item in parse_sse(body) if isinstance(item, SseEvent) and item.data]


def _anthropic_view(body: bytes) -> list[tuple[str | None, Any]]:
    """The events as an SDK reads them: usage merged (message_delta's counts over message_start's)."""
    out: list[tuple[str | None, Any]] = []
    start: dict[str, Any] = {}
    for name, event in _events(body):
        event = json.loads(json.dumps(event))
        if event["type"] == "message_start":
            start = event["message"].pop("usage", {}) or {}
        if event["type"] == "message_delta":
            event["usage"] = {**start, **{k: v for k, v in event.get("usage", {}).items() if v is not None}}
        out.append((name, event))
    return out


def _responses_view(body: bytes) -> list[tuple[str | None, Any]]:
    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k not in ("obfuscation", "encrypted_content", "status")}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return [(name, clean(event)) for name, event in _events(body)]


async def _served(fake: FakeProvider, body: bytes, adapter: Any, piece_size: int | None) -> list[StreamChunk]:
    fake.enqueue(FakeResponse(body=body, piece_size=piece_size))
    question = GenerateOptions(model="m", messages=[Message(role="user", content="hi")])
    async with adapter:
        return [chunk async for chunk in adapter.stream(question)]


@pytest.mark.parametrize("piece_size", [None, 7], ids=["whole", "7-byte-pieces"])
@pytest.mark.parametrize("name", ANTHROPIC)
async def test_anthropic_captures_decode_and_render_back(
    name: str, piece_size: int | None, fake_provider: FakeProvider
) -> None:
    body = (CAPTURES / name).read_bytes()
    chunks = await _served(fake_provider, body, AnthropicAdapter(base_url=fake_provider.url, api_key="k"), piece_size)
    validate(chunks)
    assert chunks == decode_anthropic_sse(body)
    decoder = AnthropicDecoder()
    for item in parse_sse(body):
        decoder.feed_item(item)
    encoder = AnthropicEncoder(model="m", message=decoder.message)
    rendered = encoder.start() + b"".join(encoder.feed(chunk) for chunk in chunks)
    assert _anthropic_view(rendered) == _anthropic_view(body)
    assert encoder.lost == set()


def test_the_anthropic_captures_carry_each_feature() -> None:
    """What the captures promise is in the chunks: signatures, server tools, citations, cache usage, stop reasons."""
    thinking = decode_anthropic_sse((CAPTURES / "anthropic-sonnet4-thinking-signature.sse").read_bytes())
    (reasoning,) = [c.block for c in thinking if type(c) is BlockEnd and type(c.block) is ReasoningBlock]
    assert reasoning.signature
    assert reasoning.text.startswith("This")
    assert any(type(c) is ProviderEvent and c.event == "ping" for c in thinking)
    search = decode_anthropic_sse((CAPTURES / "anthropic-sonnet4-web-search-cache-usage.sse").read_bytes())
    blocks = [c.block for c in search if type(c) is BlockEnd]
    assert [type(b) for b in blocks[:2]] == [ServerToolCallBlock, ServerToolResultBlock]
    assert json.loads(blocks[0].arguments)["query"]  # type: ignore[union-attr]
    assert any(type(b) is TextBlock and b.citations for b in blocks)
    usage = next(c.usage for c in search if type(c) is UsageChunk)
    assert (usage.cached_input_tokens, usage.cache_write_tokens) == (16242, 23258)
    assert usage.input_tokens == 17 + 16242 + 23258
    assert usage.extra["server_tool_use"] == {"web_search_requests": 2}
    refusal = decode_anthropic_sse((CAPTURES / "anthropic-refusal-stop-details.sse").read_bytes())
    finish = refusal[-1].reason  # type: ignore[union-attr]
    assert (finish.kind, finish.provider_reason) == ("content-filter", "refusal")
    assert finish.details is not None
    assert finish.details["category"] == "reasoning_extraction"
    limited = decode_anthropic_sse((CAPTURES / "anthropic-sonnet4-max-tokens.sse").read_bytes())
    assert (limited[-1].reason.kind, limited[-1].reason.provider_reason) == ("length", "max_tokens")  # type: ignore[union-attr]


async def test_a_tool_input_cut_by_max_tokens_is_a_cut_tool_call_that_ends_the_stream(
    fake_provider: FakeProvider,
) -> None:
    body = (CAPTURES / CUT_TOOL_INPUT).read_bytes()
    chunks = await _served(fake_provider, body, AnthropicAdapter(base_url=fake_provider.url, api_key="k"), None)
    validate(chunks)
    ends = [chunk.block for chunk in chunks if type(chunk) is BlockEnd]
    cut = ends[-1]
    assert type(cut) is ToolCallBlock
    assert (cut.name, cut.cut) == ("make_file", True)
    assert cut.arguments.endswith('\n"Filing taxes')  # the input as far as it came
    last = chunks[-1]
    assert type(last) is Finish
    finish = last
    assert (finish.reason.kind, finish.reason.provider_reason) == ("length", "max_tokens")


@pytest.mark.parametrize("piece_size", [None, 7], ids=["whole", "7-byte-pieces"])
@pytest.mark.parametrize("name", RESPONSES)
async def test_responses_captures_decode_and_render_back(
    name: str, piece_size: int | None, fake_provider: FakeProvider
) -> None:
    body = (CAPTURES / name).read_bytes()
    adapter = OpenAIResponsesAdapter(base_url=fake_provider.url + "/v1", api_key="k")
    chunks = await _served(fake_provider, body, adapter, piece_size)
    validate(chunks)
    assert chunks == decode_responses_sse(body)
    decoder = ResponsesDecoder()
    for item in parse_sse(body):
        decoder.feed_item(item)
    encoder = ResponsesEncoder(model="m", response=decoder.response, terminal=decoder.terminal)
    rendered = encoder.start() + b"".join(encoder.feed(chunk) for chunk in chunks)
    assert _responses_view(rendered) == _responses_view(body)
    assert encoder.lost == set()


def test_the_responses_captures_carry_each_feature() -> None:
    summary = decode_responses_sse((CAPTURES / "openai-responses-gpt5-reasoning-summary.sse").read_bytes())
    first = next(c for c in summary if type(c) is BlockStart)
    assert (first.id or "").startswith("rs_")
    parts = {c.part for c in summary if type(c) is ReasoningDelta}
    assert parts == {None, 1, 2}  # three summary parts
    call = decode_responses_sse((CAPTURES / "openai-responses-gpt55-function-call.sse").read_bytes())
    assert call[-1].reason.kind == "tool-calls"  # type: ignore[union-attr]
    search = decode_responses_sse((CAPTURES / "openai-responses-gpt5-web-search-cached-tokens.sse").read_bytes())
    assert any(type(c) is ProviderEvent and c.event == "response.web_search_call.searching" for c in search)
    assert next(c.usage for c in search if type(c) is UsageChunk).cached_input_tokens is not None
    cut = decode_responses_sse((CAPTURES / "openai-responses-gpt4o-incomplete-max-output-tokens.sse").read_bytes())
    assert (cut[-1].reason.kind, cut[-1].reason.provider_reason) == ("length", "incomplete")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "status", "gzipped"),
    [
        ("anthropic-429-rate-limit", 429, False),
        ("anthropic-404-not-found-gzip", 404, True),
    ],
)
async def test_anthropic_error_bodies(name: str, status: int, gzipped: bool, fake_provider: FakeProvider) -> None:
    body = (CAPTURES / f"{name}.body.json").read_bytes()
    headers = {"content-encoding": "gzip"} if gzipped else {}
    wire = gzip.compress(body) if gzipped else body
    fake_provider.enqueue(FakeResponse(body=wire, status=status, headers=headers, content_type="application/json"))
    adapter = AnthropicAdapter(base_url=fake_provider.url, api_key="k", model="m")
    with pytest.raises(LlmError) as raised:
        async with adapter:
            async for _ in adapter.stream(GenerateOptions(model="m", messages=[Message(role="user", content="x")])):
                pass
    error = raised.value
    assert (error.code, error.status) == (ErrorCode.PROVIDER_HTTP_ERROR, status)
    assert json.loads(body)["error"]["message"][:40] in error.message
    assert error.recoverable is (status == 429)


@pytest.mark.parametrize(
    ("name", "status"), [("openai-responses-400-model-not-found", 400), ("openai-responses-401-invalid-api-key", 401)]
)
async def test_responses_error_bodies(name: str, status: int, fake_provider: FakeProvider) -> None:
    body = (CAPTURES / f"{name}.body.json").read_bytes()
    fake_provider.enqueue(FakeResponse(body=body, status=status, content_type="application/json"))
    adapter = OpenAIResponsesAdapter(base_url=fake_provider.url + "/v1", api_key="k", model="m")
    with pytest.raises(LlmError) as raised:
        async with adapter:
            async for _ in adapter.stream(GenerateOptions(model="m", messages=[Message(role="user", content="x")])):
                pass
    assert (raised.value.code, raised.value.status) == (ErrorCode.PROVIDER_HTTP_ERROR, status)
    assert not raised.value.recoverable
