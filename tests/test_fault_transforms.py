"""One set of fault transforms for both layers: the HTTP body gets the chunk layer's semantics, and a Corrupt
kind means one thing on the wire or is refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import StreamChunk
from chunktape.faults import Chaos, Corrupt, FailFirst, Fault, Latency, Stall, Targeted
from chunktape.faults._plan import FaultPlan
from chunktape.faults._sse import SseCodec, parse_frames
from chunktape.http import FaultTransport
from chunktape.providers import OpenAICompatAdapter
from chunktape.providers._demo import DEMO_TURNS
from chunktape.providers._scripted import script_chunks
from fake_provider import deepseek_parallel_tools, deepseek_reasoning_then_text
from fault_support import first_request, from_list

OPTIONS = first_request()


def mock_provider(body: bytes) -> httpx.MockTransport:
    return httpx.MockTransport(
        lambda request: httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)
    )


async def over_http(transport: FaultTransport) -> tuple[list[StreamChunk], LlmError | None]:
    chunks: list[StreamChunk] = []
    async with httpx.AsyncClient(transport=transport) as client:
        try:
            async for chunk in OpenAICompatAdapter("http://127.0.0.1:9", api_key="k", client=client).stream(OPTIONS):
                chunks.append(chunk)
        except LlmError as exc:
            return chunks, exc
    return chunks, None


@pytest.mark.parametrize(
    "kind", ["unpaired-block", "bad-index", "interleaved", "finish-not-last", "usage-after-finish", "duplicate-finish"]
)
def test_fault_transport_refuses_a_corrupt_kind_without_a_wire_form(kind: str) -> None:
    with pytest.raises(LlmError) as caught:
        FaultTransport(httpx.AsyncHTTPTransport(), [Corrupt(kind=kind)])  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert f"corrupt-{kind}" in str(caught.value)
    assert "malformed-data and bad-arguments-json" in str(caught.value)


def test_the_refusal_looks_inside_selectors() -> None:
    nested: list[Fault] = [
        Chaos(rate=0.5, faults=[Latency(between_s=0.1), Corrupt(kind="bad-index")]),
        FailFirst(n=1, fault=Corrupt(kind="interleaved")),
        Targeted(fault=FailFirst(n=1, fault=Corrupt(kind="duplicate-finish")), calls=[2]),
    ]
    for fault in nested:
        with pytest.raises(LlmError) as caught:
            FaultTransport(httpx.AsyncHTTPTransport(), [fault])
        assert caught.value.code is ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize("seed", range(4))
async def test_bad_arguments_json_over_http_breaks_the_tool_call_arguments(seed: int) -> None:
    transport = FaultTransport(
        mock_provider(deepseek_parallel_tools()), [Corrupt(kind="bad-arguments-json", seed=seed)]
    )
    _, error = await over_http(transport)
    assert error is not None
    assert error.code is ErrorCode.INVALID_RESPONSE
    assert "not valid JSON" in error.message or "more data after it was complete" in error.message


async def test_bad_arguments_json_over_http_without_tool_calls_sends_a_broken_one() -> None:
    transport = FaultTransport(mock_provider(deepseek_reasoning_then_text()), [Corrupt(kind="bad-arguments-json")])
    _, error = await over_http(transport)
    assert error is not None
    assert error.code is ErrorCode.INVALID_RESPONSE
    assert "'corrupt' has arguments that are not valid JSON" in error.message


async def test_malformed_data_at_the_chunk_level_raises_what_a_client_would() -> None:
    chunks = script_chunks(DEMO_TURNS[2])
    for seed in range(6):
        active = FaultPlan([Corrupt(kind="malformed-data", seed=seed)]).select(OPTIONS)
        assert active is not None
        out: list[StreamChunk] = []
        with pytest.raises(LlmError) as caught:
            async for chunk in active.wrap(from_list(chunks), None):
                out.append(chunk)
        assert caught.value.code is ErrorCode.INVALID_RESPONSE
        assert "corrupt-malformed-data (seed" in str(caught.value)
        assert 1 <= len(out) <= 3
        assert out == chunks[: len(out)]
        assert not active.consumes_interaction


@pytest.mark.looptime
async def test_an_http_stall_reports_its_delay_as_a_schedule_shift() -> None:
    plan = FaultPlan([Stall(after_chunks=2, seconds=30), Latency(between_s=0.5)])
    active = plan.select(OPTIONS)
    assert active is not None
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def body() -> AsyncIterator[bytes]:
        yield deepseek_reasoning_then_text()

    # What FaultTransport does with a body: the HTTP codec over SSE frames; its delays shift the schedule.
    request = httpx.Request("POST", "http://127.0.0.1:9/chat/completions")
    codec = SseCodec(request, lambda error: b"data: {}\n\n")
    frames = [frame async for frame in active.apply(parse_frames(body()), codec, None)]
    assert b"".join(frame.data for frame in frames) == deepseek_reasoning_then_text()
    assert active.delayed_s == pytest.approx(loop.time() - start)
    assert active.delayed_s >= 30
