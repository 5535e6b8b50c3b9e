"""The reference consumer: the fault matrix, the retry table, partial output, cancellation, metrics, observers.

Virtual-time tests set ``noop_cycles=0``: looptime's 42 idle loop passes before each jump of the clock are there
for outside I/O, and these tests do none (with no handle ready no coroutine can run, so they change nothing).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import chunktape.harness as harness_module
from chunktape import RecordingAdapter, ReplayAdapter, Timing
from chunktape._abort import AbortController
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    BlockStart,
    GenerateOptions,
    LlmAdapter,
    StreamChunk,
    TextDelta,
    TokenUsage,
)
from chunktape.faults import (
    CORRUPT_RULES,
    STANDARD_FAULTS,
    Always,
    Disconnect,
    FailFirst,
    Fault,
    HttpError,
    Stall,
    StreamFault,
    Targeted,
)
from chunktape.harness import (
    STREAM_CHUNK,
    STREAM_END,
    STREAM_ERROR,
    STREAM_START,
    DoneEvent,
    ErrorEvent,
    HarnessEvent,
    RetryPolicy,
    RetryRule,
    StreamMetrics,
    TextEvent,
    ToolCallEvent,
    Transcript,
    collect,
    stream_with_retry,
)
from chunktape.providers._demo import DEMO_TURNS, demo_adapter
from chunktape.providers._scripted import ScriptedAdapter, ScriptedError, ScriptedToolCall, ScriptedTurn, script_chunks
from fault_support import FaultyAdapter, first_request, run_agent

OPTIONS = first_request()

# How a call that meets each standard fault once ends (the fault hits the first attempt of turn 2).
RETRIED = {
    "http-429",
    "http-500",
    "http-503",
    "http-529",
    "error-mid-stream",
    "disconnect-before-first-chunk",
    "disconnect-after-first-chunk",
    "disconnect-mid-text",
    "disconnect-mid-tool-call",
    "truncate",
}
SERVED = {"stall-30s"}  # slow, but complete: no retry without an idle timeout
FATAL_HTTP = {"http-401": 401, "http-400": 400}
FATAL_CORRUPT = {name for name in STANDARD_FAULTS if name.startswith("corrupt-")}


def test_public_names_are_sorted() -> None:
    assert harness_module.__all__ == sorted(harness_module.__all__)


def test_the_outcome_table_covers_the_whole_catalogue() -> None:
    assert RETRIED | SERVED | set(FATAL_HTTP) | FATAL_CORRUPT == set(STANDARD_FAULTS)


async def _agent(faults: list[Fault], policy: RetryPolicy | None = None) -> tuple[list[Transcript], FaultyAdapter]:
    adapter = FaultyAdapter(DEMO_TURNS, faults)
    async with asyncio.timeout(3600):  # virtual seconds: a hang fails fast
        transcripts = await run_agent(adapter, policy)
    return transcripts, adapter


async def _baseline() -> list[Transcript]:
    transcripts, _ = await _agent([])
    return transcripts


def _reasons(transcripts: list[Transcript]) -> list[str]:
    return [transcript.done.reason for transcript in transcripts if transcript.done is not None]


def _last(transcript: Transcript) -> HarnessEvent:
    return transcript.events[-1]


@pytest.mark.looptime(noop_cycles=0)
@pytest.mark.parametrize("name", list(STANDARD_FAULTS))
async def test_fault_matrix_once_on_a_multi_turn_session(name: str) -> None:
    fault = STANDARD_FAULTS[name]
    baseline = await _baseline()
    assert _reasons(baseline) == ["tool_use", "tool_use", "stop"]
    transcripts, adapter = await _agent([Targeted(fault=fault, calls=[2])])
    assert adapter.fault_ids[1] == name
    for transcript in transcripts:
        assert isinstance(_last(transcript), DoneEvent)
        assert sum(isinstance(event, DoneEvent) for event in transcript.events) == 1
    if name in RETRIED or name in SERVED:
        assert _reasons(transcripts) == ["tool_use", "tool_use", "stop"]
        assert [t.text for t in transcripts] == [t.text for t in baseline]
        assert [t.tool_calls for t in transcripts][1][0].arguments == {"path": "src/app/__init__.py"}
        assert [len(t.tool_calls) for t in transcripts] == [1, 2, 0]
        second = transcripts[1]
        if name in RETRIED:
            assert len(second.errors) == 1
            assert second.errors[0].will_retry
            assert name in str(second.errors[0].error) or name == "truncate"
            assert second.done is not None
            assert second.done.metrics is not None
            assert second.done.metrics.retry_count == 1
        else:
            assert second.errors == []
    else:
        assert _reasons(transcripts) == ["tool_use", "error"]
        done = transcripts[1].done
        assert done is not None
        assert done.error is not None
        assert [error.will_retry for error in transcripts[1].errors] == [False]
        if name in FATAL_HTTP:
            assert done.error.code is ErrorCode.PROVIDER_HTTP_ERROR
            assert done.error.status == FATAL_HTTP[name]
            assert not transcripts[1].errors[0].recoverable
        else:
            assert done.error.code is ErrorCode.PROTOCOL_VIOLATION
            assert getattr(done.error, "rule", None) == CORRUPT_RULES[name.removeprefix("corrupt-")]  # type: ignore[index]
            assert transcripts[1].tool_calls == []  # a corrupt attempt never hands out a tool call


@pytest.mark.looptime(noop_cycles=0)
@pytest.mark.parametrize("name", list(STANDARD_FAULTS))
async def test_fault_matrix_on_every_call_ends_cleanly(name: str) -> None:
    transcripts, adapter = await _agent([Always(fault=STANDARD_FAULTS[name])])
    first = transcripts[0]
    assert first.done is not None
    assert isinstance(_last(first), DoneEvent)
    if name in SERVED:
        assert _reasons(transcripts) == ["tool_use", "tool_use", "stop"]
        return
    assert _reasons(transcripts) == ["error"]
    expected_calls = {"http-429": 4}.get(name, 3 if name in RETRIED else 1)
    assert adapter.calls == expected_calls
    assert [error.will_retry for error in first.errors] == [True] * (expected_calls - 1) + [False]


@pytest.mark.looptime(noop_cycles=0)
async def test_a_stall_with_an_idle_timeout_is_retried_as_a_timeout() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    policy = RetryPolicy(idle_timeout=10)
    transcripts, adapter = await _agent([Targeted(fault=STANDARD_FAULTS["stall-30s"], calls=[1])], policy)
    assert _reasons(transcripts) == ["tool_use", "tool_use", "stop"]
    error = transcripts[0].errors[0]
    assert error.error.code is ErrorCode.TIMEOUT
    assert error.retry_after == 1.0
    assert loop.time() - start < 30  # the watchdog fired, nobody sat through the stall
    assert adapter.calls == 4


# -- the retry table -------------------------------------------------------------------------------


async def _attempt_times(adapter: LlmAdapter, policy: RetryPolicy | None = None) -> tuple[list[float], Transcript]:
    times: list[float] = []
    loop = asyncio.get_running_loop()

    def observe(name: str, payload: Any) -> None:
        if name == STREAM_START:
            times.append(loop.time())

    async with asyncio.timeout(3600):
        transcript = await collect(stream_with_retry(adapter, OPTIONS, policy, on_event=observe))
    return times, transcript


def _gaps(times: list[float]) -> list[float]:
    return [round(later - earlier, 6) for earlier, later in itertools.pairwise(times)]


def _failing(error: ScriptedError) -> ScriptedAdapter:
    return ScriptedAdapter([ScriptedTurn(text="never", error=error)], cycle=True)


@pytest.mark.looptime(noop_cycles=0)
@pytest.mark.parametrize(
    ("fault", "delays"),
    [
        (HttpError(status=429), [1.0, 2.0, 4.0]),
        (HttpError(status=500), [1.0, 2.0]),
        (HttpError(status=503), [1.0, 2.0]),
        (HttpError(status=502), [1.0, 2.0]),
        (HttpError(status=408), [1.0, 1.0]),
        (HttpError(status=401), []),
        (HttpError(status=400), []),
        (HttpError(status=404), []),
        (Disconnect(after_chunks=2), [1.0, 1.0]),
        (HttpError(status=429, retry_after=5), [5.0, 5.0, 5.0]),
        (HttpError(status=503, retry_after=0.25), [0.25, 0.25]),
        (HttpError(status=429, retry_after=120), [120.0, 120.0, 120.0]),
    ],
    ids=lambda value: value.fault_id if hasattr(value, "fault_id") else str(value),
)
async def test_retry_table_for_http_and_stream_errors(fault: StreamFault, delays: list[float]) -> None:
    adapter = FaultyAdapter([DEMO_TURNS[2]], [Always(fault=fault)], first_chunk_s=0, between_s=0)
    times, transcript = await _attempt_times(adapter)
    assert _gaps(times) == delays
    assert adapter.calls == len(delays) + 1
    assert transcript.done is not None
    assert transcript.done.reason == "error"
    assert transcript.done.metrics is not None
    assert transcript.done.metrics.retry_count == len(delays)
    assert [event.retry_after for event in transcript.errors] == [*delays, None]


@pytest.mark.looptime(noop_cycles=0)
@pytest.mark.parametrize(
    ("retry_after", "delays"),
    [(math.nan, [1.0, 2.0, 4.0]), (-3.0, [1.0, 2.0, 4.0]), (math.inf, [1.0, 2.0, 4.0])],
)
async def test_an_unusable_retry_after_falls_back_to_the_backoff(retry_after: float, delays: list[float]) -> None:
    # A recorded or hostile Retry-After that is no wait (NaN, negative, endless) never hangs the retries.
    error = ScriptedError(code="PROVIDER_HTTP_ERROR", message="slow down", status=429, retry_after=retry_after)
    times, transcript = await _attempt_times(_failing(error))
    assert _gaps(times) == delays
    assert [event.retry_after for event in transcript.errors] == [*delays, None]


def test_a_huge_retry_after_waits_a_day_at_most() -> None:
    error = LlmError("slow down", ErrorCode.PROVIDER_HTTP_ERROR, status=429, retry_after=1e308)
    assert RetryPolicy().delay(error, 1) == 86_400.0


@pytest.mark.looptime(noop_cycles=0)
async def test_retry_table_for_timeouts_is_two_fixed_retries() -> None:
    times, transcript = await _attempt_times(_failing(ScriptedError(code="TIMEOUT", message="no response")))
    assert _gaps(times) == [1.0, 1.0]
    assert transcript.done is not None
    assert transcript.done.error is not None
    assert transcript.done.error.code is ErrorCode.TIMEOUT


@pytest.mark.looptime(noop_cycles=0)
async def test_idle_timeout_turns_a_silent_stream_into_timeout_retries() -> None:
    adapter = FaultyAdapter(
        [DEMO_TURNS[2]], [Always(fault=Stall(after_chunks=0, seconds=100))], first_chunk_s=0, between_s=0
    )
    times, transcript = await _attempt_times(adapter, RetryPolicy(idle_timeout=5))
    assert _gaps(times) == [6.0, 6.0]  # 5 s of silence, then the fixed 1 s delay
    assert transcript.done is not None
    assert transcript.done.error is not None
    assert transcript.done.error.code is ErrorCode.TIMEOUT


@pytest.mark.looptime(noop_cycles=0)
async def test_retry_policy_is_configurable() -> None:
    adapter = FaultyAdapter([DEMO_TURNS[2]], [Always(fault=HttpError(status=429))], first_chunk_s=0, between_s=0)
    policy = RetryPolicy(retry_delay=0.5, retry_multiplier=3, max_delay=2, rate_limit=RetryRule(retries=4))
    times, _ = await _attempt_times(adapter, policy)
    assert _gaps(times) == [0.5, 1.5, 2.0]  # max_retries=3 caps the rule's 4
    adapter = FaultyAdapter([DEMO_TURNS[2]], [Always(fault=HttpError(status=429))], first_chunk_s=0, between_s=0)
    times, _ = await _attempt_times(adapter, RetryPolicy(max_retries=1))
    assert _gaps(times) == [1.0]
    adapter = FaultyAdapter([DEMO_TURNS[2]], [Always(fault=HttpError(status=500))], first_chunk_s=0, between_s=0)
    policy = RetryPolicy(server_error=RetryRule(retries=2, backoff="fixed"), retry_delay=3)
    times, _ = await _attempt_times(adapter, policy)
    assert _gaps(times) == [3.0, 3.0]


@pytest.mark.looptime(noop_cycles=0)
async def test_retries_count_per_class_and_in_total() -> None:
    faults: list[Fault] = [
        Targeted(fault=HttpError(status=429), calls=[1, 3]),
        Targeted(fault=HttpError(status=503), calls=[2, 4]),
    ]
    adapter = FaultyAdapter([DEMO_TURNS[2]], faults, first_chunk_s=0, between_s=0)
    times, transcript = await _attempt_times(adapter)
    assert _gaps(times) == [1.0, 1.0, 2.0]  # 429 #1, 503 #1, 429 #2; then max_retries=3 is spent
    assert transcript.done is not None
    assert transcript.done.reason == "error"
    assert transcript.done.error is not None
    assert transcript.done.error.status == 503


@pytest.mark.looptime(noop_cycles=0)
async def test_a_recovered_call_completes_after_the_retries() -> None:
    adapter = FaultyAdapter([DEMO_TURNS[2]], [FailFirst(n=2, fault=HttpError(status=503))], first_chunk_s=0)
    times, transcript = await _attempt_times(adapter)
    assert _gaps(times) == [1.0, 2.0]
    assert transcript.done is not None
    assert transcript.done.reason == "stop"
    assert transcript.text == DEMO_TURNS[2].text


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"retry_delay": -1.0}, "retry_delay"),
        ({"retry_multiplier": 0.5}, "retry_multiplier"),
        ({"idle_timeout": float("inf")}, "idle_timeout"),
    ],
)
def test_invalid_retry_policy_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(LlmError, match=field) as caught:
        RetryPolicy(**kwargs)
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    with pytest.raises(LlmError, match="retries"):
        RetryRule(retries=-1)


# -- partial output and retries --------------------------------------------------------------------


@pytest.mark.looptime(noop_cycles=0)
async def test_a_retry_after_partial_text_restarts_cleanly_without_duplicates() -> None:
    adapter = FaultyAdapter([DEMO_TURNS[0]], [FailFirst(n=1, fault=Disconnect(inside="text"))])
    events = [event async for event in stream_with_retry(adapter, OPTIONS)]
    error_at = next(i for i, event in enumerate(events) if isinstance(event, ErrorEvent))
    error = events[error_at]
    assert isinstance(error, ErrorEvent)
    assert (error.will_retry, error.partial, error.attempt) == (True, True, 1)
    before = [event for event in events[:error_at] if isinstance(event, TextEvent)]
    after = [event for event in events[error_at:] if isinstance(event, TextEvent)]
    assert before
    assert {event.attempt for event in before} == {1}
    assert {event.attempt for event in after} == {2}
    assert "".join(event.text for event in after) == DEMO_TURNS[0].text  # starts over from the beginning
    assert not any(isinstance(event, ToolCallEvent) for event in events[:error_at])
    transcript = await collect(_replay(events))
    assert transcript.text == DEMO_TURNS[0].text  # no duplicate
    assert [call.name for call in transcript.tool_calls] == ["list_files"]


async def _replay(events: list[HarnessEvent]) -> AsyncIterator[HarnessEvent]:
    for event in events:
        yield event


@pytest.mark.looptime(noop_cycles=0)
async def test_tool_calls_of_a_failed_attempt_are_never_handed_out() -> None:
    before_finish = len(script_chunks(DEMO_TURNS[0])) - 1  # the tool-call block is complete, finish is missing
    adapter = FaultyAdapter([DEMO_TURNS[0]], [FailFirst(n=1, fault=Disconnect(after_chunks=before_finish))])
    transcript = await collect(stream_with_retry(adapter, OPTIONS))
    calls = [event for event in transcript.events if isinstance(event, ToolCallEvent)]
    assert [(call.name, call.attempt) for call in calls] == [("list_files", 2)]
    assert transcript.done is not None
    assert transcript.done.reason == "tool_use"


# -- cancellation ------------------------------------------------------------------------------------


@pytest.mark.looptime(noop_cycles=0)
async def test_abort_signal_mid_stream_ends_with_cancel_promptly() -> None:
    loop = asyncio.get_running_loop()
    controller = AbortController()
    options = GenerateOptions(model="demo-model", messages=OPTIONS.messages, signal=controller.signal)
    loop.call_later(0.5, controller.abort, "stop button")
    start = loop.time()
    transcript = await collect(stream_with_retry(demo_adapter(), options))
    assert transcript.done is not None
    assert transcript.done.reason == "cancel"
    assert loop.time() - start == pytest.approx(0.5)
    assert isinstance(transcript.events[-1], DoneEvent)


@pytest.mark.looptime(noop_cycles=0)
async def test_abort_signal_during_a_retry_delay_ends_with_cancel() -> None:
    loop = asyncio.get_running_loop()
    controller = AbortController()
    options = GenerateOptions(model="demo-model", messages=OPTIONS.messages, signal=controller.signal)
    loop.call_later(5, controller.abort)
    adapter = FaultyAdapter([DEMO_TURNS[2]], [HttpError(status=429, retry_after=30)], first_chunk_s=0)
    start = loop.time()
    transcript = await collect(stream_with_retry(adapter, options))
    assert transcript.done is not None
    assert transcript.done.reason == "cancel"
    assert loop.time() - start == pytest.approx(5)
    assert adapter.calls == 1


async def test_an_already_aborted_signal_never_calls_the_adapter() -> None:
    controller = AbortController()
    controller.abort()
    options = GenerateOptions(model="demo-model", messages=OPTIONS.messages, signal=controller.signal)
    adapter = FaultyAdapter()
    transcript = await collect(stream_with_retry(adapter, options))
    assert transcript.done is not None
    assert transcript.done.reason == "cancel"
    assert adapter.calls == 0


@pytest.mark.looptime(noop_cycles=0)
async def test_task_cancellation_reports_cancel_to_observers_and_propagates() -> None:
    ends: list[DoneEvent] = []
    closed: list[bool] = []

    class Slow(LlmAdapter):
        @property
        def name(self) -> str:
            return "slow"

        async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
            try:
                yield BlockStart(index=0, block_type="text")
                yield TextDelta(index=0, text="hello")
                await asyncio.sleep(3600)
            finally:
                closed.append(True)

    def observe(name: str, payload: Any) -> None:
        if name == STREAM_END:
            ends.append(payload)

    async def consume() -> None:
        async for _ in stream_with_retry(Slow(), OPTIONS, on_event=observe):
            pass

    loop = asyncio.get_running_loop()
    start = loop.time()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(2):
            await consume()
    assert loop.time() - start == pytest.approx(2)
    assert [end.reason for end in ends] == ["cancel"]
    assert closed == [True]


async def test_closing_the_harness_closes_the_adapter_stream() -> None:
    ends: list[str] = []
    adapter = FaultyAdapter(first_chunk_s=0, between_s=0)
    stream = stream_with_retry(adapter, OPTIONS, on_event=lambda name, payload: ends.append(name))
    first = await anext(aiter(stream))
    assert isinstance(first, harness_module.ReasoningEvent)
    await stream.aclose()
    assert ends[-1] == STREAM_END


# -- broken adapters ---------------------------------------------------------------------------------


class ListAdapter(LlmAdapter):
    def __init__(self, chunks: list[StreamChunk], error: BaseException | None = None) -> None:
        self.chunks = chunks
        self.error = error
        self.calls = 0

    @property
    def name(self) -> str:
        return "list"

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        self.calls += 1
        for chunk in self.chunks:
            await asyncio.sleep(0)
            yield chunk
        if self.error is not None:
            raise self.error


async def test_a_protocol_violation_ends_as_error_never_as_an_exception() -> None:
    chunks = script_chunks(DEMO_TURNS[2])
    adapter = ListAdapter([chunks[0], TextDelta(index=3, text="stray"), *chunks[1:]])
    transcript = await collect(stream_with_retry(adapter, OPTIONS))
    assert transcript.done is not None
    assert transcript.done.reason == "error"
    assert transcript.done.error is not None
    assert transcript.done.error.code is ErrorCode.PROTOCOL_VIOLATION
    assert adapter.calls == 1


async def test_a_bare_exception_from_the_adapter_becomes_invalid_response() -> None:
    adapter = ListAdapter(script_chunks(DEMO_TURNS[2])[:3], error=RuntimeError("socket exploded"))
    transcript = await collect(stream_with_retry(adapter, OPTIONS))
    assert transcript.done is not None
    assert transcript.done.error is not None
    assert transcript.done.error.code is ErrorCode.INVALID_RESPONSE
    assert isinstance(transcript.done.error.cause, RuntimeError)
    assert "socket exploded" in str(transcript.done.error)


async def test_tool_arguments_that_are_not_an_object_become_an_error_event() -> None:
    turn = ScriptedTurn(tool_calls=[ScriptedToolCall(name="ls", arguments="[1, 2]")])
    transcript = await collect(stream_with_retry(ScriptedAdapter([turn]), OPTIONS))
    assert transcript.done is not None
    assert transcript.done.reason == "error"
    assert transcript.errors[0].error.code is ErrorCode.INVALID_RESPONSE
    assert "not a JSON object" in str(transcript.errors[0].error)


@pytest.mark.parametrize(
    ("turn", "max_tokens", "reason"),
    [
        (ScriptedTurn(text="hi there"), None, "stop"),
        (DEMO_TURNS[0], None, "tool_use"),
        (ScriptedTurn(text="one two three four"), 2, "length"),
        (ScriptedTurn(text="filtered", finish="content-filter"), None, "stop"),
        (ScriptedTurn(text="oops", finish="error"), None, "error"),
        (ScriptedTurn(text="halt", finish="cancelled"), None, "cancel"),
    ],
)
async def test_finish_kinds_map_to_done_reasons(turn: ScriptedTurn, max_tokens: int | None, reason: str) -> None:
    options = GenerateOptions(model="m", messages=OPTIONS.messages, max_tokens=max_tokens)
    transcript = await collect(stream_with_retry(ScriptedAdapter([turn]), options))
    assert transcript.done is not None
    assert transcript.done.reason == reason


# -- metrics and observers ---------------------------------------------------------------------------


@pytest.mark.looptime(noop_cycles=0)
async def test_metrics_in_virtual_time() -> None:
    metrics = StreamMetrics()
    adapter = demo_adapter(first_chunk_s=0.4, between_s=0.03)
    transcript = await collect(stream_with_retry(adapter, OPTIONS, metrics=metrics))
    chunks = len(script_chunks(DEMO_TURNS[0]))
    assert transcript.done is not None
    assert transcript.done.metrics is metrics
    assert metrics.ttfb == pytest.approx(0.4)
    assert metrics.total_duration == pytest.approx(0.4 + 0.03 * (chunks - 1))
    assert (metrics.chunk_count, metrics.tool_call_count, metrics.retry_count, metrics.attempts) == (chunks, 1, 0, 1)
    assert metrics.token_usage == DEMO_TURNS[0].usage
    assert transcript.done.usage == DEMO_TURNS[0].usage


@pytest.mark.looptime(noop_cycles=0)
async def test_metrics_across_a_retry() -> None:
    adapter = FaultyAdapter(
        [DEMO_TURNS[2]], [FailFirst(n=1, fault=Disconnect(after_chunks=2))], first_chunk_s=0.1, between_s=0.01
    )
    transcript = await collect(stream_with_retry(adapter, OPTIONS))
    assert transcript.done is not None
    metrics = transcript.done.metrics
    assert metrics is not None
    chunks = len(script_chunks(DEMO_TURNS[2]))
    assert metrics.ttfb == pytest.approx(0.1)
    assert (metrics.retry_count, metrics.attempts, metrics.chunk_count) == (1, 2, chunks + 2)
    assert metrics.total_duration == pytest.approx(0.11 + 1.0 + 0.1 + 0.01 * (chunks - 1))
    assert metrics.token_usage == TokenUsage(input_tokens=801, output_tokens=29, cached_input_tokens=512)


@pytest.mark.looptime(noop_cycles=0)
async def test_observer_events_and_logging(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, Any]] = []
    adapter = FaultyAdapter([DEMO_TURNS[2]], [FailFirst(n=1, fault=HttpError(status=503))], first_chunk_s=0)
    with caplog.at_level(logging.DEBUG, logger="chunktape.harness"):
        await collect(stream_with_retry(adapter, OPTIONS, on_event=lambda name, payload: seen.append((name, payload))))
    names = [name for name, _ in seen]
    chunks = len(script_chunks(DEMO_TURNS[2]))
    assert names == [STREAM_START, STREAM_ERROR, STREAM_START, *[STREAM_CHUNK] * chunks, STREAM_END]
    start = seen[0][1]
    assert (start.model, start.message_count, start.tool_count, start.attempt) == ("demo-model", 1, 0, 1)
    assert seen[-1][1].reason == "stop"
    messages = [record.getMessage() for record in caplog.records]
    assert "stream started: model=demo-model, attempt=1" in messages
    assert any(message.startswith("server_error retry 1/2 in 1.000s") for message in messages), messages
    assert any(message.startswith("stream ended: reason=stop, tokens=830") for message in messages)
    assert any(message == "chunk: type=TextDelta" for message in messages)


async def record_demo(path: Path) -> None:
    """Record the demo agent session for real through RecordingAdapter (in the test's virtual time)."""
    async with RecordingAdapter(demo_adapter(first_chunk_s=0.2, between_s=0.02), path) as recorder:
        transcripts = await run_agent(recorder)
    assert _reasons(transcripts) == ["tool_use", "tool_use", "stop"]


@pytest.mark.looptime(noop_cycles=0)
@pytest.mark.parametrize("name", list(STANDARD_FAULTS))
async def test_every_standard_fault_over_a_recorded_cassette_ends_as_documented(tmp_path: Path, name: str) -> None:
    await record_demo(tmp_path / "demo.msgpack")
    fault = Targeted(fault=STANDARD_FAULTS[name], calls=[2])
    replay = ReplayAdapter(tmp_path / "demo.msgpack", timing=Timing.recorded(), faults=[fault])
    async with asyncio.timeout(3600):  # virtual seconds: a hang fails fast
        transcripts = await run_agent(replay)
    assert replay.injected[1] == name
    for transcript in transcripts:
        assert sum(isinstance(event, DoneEvent) for event in transcript.events) == 1
        assert isinstance(_last(transcript), DoneEvent)
    if name in RETRIED or name in SERVED:
        assert _reasons(transcripts) == ["tool_use", "tool_use", "stop"]
        replay.assert_all_played()  # the injected failure did not use up the recorded turn
    else:
        assert _reasons(transcripts) == ["tool_use", "error"]
