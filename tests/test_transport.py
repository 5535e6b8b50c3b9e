"""FaultTransport: every fault kind at the HTTP layer, through OpenAICompatAdapter and the real openai SDK."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunktape import (
    ErrorCode,
    GenerateOptions,
    LlmError,
    Message,
    StreamChunk,
    validate,
)
from chunktape.faults import (
    Chaos,
    Corrupt,
    Disconnect,
    FailFirst,
    Fault,
    HttpError,
    Latency,
    Stall,
    Targeted,
    Truncate,
)
from chunktape.http import FaultTransport, render_sse
from chunktape.providers import OpenAICompatAdapter
from fake_provider import FakeProvider, FakeResponse, deepseek_parallel_tools, deepseek_reasoning_then_text
from helpers import collect_until_error, drain, interaction_of, run_sync
from strategies import wire_streams

DEMO = Path(__file__).resolve().parents[1] / "cassettes" / "demo-session.json"
OPTIONS = GenerateOptions(model="deepseek-chat", messages=[Message(role="user", content="weather in Beijing?")])


@asynccontextmanager
async def faulty_adapter(
    provider: FakeProvider, *faults: Fault | str, **kwargs: Any
) -> AsyncIterator[tuple[OpenAICompatAdapter, FaultTransport]]:
    """An adapter whose client goes through a ``FaultTransport`` (both yielded), the client closed on exit."""
    transport = FaultTransport(httpx.AsyncHTTPTransport(), faults, dribble=kwargs.pop("dribble", None))
    async with httpx.AsyncClient(transport=transport) as client:
        yield OpenAICompatAdapter(provider.url, api_key="sk-test", client=client, **kwargs), transport


async def run(
    adapter: OpenAICompatAdapter, options: GenerateOptions = OPTIONS
) -> tuple[list[StreamChunk], LlmError | None]:
    """The chunks (checked incrementally: always a valid prefix) and the error the stream ended with."""
    return await drain(adapter.stream(options), validate=True)


def mock_provider(body: bytes) -> httpx.MockTransport:
    return httpx.MockTransport(
        lambda request: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    )


async def reference(body: bytes) -> list[StreamChunk]:
    """What the adapter makes of ``body`` with no fault in the way (in process: no socket, no TLS context)."""
    async with httpx.AsyncClient(transport=mock_provider(body)) as client:
        chunks, error = await run(OpenAICompatAdapter("http://127.0.0.1:9", api_key="sk-test", client=client))
    assert error is None
    return chunks


async def test_no_fault_passes_the_stream_through(fake_provider: FakeProvider) -> None:
    expected = await reference(deepseek_parallel_tools())
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    async with faulty_adapter(fake_provider, Targeted(fault=HttpError(status=500), calls=[2])) as (adapter, transport):
        chunks, error = await run(adapter)
    assert error is None
    assert chunks == expected
    assert transport.injected == [None]


async def test_http_error_never_reaches_the_provider(fake_provider: FakeProvider) -> None:
    async with faulty_adapter(fake_provider, "http-429") as (adapter, _):
        chunks, error = await run(adapter)
    assert chunks == []
    assert error is not None
    assert error.code is ErrorCode.PROVIDER_HTTP_ERROR
    assert (error.status, error.retry_after) == (429, 2.0)
    assert "rate limit exceeded" in error.message
    assert "http-429" in error.message
    assert fake_provider.requests == []


@pytest.mark.parametrize(
    ("fault", "delivered"),
    [
        (Disconnect(after_chunks=0), 0),
        (Disconnect(after_chunks=3), None),
        (Disconnect(inside="tool-call"), None),
        (Disconnect(after_chunks=1000), None),
    ],
    ids=["before-first", "after-3", "mid-tool-call", "before-finish"],
)
async def test_disconnect_is_a_reset_mid_body(
    fake_provider: FakeProvider, fault: Disconnect, delivered: int | None
) -> None:
    expected = await reference(deepseek_parallel_tools())
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    async with faulty_adapter(fake_provider, fault) as (adapter, _):
        chunks, error = await run(adapter)
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED
    assert fault.fault_id in str(error.cause)
    assert chunks == expected[: len(chunks)]
    if delivered is not None:
        assert len(chunks) == delivered
    if fault.inside == "tool-call":
        assert any(type(c).__name__ == "ToolCallDelta" for c in chunks)


async def test_disconnect_after_seconds(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text(), stall=True))
    async with faulty_adapter(fake_provider, Disconnect(after_s=0.05)) as (adapter, _):
        _, error = await run(adapter)
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED


async def test_truncate_ends_the_body_without_done(fake_provider: FakeProvider) -> None:
    expected = await reference(deepseek_reasoning_then_text())
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text()))
    async with faulty_adapter(fake_provider, Truncate(after_chunks=2)) as (adapter, _):
        chunks, error = await run(adapter)
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED
    assert "ended before the provider finished" in error.message
    assert chunks == expected[: len(chunks)]
    assert chunks


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
async def test_corrupt_is_unparseable_data(fake_provider: FakeProvider, seed: int) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    async with faulty_adapter(fake_provider, Corrupt(kind="malformed-data", seed=seed)) as (adapter, _):
        _, error = await run(adapter)
    assert error is not None
    assert error.code is ErrorCode.INVALID_RESPONSE


async def test_stall_trips_the_idle_timeout(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text()))
    async with faulty_adapter(fake_provider, Stall(after_chunks=2, seconds=60), idle_timeout=0.2) as (
        adapter,
        _,
    ):
        chunks, error = await run(adapter)
    assert error is not None
    assert error.code is ErrorCode.TIMEOUT
    assert chunks  # the first events came before the silence


@pytest.mark.parametrize(
    "fault",
    [Stall(after_chunks=1, seconds=0.01), Latency(first_chunk_s=0.01, between_s=0.001, jitter_s=0.002, seed=7)],
    ids=["stall", "latency"],
)
async def test_slow_faults_deliver_the_whole_stream(fake_provider: FakeProvider, fault: Fault) -> None:
    expected = await reference(deepseek_parallel_tools())
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    async with faulty_adapter(fake_provider, fault, dribble=2) as (adapter, _):
        chunks, error = await run(adapter)
    assert error is None
    validate(chunks)
    assert chunks == expected


async def test_fail_first_then_success(fake_provider: FakeProvider) -> None:
    expected = await reference(deepseek_reasoning_then_text())
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text()))
    async with faulty_adapter(fake_provider, FailFirst(n=2, fault=HttpError(status=503))) as (adapter, transport):
        for _ in range(2):
            _, error = await run(adapter)
            assert error is not None
            assert error.status == 503
        chunks, error = await run(adapter)
    assert error is None
    assert chunks == expected
    assert transport.injected == ["http-503", "http-503", None]
    assert len(fake_provider.requests) == 1


async def test_targeted_reads_the_request_body(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text()))
    other = GenerateOptions(model="deepseek-chat", messages=[Message(role="user", content="hello")])
    async with faulty_adapter(fake_provider, Targeted(fault=HttpError(status=400), match="Beijing")) as (
        adapter,
        transport,
    ):
        _, error = await run(adapter)
        assert error is not None
        assert error.status == 400
        _, error = await run(adapter, other)
    assert error is None
    assert transport.injected == ["http-400", None]


def test_chaos_is_reproducible_from_its_seed() -> None:
    chaos = Chaos(rate=0.5, faults=[HttpError(status=500), Disconnect(after_chunks=1)], seed=42)

    async def draws() -> list[str | None]:
        transport = FaultTransport(httpx.MockTransport(lambda request: httpx.Response(200, text="{}")), [chaos])
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(20):
                await client.post("http://127.0.0.1:9/chat/completions", json={"model": "m", "messages": []})
        return transport.injected

    first = run_sync(draws())
    assert first == run_sync(draws())
    assert None in first
    assert any(item is not None for item in first)


def test_dribble_must_be_positive() -> None:
    with pytest.raises(ValueError, match="dribble"):
        FaultTransport(httpx.AsyncHTTPTransport(), dribble=0)


# -- the real openai SDK, through its http_client ---------------------------------------------------


def sdk(provider: FakeProvider, *faults: Fault | str) -> openai.AsyncOpenAI:
    client = httpx.AsyncClient(transport=FaultTransport(httpx.AsyncHTTPTransport(), faults))
    # openai 3.x runs on httpx2 but accepts an ``httpx.AsyncClient`` at runtime (its annotation says httpx2 only).
    return openai.AsyncOpenAI(
        base_url=provider.url + "/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=client,  # type: ignore[arg-type]
    )


async def sdk_text(client: openai.AsyncOpenAI) -> tuple[str, list[str]]:
    stream = await client.chat.completions.create(
        model="deepseek-chat", messages=[{"role": "user", "content": "weather?"}], stream=True
    )
    text: list[str] = []
    names: list[str] = []
    async for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            for call in choice.delta.tool_calls or ():
                if call.function is not None and call.function.name:
                    names.append(call.function.name)
    return "".join(text), names


async def test_openai_sdk_through_fault_transport(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    async with sdk(fake_provider, Targeted(fault=HttpError(status=500), calls=[9])) as client:
        text, names = await sdk_text(client)
    assert text == "我可以帮。"
    assert names == ["get_current_weather", "get_current_weather"]


async def test_openai_sdk_sees_a_rate_limit_with_retry_after(fake_provider: FakeProvider) -> None:
    async with sdk(fake_provider, "http-429") as client:
        with pytest.raises(openai.RateLimitError) as info:
            await sdk_text(client)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.response.headers["retry-after-ms"] == "2000"


async def test_openai_sdk_sees_a_reset_as_a_connection_error(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    async with sdk(fake_provider, Disconnect(after_chunks=2)) as client:
        with pytest.raises(openai.APIConnectionError):
            await sdk_text(client)


# -- virtual time: an in-process inner transport, so the loop never waits on a socket ----------------


@pytest.mark.looptime
async def test_stall_against_the_idle_watchdog_in_virtual_time() -> None:
    loop = asyncio.get_running_loop()
    transport = FaultTransport(mock_provider(deepseek_reasoning_then_text()), [Stall(after_chunks=2, seconds=30)])
    # The client's own read timeout (httpx's default: 5 s) would fire first, as over a socket: it is longer here.
    async with httpx.AsyncClient(transport=transport, timeout=60) as client:
        adapter = OpenAICompatAdapter("http://127.0.0.1:9", api_key="k", client=client, idle_timeout=10)
        start = loop.time()
        chunks, error = await run(adapter)
    assert error is not None
    assert error.code is ErrorCode.TIMEOUT
    assert chunks
    assert loop.time() - start == pytest.approx(10, abs=0.5)  # virtual seconds: the watchdog fired, not the stall


@pytest.mark.looptime
async def test_a_stall_shorter_than_the_watchdog_is_survived_in_virtual_time() -> None:
    loop = asyncio.get_running_loop()
    expected = await reference(deepseek_reasoning_then_text())
    transport = FaultTransport(mock_provider(deepseek_reasoning_then_text()), [Stall(after_chunks=2, seconds=9)])
    async with httpx.AsyncClient(transport=transport, timeout=60) as client:
        adapter = OpenAICompatAdapter("http://127.0.0.1:9", api_key="k", client=client, idle_timeout=10)
        start = loop.time()
        chunks, error = await run(adapter)
    assert error is None
    assert chunks == expected
    assert loop.time() - start == pytest.approx(9, abs=0.5)


# -- property: any fault over any valid stream ends in a documented way -------------------------------

_QUICK_FAULTS = st.one_of(
    st.builds(HttpError, status=st.sampled_from([400, 401, 429, 500, 503])),
    st.builds(Disconnect, after_chunks=st.integers(0, 12)),
    st.builds(Disconnect, inside=st.sampled_from(["text", "tool-call", "reasoning"])),
    st.builds(Truncate, after_chunks=st.integers(0, 12)),
    st.builds(Corrupt, kind=st.sampled_from(["malformed-data", "bad-arguments-json"]), seed=st.integers(0, 99)),
    st.builds(Latency, seed=st.integers(0, 99)),
    st.builds(Stall, after_chunks=st.integers(0, 12), seconds=st.just(0.0)),
)


@settings(max_examples=80, deadline=None)
@given(chunks=wire_streams(), fault=_QUICK_FAULTS, dribble=st.none() | st.integers(1, 7))
def test_any_fault_over_any_stream_gives_a_valid_prefix_and_a_documented_code(
    chunks: list[StreamChunk], fault: Fault, dribble: int | None
) -> None:
    body = render_sse(interaction_of(chunks))

    async def go() -> tuple[list[StreamChunk], LlmError | None]:
        transport = FaultTransport(mock_provider(body), [fault], dribble=dribble)
        async with httpx.AsyncClient(transport=transport) as client:
            return await run(OpenAICompatAdapter("http://127.0.0.1:9", api_key="k", client=client))

    got, error = run_sync(go())
    if not (isinstance(fault, Corrupt) and fault.kind == "bad-arguments-json"):  # its broken piece is delivered
        assert got == chunks[: len(got)]
    if isinstance(fault, Latency | Stall):
        assert error is None
        assert got == chunks
    else:
        assert error is not None
        assert error.code in (ErrorCode.PROVIDER_HTTP_ERROR, ErrorCode.STREAM_ABORTED, ErrorCode.INVALID_RESPONSE)


@pytest.mark.parametrize("after_bytes", [0, 1, 137, 1000])
async def test_disconnect_after_bytes_delivers_exactly_that_many_bytes(
    fake_provider: FakeProvider, after_bytes: int
) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    fault = Disconnect(after_bytes=after_bytes)
    transport = FaultTransport(httpx.AsyncHTTPTransport(), [fault])
    received = b""
    url = f"{fake_provider.url}/chat/completions"
    async with httpx.AsyncClient(transport=transport) as client, client.stream("POST", url, json={}) as response:
        with pytest.raises(
            httpx.ReadError, match=r"after \d+ byte\(s\) of the body \[injected fault disconnect-after-\d+-bytes"
        ):
            async for piece in response.aiter_raw():
                received += piece
    assert len(received) == after_bytes
    assert deepseek_parallel_tools().startswith(received)


async def test_a_fault_that_ends_the_body_early_closes_the_inner_body_at_once() -> None:
    """Not at garbage collection: an event loop closed before then drops the close (Python 3.13 warns)."""
    closed: list[str] = []

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                for line in deepseek_parallel_tools().splitlines(keepends=True):
                    yield line
            finally:
                closed.append("closed")

    provider = httpx.MockTransport(
        lambda request: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())
    )
    transport = FaultTransport(provider, [Disconnect(after_bytes=100)])
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(httpx.ReadError):
            async with client.stream("POST", "http://127.0.0.1:9/v1/chat/completions", json={}) as response:
                await response.aread()
        assert closed == ["closed"]


# -- what a "chunk" is at the HTTP layer -------------------------------------------------------------


async def test_the_role_event_is_not_a_chunk_disconnect_after_first_chunk_delivers_content() -> None:
    from chunktape import load_cassette
    from chunktape._protocol import ReasoningDelta, TextDelta, ToolCallDelta
    from chunktape._replayer import ReplayAdapter, Timing
    from chunktape.http import ReplayServer

    demo = DEMO
    recorded = load_cassette(demo).interactions[0]
    options = recorded.request.to_options()
    first_content = next(
        position
        for position, chunk in enumerate(recorded.chunks)
        if isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta)
    )

    async def over_http(server: ReplayServer, fault: Disconnect) -> list[StreamChunk]:
        transport = FaultTransport(httpx.AsyncHTTPTransport(), [fault])
        async with httpx.AsyncClient(transport=transport) as client:
            chunks, error = await run(OpenAICompatAdapter(server.url, api_key="k", client=client), options)
        assert error is not None
        assert error.code is ErrorCode.STREAM_ABORTED
        return chunks

    async def at_chunk_level(fault: Disconnect) -> list[StreamChunk]:
        chunks, error = await collect_until_error(ReplayAdapter(demo, faults=[fault]).stream(options))
        assert error.code is ErrorCode.STREAM_ABORTED
        return chunks

    # One server for both cuts: the faults are the client's, and it replays the same interaction again.
    async with ReplayServer(demo, timing=Timing.instant(), allow_repeats=True) as server:
        http_first = await over_http(server, Disconnect(after_chunks=1))
        http_none = await over_http(server, Disconnect(after_chunks=0))
    replay_first = await at_chunk_level(Disconnect(after_chunks=1))
    # Over HTTP, the first chunk is the first event with content (the role-only event does not count) ...
    assert http_first == recorded.chunks[: first_content + 1]
    # ... and the chunk-level replay cut at the same fault delivers the same stream, up to where it stops
    # (a BlockStart alone has no wire form: the HTTP cut can only fall after the first content event).
    assert replay_first
    assert http_first[: len(replay_first)] == replay_first
    # "before the first chunk" and "after the first chunk" differ on the wire, as they do at the chunk level.
    assert http_none == await at_chunk_level(Disconnect(after_chunks=0)) == []
