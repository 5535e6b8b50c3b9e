"""ScriptedAdapter: valid streams from data, paced in loop time, cancellable, strict about options."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from chunktape import (
    AbortController,
    ErrorCode,
    Finish,
    GenerateOptions,
    LlmError,
    Message,
    ReasoningOption,
    StreamChunk,
    TextBlock,
    ToolCallBlock,
    UsageChunk,
    validate,
)
from chunktape._protocol import TextDelta, ToolCallDelta
from chunktape.providers import ScriptedAdapter, ScriptedError, ScriptedToolCall, ScriptedTurn
from chunktape.providers._demo import DEMO_TURNS, demo_adapter
from helpers import blocks, collect_until_error, stream_chunks

OPTIONS = GenerateOptions(model="scripted-1", messages=[Message(role="user", content="hi")])


async def test_a_turn_streams_reasoning_text_and_tool_calls_as_a_valid_sequence() -> None:
    turn = ScriptedTurn(
        reasoning="Think first.",
        text="Calling two tools.",
        tool_calls=[
            ScriptedToolCall(name="read_file", arguments={"path": "a.py"}, id="call_a"),
            ScriptedToolCall(name="bash", arguments='{"command": "ls -la"}'),
        ],
    )
    chunks = await stream_chunks(ScriptedAdapter([turn], args_piece=4), OPTIONS)
    validate(chunks)
    ends = blocks(chunks)
    assert [type(b).__name__ for b in ends] == ["ReasoningBlock", "TextBlock", "ToolCallBlock", "ToolCallBlock"]
    assert ends[1] == TextBlock(text="Calling two tools.")
    assert ends[2] == ToolCallBlock(id="call_a", name="read_file", arguments='{"path":"a.py"}')  # type: ignore[arg-type]
    assert isinstance(ends[3], ToolCallBlock)
    assert json.loads(ends[3].arguments) == {"command": "ls -la"}
    pieces = [c for c in chunks if isinstance(c, ToolCallDelta) and c.index == 3]
    assert len(pieces) == 6  # 21 characters in pieces of 4: arguments always arrive split
    assert [p.id for p in pieces[1:]] == [None] * 5
    finish = chunks[-1]
    assert isinstance(finish, Finish)
    assert finish.reason.kind == "tool-calls"
    assert isinstance(chunks[-2], UsageChunk)


async def test_text_is_split_into_word_deltas() -> None:
    chunks = await stream_chunks(ScriptedAdapter([ScriptedTurn(text="one two  three")]), OPTIONS)
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["one ", "two  ", "three"]


async def test_every_demo_turn_is_valid() -> None:
    adapter = demo_adapter(first_chunk_s=0, between_s=0)
    for _ in DEMO_TURNS:
        validate(await stream_chunks(adapter, OPTIONS))


async def test_turns_serve_calls_in_order_then_run_out() -> None:
    adapter = ScriptedAdapter([ScriptedTurn(text="first"), ScriptedTurn(text="second")])
    assert TextBlock(text="first") in [getattr(c, "block", None) for c in await stream_chunks(adapter, OPTIONS)]
    assert TextBlock(text="second") in [getattr(c, "block", None) for c in await stream_chunks(adapter, OPTIONS)]
    with pytest.raises(LlmError) as raised:
        await stream_chunks(adapter, OPTIONS)
    assert raised.value.code is ErrorCode.SCRIPT_EXHAUSTED
    assert "call #3 but the script has only 2 turn(s)" in str(raised.value)


async def test_cycle_and_callable_turns() -> None:
    cycling = ScriptedAdapter([ScriptedTurn(text="again")], cycle=True)
    for _ in range(3):
        validate(await stream_chunks(cycling, OPTIONS))

    def respond(options: GenerateOptions, number: int) -> ScriptedTurn:
        return ScriptedTurn(text=f"{options.model} call {number}")

    echo = ScriptedAdapter(respond)
    chunks = await stream_chunks(echo, OPTIONS)
    assert TextBlock(text="scripted-1 call 0") in [getattr(c, "block", None) for c in chunks]


@pytest.mark.looptime
async def test_pacing_uses_loop_time() -> None:
    loop = asyncio.get_running_loop()
    adapter = ScriptedAdapter([ScriptedTurn(text="a b c")], first_chunk_s=2.0, between_s=0.25)
    start = loop.time()
    arrivals = [loop.time() - start async for _ in adapter.stream(OPTIONS)]
    assert arrivals[0] == pytest.approx(2.0)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert gaps == pytest.approx([0.25] * len(gaps))


@pytest.mark.looptime
async def test_abort_signal_stops_the_stream_mid_sleep() -> None:
    loop = asyncio.get_running_loop()
    controller = AbortController()
    options = GenerateOptions(model="m", messages=[], signal=controller.signal)
    adapter = ScriptedAdapter([ScriptedTurn(text="a b c d")], first_chunk_s=1.0, between_s=10.0)
    received: list[StreamChunk] = []
    loop.call_later(12.0, controller.abort)
    with pytest.raises(LlmError) as raised:
        async for chunk in adapter.stream(options):
            received.append(chunk)
    assert raised.value.code is ErrorCode.CANCELLED
    assert len(received) == 2  # at t=1 and t=11; the abort at t=12 lands in the next 10 s sleep
    assert loop.time() == pytest.approx(12.0, abs=0.01) or loop.time() - 12.0 < 0.01


@pytest.mark.looptime
async def test_task_cancellation_stops_the_stream() -> None:
    adapter = ScriptedAdapter([ScriptedTurn(text="a b c d")], between_s=10.0)
    received: list[StreamChunk] = []

    async def consume() -> None:
        async for chunk in adapter.stream(OPTIONS):
            received.append(chunk)

    task = asyncio.ensure_future(consume())
    await asyncio.sleep(15.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(received) == 2


async def test_unsupported_options_are_refused_not_dropped() -> None:
    adapter = ScriptedAdapter([ScriptedTurn(text="x")], reasoning_options=[ReasoningOption(id="high")])
    with pytest.raises(LlmError) as raised:
        await stream_chunks(adapter, GenerateOptions(model="m", messages=[], reasoning="max"))
    assert raised.value.code is ErrorCode.UNSUPPORTED_OPTION
    assert "'max' is not offered (offered: ['high'])" in str(raised.value)
    with pytest.raises(LlmError, match=r"extra fields \['logprobs'\]"):
        await stream_chunks(adapter, GenerateOptions(model="m", messages=[], extra={"logprobs": True}))
    validate(await stream_chunks(adapter, GenerateOptions(model="m", messages=[], reasoning="high")))


async def test_max_tokens_cuts_the_output_and_finishes_with_length() -> None:
    adapter = ScriptedAdapter([ScriptedTurn(text="one two three four five", tool_calls=[ScriptedToolCall(name="x")])])
    chunks = await stream_chunks(adapter, GenerateOptions(model="m", messages=[], max_tokens=2))
    validate(chunks)
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["one ", "two "]
    assert isinstance(chunks[-1], Finish)
    assert chunks[-1].reason.kind == "length"


async def test_a_scripted_error_is_raised_after_the_given_chunks() -> None:
    failing = ScriptedTurn(
        text="a b c",
        error=ScriptedError(message="slow down", status=429, retry_after=2.0, after_chunks=3),
    )
    received, error = await collect_until_error(ScriptedAdapter([failing]).stream(OPTIONS))
    assert len(received) == 3
    assert (error.code, error.status, error.retry_after) == ("PROVIDER_HTTP_ERROR", 429, 2.0)
    assert error.recoverable


def test_bad_construction_arguments_are_refused_with_invalid_config() -> None:
    with pytest.raises(LlmError, match="must be >= 0") as caught:
        ScriptedAdapter([], between_s=-1)
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    with pytest.raises(LlmError, match="args_piece"):
        ScriptedAdapter([], args_piece=0)
    with pytest.raises(LlmError, match="arguments must be JSON text") as caught:
        ScriptedToolCall(name="bash", arguments="")
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    with pytest.raises(LlmError, match="'NOPE' is not an ErrorCode") as caught:
        ScriptedError(code="NOPE")
    assert caught.value.code is ErrorCode.INVALID_CONFIG
