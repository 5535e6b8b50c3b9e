"""OpenAICompatAdapter against a real loopback server: streams, real captures, HTTP errors, aborts, timeouts."""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from chunktape import (
    AbortController,
    BlockStart,
    ErrorCode,
    Finish,
    FinishReason,
    GenerateOptions,
    LlmError,
    Message,
    ReasoningBlock,
    RecordingAdapter,
    ReplayAdapter,
    StreamChunk,
    TextBlock,
    TokenUsage,
    ToolCallBlock,
    UsageChunk,
    attribution_headers,
    validate,
)
from chunktape.providers import OpenAICompatAdapter
from chunktape.providers._openai_compat import DEEPSEEK_REASONING
from fake_provider import (
    DEEPSEEK_400_BODY,
    DribbleTransport,
    FakeProvider,
    FakeResponse,
    chunk,
    deepseek_parallel_tools,
    deepseek_reasoning_then_text,
    groq_error_event,
    openai_usage_after_finish,
    openrouter_inband_error,
    raw_http_server,
    sse,
)
from helpers import blocks, stream_chunks, stream_outcome

OPTIONS = GenerateOptions(model="deepseek-chat", messages=[Message(role="user", content="hi")])
DELIVERIES = ["whole", "server-pieces", "client-dribble"]


def _captures_dir() -> Path:
    env = os.environ.get("CHUNKTAPE_CAPTURES")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "captures"


CAPTURES = _captures_dir()
needs_captures = pytest.mark.skipif(
    not CAPTURES.is_dir(), reason=f"real provider captures not found at {CAPTURES} (set CHUNKTAPE_CAPTURES)"
)


class DribblingAdapter(OpenAICompatAdapter):
    """An adapter over a client the test passes in (it dribbles the body), closed together with the adapter."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        self.dribbling_client = httpx.AsyncClient(transport=DribbleTransport(3))
        super().__init__(base_url, client=self.dribbling_client, **kwargs)

    async def aclose(self) -> None:
        await super().aclose()
        await self.dribbling_client.aclose()


def adapter_for(provider: FakeProvider, delivery: str = "whole", **kwargs: Any) -> OpenAICompatAdapter:
    kind = DribblingAdapter if delivery == "client-dribble" else OpenAICompatAdapter
    return kind(provider.url, api_key="sk-test-0123456789", **kwargs)


def response_for(body: bytes, delivery: str, **kwargs: Any) -> FakeResponse:
    return FakeResponse(body=body, piece_size=5 if delivery == "server-pieces" else None, **kwargs)


@dataclass
class Collected:
    chunks: list[StreamChunk] = field(default_factory=list)
    error: LlmError | None = None


async def consume(adapter: OpenAICompatAdapter, options: GenerateOptions = OPTIONS) -> Collected:
    """Consume the stream, checking each chunk incrementally, and keep the error it ended with."""
    return Collected(*await stream_outcome(adapter, options))


# -- synthetic streams ------------------------------------------------------------------------------


@pytest.mark.parametrize("delivery", DELIVERIES)
async def test_reasoning_then_text_with_keepalives(fake_provider: FakeProvider, delivery: str) -> None:
    fake_provider.enqueue(response_for(deepseek_reasoning_then_text(), delivery))
    chunks = await stream_chunks(adapter_for(fake_provider, delivery), OPTIONS)
    validate(chunks)
    assert blocks(chunks) == [ReasoningBlock(text="Hmm, a greeting. 🤔"), TextBlock(text="Hello there! 😊")]
    assert chunks[-2:] == [
        UsageChunk(usage=TokenUsage(input_tokens=491, output_tokens=129, cached_input_tokens=448, reasoning_tokens=40)),
        Finish(reason=FinishReason(kind="stop")),
    ]


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("delivery", DELIVERIES)
async def test_parallel_tool_calls_with_split_multibyte_arguments(
    fake_provider: FakeProvider, delivery: str, interleaved: bool
) -> None:
    fake_provider.enqueue(response_for(deepseek_parallel_tools(interleaved=interleaved), delivery))
    chunks = await stream_chunks(adapter_for(fake_provider, delivery), OPTIONS)
    validate(chunks)
    calls = [b for b in blocks(chunks) if isinstance(b, ToolCallBlock)]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_00_beijing", "get_current_weather", {"location": "北京", "format": "celsius"}),
        ("call_01_luoyang", "get_current_weather", {"location": "洛阳"}),
    ]
    assert chunks[-1] == Finish(reason=FinishReason(kind="tool-calls"))


@pytest.mark.parametrize("delivery", DELIVERIES)
async def test_openai_usage_chunk_after_finish(fake_provider: FakeProvider, delivery: str) -> None:
    fake_provider.enqueue(response_for(openai_usage_after_finish(), delivery))
    chunks = await stream_chunks(adapter_for(fake_provider, delivery), OPTIONS)
    validate(chunks)
    assert isinstance(chunks[-2], UsageChunk)
    assert chunks[-2].usage.input_tokens == 417


@pytest.mark.parametrize(
    ("body", "message", "status"),
    [
        (openrouter_inband_error(), "Token limit reached", 400),
        (groq_error_event(), "Tool call validation failed", 400),
        (
            sse(chunk({"content": "partial"}), {"error": {"message": "Internal error, please retry"}}),
            "please retry",
            None,
        ),
    ],
    ids=["error-object", "error-event", "error-object-without-status"],
)
@pytest.mark.parametrize("delivery", DELIVERIES)
async def test_in_band_errors_raise_with_the_providers_message(
    fake_provider: FakeProvider, delivery: str, body: bytes, message: str, status: int | None
) -> None:
    fake_provider.enqueue(response_for(body, delivery))
    result = await consume(adapter_for(fake_provider, delivery))
    assert result.error is not None
    assert message in str(result.error)
    assert result.error.status == status
    expected = ErrorCode.PROVIDER_HTTP_ERROR if status else ErrorCode.STREAM_ABORTED
    assert result.error.code is expected


async def test_garbage_data_is_an_invalid_response(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=sse(chunk({"content": "ok"}), "data: <html>502 Bad Gateway</html>\n\n")))
    result = await consume(adapter_for(fake_provider))
    assert result.error is not None
    assert result.error.code is ErrorCode.INVALID_RESPONSE
    assert "502 Bad Gateway" in str(result.error)


@pytest.mark.parametrize("delivery", ["whole", "server-pieces"])
async def test_connection_reset_mid_body_is_stream_aborted(fake_provider: FakeProvider, delivery: str) -> None:
    body = deepseek_parallel_tools()
    fake_provider.enqueue(response_for(body, delivery, reset_after=len(body) // 2))
    result = await consume(adapter_for(fake_provider, delivery))
    assert result.error is not None
    assert result.error.code is ErrorCode.STREAM_ABORTED
    assert result.error.recoverable
    assert result.chunks  # what arrived before the break was delivered, and was valid so far


@pytest.mark.parametrize("delivery", ["whole", "client-dribble"])
async def test_a_close_delimited_body_cut_mid_event_is_stream_aborted(delivery: str) -> None:
    body = sse(chunk({"content": "hi"}), done=False) + b'data: {"cho'
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    async with raw_http_server(head + body) as url:
        client = httpx.AsyncClient(transport=DribbleTransport(3)) if delivery == "client-dribble" else None
        result = await consume(OpenAICompatAdapter(url, api_key="k", client=client))
    assert result.error is not None
    assert result.error.code is ErrorCode.STREAM_ABORTED, result.error
    assert result.error.recoverable
    assert blocks(result.chunks) == []  # the text block stays open: nothing is claimed complete
    assert any(getattr(c, "text", None) == "hi" for c in result.chunks)


async def test_a_complete_last_event_without_its_blank_line_still_completes(fake_provider: FakeProvider) -> None:
    body = sse(chunk({"content": "hi"}, finish_reason="stop"), done=False) + b"data: [DONE]\n"
    fake_provider.enqueue(FakeResponse(body=body))
    chunks = await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert blocks(chunks) == [TextBlock(text="hi")]
    assert chunks[-1] == Finish(reason=FinishReason(kind="stop"))


# -- HTTP errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Invalid request: messages[0] is malformed"),
        (401, "Authentication Fails, Your api key is invalid"),
        (402, "Insufficient Balance"),
        (422, "Invalid Parameters"),
        (429, "Rate Limit Reached"),
        (500, "Server Error"),
        (503, "Server Overloaded"),
    ],
)
async def test_http_errors_carry_status_and_the_providers_message(
    fake_provider: FakeProvider, status: int, message: str
) -> None:
    error_body = json.dumps({"error": {"message": message, "type": "api_error", "code": None}}).encode()
    headers = {"Retry-After": "7"} if status == 429 else {}
    fake_provider.enqueue(
        FakeResponse(body=error_body, status=status, headers=headers, content_type="application/json")
    )
    with pytest.raises(LlmError) as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    error = info.value
    assert error.code is ErrorCode.PROVIDER_HTTP_ERROR
    assert error.status == status
    assert message in error.message
    assert error.retry_after == (7.0 if status == 429 else None)
    assert error.recoverable is (status in (429, 500, 503))


async def test_retry_after_as_an_http_date(fake_provider: FakeProvider) -> None:
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    fake_provider.enqueue(FakeResponse(body=b"{}", status=429, headers={"Retry-After": later}))
    with pytest.raises(LlmError) as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert info.value.retry_after is not None
    assert info.value.retry_after > 60


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": "inf"}, None),
        ({"Retry-After": "-5"}, None),
        ({"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"}, 86_400.0),
        ({"Retry-After": "Wed, 21 Oct 2099 07:28:00 -0000"}, 86_400.0),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"retry-after-ms": "nan", "Retry-After": "9"}, 9.0),
    ],
)
async def test_retry_after_garbage_is_ignored_and_far_dates_are_capped(
    fake_provider: FakeProvider, headers: dict[str, str], expected: float | None
) -> None:
    fake_provider.enqueue(FakeResponse(body=b'{"error": {"message": "slow"}}', status=429, headers=headers))
    with pytest.raises(LlmError) as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert info.value.retry_after == expected


async def test_error_body_served_as_octet_stream_and_plain_text(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(
        FakeResponse(body=DEEPSEEK_400_BODY, status=400, content_type="application/octet-stream"),
        FakeResponse(body=b"upstream connect error", status=502, content_type="text/plain"),
    )
    with pytest.raises(LlmError, match=r"No tool output found for tool call call-a\.") as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert info.value.status == 400
    with pytest.raises(LlmError, match="upstream connect error") as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert info.value.status == 502


async def test_a_huge_error_body_is_read_up_to_a_cap_and_closed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[int] = []
    closed: list[str] = []

    class Huge(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for _ in range(256):  # 1 MiB, as good as endless here, and a broken cap fails rather than hangs
                read.append(4096)
                yield b"x" * 4096

        async def aclose(self) -> None:
            closed.append("response")

    reading = httpx.Response.aiter_bytes

    def logged(response: httpx.Response, chunk_size: int | None = None) -> AsyncIterator[bytes]:
        async def pieces() -> AsyncIterator[bytes]:
            try:
                async for piece in reading(response, chunk_size):
                    yield piece
            finally:
                closed.append("body read")

        return pieces()

    monkeypatch.setattr(httpx.Response, "aiter_bytes", logged)
    provider = httpx.MockTransport(
        lambda request: httpx.Response(503, headers={"content-type": "text/plain"}, stream=Huge())
    )
    async with httpx.AsyncClient(transport=provider) as client:
        adapter = OpenAICompatAdapter("http://127.0.0.1:9", api_key="sk-test", client=client)
        with pytest.raises(LlmError) as info:
            await stream_chunks(adapter, OPTIONS)
        assert closed == ["body read", "response"]  # the read stopped at the cap is closed first, not collected
    assert info.value.status == 503
    assert 64 * 1024 <= sum(read) < 64 * 1024 + 2 * 4096


async def test_a_json_body_instead_of_a_stream(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(
        FakeResponse(body=b'{"error": {"message": "quota exceeded", "code": 429}}', content_type="application/json"),
        FakeResponse(body=b'{"choices": []}', content_type="application/json"),
    )
    with pytest.raises(LlmError, match="quota exceeded") as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert info.value.status == 429
    with pytest.raises(LlmError, match=r"not an event stream \(application/json\)") as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert info.value.code is ErrorCode.INVALID_RESPONSE


async def test_connection_refused_is_stream_aborted() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(LlmError) as info:
        await stream_chunks(OpenAICompatAdapter(f"http://127.0.0.1:{port}", api_key="k"), OPTIONS)
    assert info.value.code is ErrorCode.STREAM_ABORTED
    assert info.value.recoverable
    assert f"could not connect to http://127.0.0.1:{port}/chat/completions" in info.value.message
    assert "broke" not in info.value.message


@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"<html><body><h1>Welcome to nginx!</h1><a href='http://x'>login</a></body></html>\n", "text/html"),
        (b"Please log in to the corporate proxy: https://proxy.example/login", "text/plain"),
    ],
)
async def test_a_200_that_is_not_an_event_stream_is_an_invalid_response(
    fake_provider: FakeProvider, delivery: str, body: bytes, content_type: str
) -> None:
    fake_provider.enqueue(response_for(body, delivery, content_type=content_type))
    result = await consume(adapter_for(fake_provider, delivery))
    assert result.error is not None
    assert result.error.code is ErrorCode.INVALID_RESPONSE
    assert not result.error.recoverable
    assert content_type in result.error.message
    assert body[:20].decode() in result.error.message
    assert result.chunks == []


async def test_a_200_json_error_object_served_as_text_is_the_providers_error(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(
        FakeResponse(body=b'{"error": {"message": "quota exceeded", "code": 429}}', content_type="text/plain")
    )
    result = await consume(adapter_for(fake_provider))
    assert result.error is not None
    assert result.error.status == 429
    assert "quota exceeded" in result.error.message


async def test_keepalives_then_a_clean_close_is_still_a_broken_stream(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=b": keep-alive\n\n: keep-alive\n\n"))
    result = await consume(adapter_for(fake_provider))
    assert result.error is not None
    assert result.error.code is ErrorCode.STREAM_ABORTED


# -- request ---------------------------------------------------------------------------------------


async def test_request_headers_body_and_secrets(fake_provider: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", "sk-from-env-42")
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text()))
    adapter = OpenAICompatAdapter(fake_provider.url + "/v1", headers={"X-Extra": "1"}, reasoning=DEEPSEEK_REASONING)
    assert adapter.secrets == ("sk-from-env-42",)
    options = GenerateOptions(model="deepseek-chat", messages=OPTIONS.messages, reasoning="thinking", max_tokens=50)
    await stream_chunks(adapter, OPTIONS)
    (seen,) = fake_provider.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-from-env-42"
    assert seen.headers["x-extra"] == "1"
    for name, value in attribution_headers().items():
        assert seen.headers[name.lower()] == value
    assert seen.json["stream"] is True
    assert seen.json["stream_options"] == {"include_usage": True}
    assert seen.json["model"] == "deepseek-chat"
    assert "thinking" not in seen.json  # OPTIONS had no reasoning
    fake_provider.reset()
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text()))
    await stream_chunks(adapter, options)
    assert fake_provider.requests[0].json["thinking"] == {"type": "enabled"}
    assert fake_provider.requests[0].json["max_tokens"] == 50


def test_deepseek_defaults_and_reasoning_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    adapter = OpenAICompatAdapter()
    assert adapter.base_url == "https://api.deepseek.com"
    assert adapter.name == "deepseek"
    assert adapter.secrets == ()
    assert [o.id for o in adapter.reasoning_options()] == ["thinking", "no-thinking"]
    other = OpenAICompatAdapter("http://127.0.0.1:9/v1", api_key="k")
    assert [o.id for o in other.reasoning_options()] == ["low", "medium", "high"]


@pytest.mark.parametrize(
    "options",
    [
        GenerateOptions(model="m", messages=OPTIONS.messages, reasoning="maximum"),
        GenerateOptions(model="m", messages=OPTIONS.messages, extra={"stream": False}),
        GenerateOptions(model="m", messages=OPTIONS.messages, extra={"n": 2}),
        GenerateOptions(model="", messages=OPTIONS.messages),
    ],
    ids=["reasoning-not-offered", "no-streaming", "several-choices", "no-model"],
)
async def test_unsupported_options_are_refused_before_any_request(
    fake_provider: FakeProvider, options: GenerateOptions
) -> None:
    with pytest.raises(LlmError) as info:
        await stream_chunks(adapter_for(fake_provider), options)
    assert info.value.code is ErrorCode.UNSUPPORTED_OPTION
    assert fake_provider.requests == []


# -- timeouts, abort, cancellation ------------------------------------------------------------------


async def test_keepalive_comments_do_not_reset_the_idle_deadline(fake_provider: FakeProvider) -> None:
    first = sse(chunk({"content": "Hel"}), done=False)
    fake_provider.enqueue(FakeResponse(body=first, stall=True, keepalive_interval=0.01))
    result = await consume(adapter_for(fake_provider, idle_timeout=0.2))
    assert result.error is not None
    assert result.error.code is ErrorCode.TIMEOUT
    assert [type(c).__name__ for c in result.chunks] == ["BlockStart", "TextDelta"]
    assert await fake_provider.wait_disconnected()


class _Paced(httpx.AsyncByteStream):
    """The pieces with ``gap`` seconds before each, slept in the test's own loop (virtual time under looptime)."""

    def __init__(self, pieces: list[bytes], gap: float) -> None:
        self.pieces = pieces
        self.gap = gap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            await asyncio.sleep(self.gap)
            yield piece


def _counting(words: int) -> list[bytes]:
    """Data events "0 ", "1 ", ... (``words`` of them), then the finish."""
    return [sse(chunk({"content": f"{n} "}), done=False) for n in range(words)] + [sse(chunk({}, finish_reason="stop"))]


@asynccontextmanager
async def _answering(body: httpx.AsyncByteStream, idle_timeout: float) -> AsyncIterator[OpenAICompatAdapter]:
    """An adapter whose one request is answered in process with ``body`` (virtual time works under looptime)."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        yield OpenAICompatAdapter("http://127.0.0.1:9", api_key="k", client=client, idle_timeout=idle_timeout)


@pytest.mark.looptime
async def test_real_data_moves_the_idle_deadline() -> None:
    async with _answering(_Paced(_counting(6), 0.25), idle_timeout=1.0) as adapter:
        loop = asyncio.get_running_loop()
        started = loop.time()
        chunks = await stream_chunks(adapter, OPTIONS)
    # 1.75 s in all, well past the idle timeout, in gaps of 0.25 s: each 0.75 s short of it (virtual time: exact).
    assert loop.time() - started == pytest.approx(1.75)
    validate(chunks)
    assert blocks(chunks) == [TextBlock(text="0 1 2 3 4 5 ")]


@pytest.mark.looptime
async def test_a_consumer_slower_than_the_idle_timeout_is_not_the_providers_silence() -> None:
    """An agent may work between chunks (run a tool, wait for a person); only waiting on the provider counts."""
    async with _answering(_Paced(_counting(3), 0.5), idle_timeout=1.0) as adapter:
        chunks = []
        async for item in adapter.stream(OPTIONS):
            chunks.append(item)
            await asyncio.sleep(5)  # five times the idle timeout, after every chunk
    validate(chunks)
    assert blocks(chunks) == [TextBlock(text="0 1 2 ")]


@pytest.mark.looptime
async def test_after_a_slow_consumer_a_silent_provider_times_out_an_idle_timeout_after_the_next_read() -> None:
    class Silent(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield sse(chunk({"content": "Hel"}), done=False)
            await asyncio.sleep(3600)  # then nothing for an hour
            yield sse(chunk({}, finish_reason="stop"))

    async with _answering(Silent(), idle_timeout=10.0) as adapter:
        loop = asyncio.get_running_loop()
        stream = adapter.stream(OPTIONS)
        assert await anext(stream) == BlockStart(index=0, block_type="text")
        await asyncio.sleep(20)  # the consumer's own 20 s: not the provider's silence
        asked = loop.time()
        with pytest.raises(LlmError) as info:
            async for _ in stream:
                pass
    assert info.value.code is ErrorCode.TIMEOUT
    assert loop.time() - asked == pytest.approx(10.0)  # virtual time: exact


class _Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


@pytest.mark.parametrize("with_signal", [False, True])
async def test_the_idle_deadline_and_the_signal_cost_no_task_or_timer_per_read(with_signal: bool) -> None:
    """The hot path: a guarded read is a plain await (no task, no timer per read), whatever the stream length."""
    pieces = [sse(chunk({"content": "tok "}), done=False) for _ in range(500)]
    pieces += [b": keep-alive\n\n", sse(chunk({}, finish_reason="stop"))]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Pieces(pieces))

    loop = asyncio.get_running_loop()
    counts = {"tasks": 0, "timers": 0}
    factory = loop.get_task_factory()
    call_at = loop.call_at

    def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        counts["tasks"] += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    def counting_call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        counts["timers"] += 1
        return call_at(when, callback, *args, **kwargs)

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    adapter = OpenAICompatAdapter("http://127.0.0.1:9", api_key="k", client=client, idle_timeout=60.0)
    options = _with_signal(AbortController()) if with_signal else OPTIONS
    loop.set_task_factory(counting_factory)
    loop.call_at = counting_call_at  # type: ignore[method-assign, assignment]
    try:
        chunks = [c async for c in adapter.stream(options)]
    finally:
        loop.set_task_factory(factory)
        del loop.call_at
        await client.aclose()
    assert blocks(chunks) == [TextBlock(text="tok " * 500)]
    assert counts["tasks"] <= 2, counts
    assert counts["timers"] <= 2, counts


async def stalled_stream(provider: FakeProvider, options: GenerateOptions) -> tuple[Any, OpenAICompatAdapter]:
    provider.enqueue(FakeResponse(body=sse(chunk({"content": "Hel"}), done=False), stall=True))
    adapter = adapter_for(provider)
    stream: Any = adapter.stream(options)
    assert (await anext(stream)).block_type == "text"
    return stream, adapter


async def test_abort_signal_between_chunks_closes_the_response(fake_provider: FakeProvider) -> None:
    controller = AbortController()
    stream, adapter = await stalled_stream(fake_provider, _with_signal(controller))
    await anext(stream)
    controller.abort("user pressed stop")
    with pytest.raises(LlmError, match="user pressed stop") as info:
        await anext(stream)
    assert info.value.code is ErrorCode.CANCELLED
    assert await fake_provider.wait_disconnected()
    await adapter.aclose()


async def test_abort_signal_while_waiting_for_data(fake_provider: FakeProvider) -> None:
    controller = AbortController()
    stream, adapter = await stalled_stream(fake_provider, _with_signal(controller))
    await anext(stream)
    asyncio.get_running_loop().call_later(0.05, controller.abort)
    with pytest.raises(LlmError) as info:
        await anext(stream)
    assert info.value.code is ErrorCode.CANCELLED
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0  # the abort's cancellation was taken back
    assert await fake_provider.wait_disconnected()
    await adapter.aclose()


async def test_abort_during_a_timed_read_wins_over_the_idle_deadline(fake_provider: FakeProvider) -> None:
    controller = AbortController()
    fake_provider.enqueue(FakeResponse(body=sse(chunk({"content": "Hel"}), done=False), stall=True))
    adapter = adapter_for(fake_provider, idle_timeout=30.0)
    stream = adapter.stream(_with_signal(controller))
    await anext(stream)  # the block start
    await anext(stream)  # its delta: the stream now waits on the network, with the idle deadline armed
    asyncio.get_running_loop().call_later(0.05, controller.abort)
    with pytest.raises(LlmError) as info:
        await anext(stream)
    assert info.value.code is ErrorCode.CANCELLED
    await adapter.aclose()


async def test_abort_signal_while_waiting_for_the_response_headers(fake_provider: FakeProvider) -> None:
    controller = AbortController()
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text(), headers_delay=60))
    asyncio.get_running_loop().call_later(0.05, controller.abort)
    async with asyncio.timeout(10):  # a bound for a hung test, not a timing assertion
        with pytest.raises(LlmError) as info:
            await stream_chunks(adapter_for(fake_provider), _with_signal(controller))
    assert info.value.code is ErrorCode.CANCELLED


async def test_no_response_within_the_timeout(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text(), headers_delay=60))
    async with asyncio.timeout(10):
        with pytest.raises(LlmError) as info:
            await stream_chunks(adapter_for(fake_provider, timeout=0.1), OPTIONS)
    assert info.value.code is ErrorCode.TIMEOUT
    assert info.value.recoverable


async def test_already_aborted_signal_sends_nothing(fake_provider: FakeProvider) -> None:
    controller = AbortController()
    controller.abort()
    with pytest.raises(LlmError) as info:
        await stream_chunks(adapter_for(fake_provider), _with_signal(controller))
    assert info.value.code is ErrorCode.CANCELLED
    assert fake_provider.requests == []


async def test_aclose_closes_the_response(fake_provider: FakeProvider) -> None:
    stream, adapter = await stalled_stream(fake_provider, OPTIONS)
    await stream.aclose()
    assert await fake_provider.wait_disconnected()
    await adapter.aclose()


async def test_task_cancellation_closes_the_response(fake_provider: FakeProvider) -> None:
    stream, adapter = await stalled_stream(fake_provider, OPTIONS)
    reading = asyncio.ensure_future(_drain(stream))
    await asyncio.sleep(0.05)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert await fake_provider.wait_disconnected()
    await adapter.aclose()


async def test_a_shared_client_is_left_open(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text()))
    async with httpx.AsyncClient() as client:
        adapter = OpenAICompatAdapter(fake_provider.url, api_key="k", client=client)
        async with adapter:
            chunks = [c async for c in adapter.stream(OPTIONS)]
        validate(chunks)
        assert not client.is_closed


def _with_signal(controller: AbortController) -> GenerateOptions:
    return GenerateOptions(model=OPTIONS.model, messages=OPTIONS.messages, signal=controller.signal)


async def _drain(stream: AsyncIterator[StreamChunk]) -> None:
    async for _ in stream:
        pass


# -- real captures ----------------------------------------------------------------------------------


@dataclass
class Expected:
    reasoning: str = ""
    text: str = ""
    calls: dict[int, list[str]] = field(default_factory=dict)
    finish: str | None = None
    usage: dict[str, Any] | None = None


def reference_reassembly(body: bytes) -> Expected:
    """A deliberately naive reading of a capture (one data line per event), to check the adapter against."""
    out = Expected()
    for line in body.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        obj = json.loads(line[6:])
        out.usage = obj.get("usage") or out.usage
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            out.reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
            out.text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                entry = out.calls.setdefault(call["index"], ["", "", ""])
                entry[0] = entry[0] or call.get("id") or ""
                entry[1] = entry[1] or (call.get("function") or {}).get("name") or ""
                entry[2] += (call.get("function") or {}).get("arguments") or ""
            out.finish = choice.get("finish_reason") or out.finish
    return out


SUCCESS_CAPTURES = [
    "deepseek-reasoner-thinking",
    "deepseek-reasoner-tool-call",
    "deepseek-chat-parallel-tool-calls",
    "openai-gpt4o-parallel-tool-calls",
]
ERROR_CAPTURES = {
    "openrouter-keepalive-inband-error": "Token limit reached",
    "groq-midstream-error-event": "Tool call validation failed",
}
FINISH = {"stop": "stop", "tool_calls": "tool-calls", "length": "length"}


@needs_captures
@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize("name", SUCCESS_CAPTURES)
async def test_real_captures_stream_to_what_the_provider_said(
    fake_provider: FakeProvider, name: str, delivery: str
) -> None:
    body = (CAPTURES / f"{name}.sse").read_bytes()
    expected = reference_reassembly(body)
    fake_provider.enqueue(response_for(body, delivery))
    chunks = await stream_chunks(adapter_for(fake_provider, delivery), OPTIONS)
    validate(chunks)
    got = blocks(chunks)
    assert "".join(b.text for b in got if isinstance(b, ReasoningBlock)) == expected.reasoning
    assert "".join(b.text for b in got if isinstance(b, TextBlock)) == expected.text
    calls = [b for b in got if isinstance(b, ToolCallBlock)]
    assert [[c.id, c.name, c.arguments] for c in calls] == [expected.calls[i] for i in sorted(expected.calls)]
    assert all(json.loads(c.arguments) is not None for c in calls)
    assert expected.finish is not None
    assert chunks[-1] == Finish(reason=FinishReason(kind=FINISH[expected.finish]))  # type: ignore[arg-type]
    assert expected.usage is not None
    usage = chunks[-2]
    assert isinstance(usage, UsageChunk)
    assert (usage.usage.input_tokens, usage.usage.output_tokens) == (
        expected.usage["prompt_tokens"],
        expected.usage["completion_tokens"],
    )
    details = expected.usage.get("completion_tokens_details") or {}
    assert usage.usage.reasoning_tokens == details.get("reasoning_tokens")


@needs_captures
@pytest.mark.parametrize("delivery", DELIVERIES)
@pytest.mark.parametrize("name", sorted(ERROR_CAPTURES))
async def test_real_captures_with_in_band_errors(fake_provider: FakeProvider, name: str, delivery: str) -> None:
    body = (CAPTURES / f"{name}.sse").read_bytes()
    fake_provider.enqueue(response_for(body, delivery))
    result = await consume(adapter_for(fake_provider, delivery))
    assert result.error is not None
    assert ERROR_CAPTURES[name] in str(result.error)
    assert result.error.status == 400
    reasoning = reference_reassembly(body.split(b"event: error")[0]).reasoning
    streamed = "".join(getattr(c, "text", "") for c in result.chunks if type(c).__name__ == "ReasoningDelta")
    assert streamed == reasoning


@needs_captures
async def test_real_deepseek_400_body_served_as_octet_stream(fake_provider: FakeProvider) -> None:
    meta = json.loads((CAPTURES / "deepseek-400-error.json").read_text())
    body = (CAPTURES / meta["body_file"]).read_bytes()
    fake_provider.enqueue(FakeResponse(body=body, status=meta["status"], content_type="application/octet-stream"))
    with pytest.raises(LlmError) as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert info.value.code is ErrorCode.PROVIDER_HTTP_ERROR
    assert info.value.status == 400
    assert json.loads(body)["error"]["message"] in info.value.message


# -- recording a live stream -------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".msgpack", ".json"])
async def test_recording_through_the_adapter_keeps_the_key_out_and_replays_the_same(
    fake_provider: FakeProvider, tmp_path: Path, suffix: str
) -> None:
    key = "sk-live-key-do-not-record-0123456789"
    fake_provider.enqueue(
        FakeResponse(body=deepseek_parallel_tools()),
        FakeResponse(body=DEEPSEEK_400_BODY, status=429, headers={"retry-after": "1"}),
    )
    path = tmp_path / f"live{suffix}"
    recorder = RecordingAdapter(OpenAICompatAdapter(fake_provider.url, api_key=key), path)
    live = [c async for c in recorder.stream(OPTIONS)]
    with pytest.raises(LlmError) as live_error:
        _ = [c async for c in recorder.stream(OPTIONS)]
    await recorder.aclose()
    await recorder.inner.aclose()
    assert fake_provider.requests[0].headers["authorization"] == f"Bearer {key}"

    data = path.read_bytes()
    assert key.encode() not in data
    assert b"Bearer" not in data

    replay = ReplayAdapter(path)
    assert [c async for c in replay.stream(OPTIONS)] == live
    with pytest.raises(LlmError) as replayed_error:
        _ = [c async for c in replay.stream(OPTIONS)]
    got, want = replayed_error.value, live_error.value
    assert (got.code, got.status, got.retry_after, got.message) == (
        want.code,
        want.status,
        want.retry_after,
        want.message,
    )
    replay.assert_all_played()


async def test_a_provider_echoing_the_key_in_an_error_never_shows_it(fake_provider: FakeProvider) -> None:
    body = b'{"error": {"message": "Incorrect API key provided: sk-test-0123456789", "type": "auth"}}'
    fake_provider.enqueue(FakeResponse(body=body, status=401, content_type="application/json"))
    with pytest.raises(LlmError) as info:
        await stream_chunks(adapter_for(fake_provider), OPTIONS)
    assert info.value.status == 401
    assert "Incorrect API key provided" in str(info.value)
    assert "sk-test-0123456789" not in str(info.value)
    assert "sk-test-0123456789" not in repr(info.value.args)
