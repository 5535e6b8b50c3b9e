"""ReplayAdapter: matching, outcomes, timing (in virtual time), cancellation, and faults at replay time."""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path

import pytest

from chunktape import (
    AbortController,
    Cancelled,
    Completed,
    ErrorCode,
    Event,
    Finish,
    Interaction,
    LlmError,
    Raised,
    RecordedRequest,
    RecordingAdapter,
    ReplayAdapter,
    TextDelta,
    Timing,
    save_cassette,
)
from chunktape.faults import Disconnect, FailFirst, HttpError, Latency, Stall, Targeted
from chunktape.providers import ScriptedAdapter, ScriptedError, ScriptedTurn
from helpers import cassette_of, collect, collect_until_error, interaction_of, options, text_stream

# The recorded-timing tests read the gaps: one chunk every 100 ms.
interaction = partial(interaction_of, gap_ns=100_000_000)


# -- matching ----------------------------------------------------------------------------------------


async def test_replays_equal_chunks_from_a_cassette_object_or_a_path(tmp_path: Path) -> None:
    chunks = text_stream("a", "b")
    tape = cassette_of(interaction(chunks))
    assert await collect(ReplayAdapter(tape).stream(options())) == chunks
    save_cassette(tape, tmp_path / "c.msgpack")
    assert await collect(ReplayAdapter(tmp_path / "c.msgpack").stream(options())) == chunks


async def test_identical_requests_replay_in_recorded_order(tmp_path: Path) -> None:
    turns = [
        ScriptedTurn(error=ScriptedError(status=429, retry_after=1.0, message="busy")),
        ScriptedTurn(error=ScriptedError(status=429, retry_after=2.0, message="busy")),
        ScriptedTurn(text="finally"),
    ]
    path = tmp_path / "retry.msgpack"
    async with RecordingAdapter(ScriptedAdapter(turns), path) as recorder:
        for _ in range(2):
            await collect_until_error(recorder.stream(options()))
        expected = await collect(recorder.stream(options()))

    replay = ReplayAdapter(path)
    for retry_after in (1.0, 2.0):
        chunks, error = await collect_until_error(replay.stream(options()))
        assert chunks == []
        assert (error.code, error.status, error.retry_after) == (ErrorCode.PROVIDER_HTTP_ERROR, 429, retry_after)
    assert await collect(replay.stream(options())) == expected
    _, error = await collect_until_error(replay.stream(options()))
    assert error.code is ErrorCode.CASSETTE_EXHAUSTED
    assert "all already played" in str(error)


async def test_allow_repeats_plays_interactions_again() -> None:
    first, second = text_stream("one"), text_stream("two")
    replay = ReplayAdapter(cassette_of(interaction(first), interaction(second)), allow_repeats=True)
    got = [await collect(replay.stream(options())) for _ in range(5)]
    assert got == [first, second, first, second, first]


async def test_a_mismatch_shows_the_closest_request_and_a_diff() -> None:
    tape = cassette_of(
        interaction(text_stream("x"), content="what is the weather in Paris?", temperature=0.2),
        interaction(text_stream("y"), content="something else entirely", model="other-model"),
    )
    _, error = await collect_until_error(
        ReplayAdapter(tape).stream(options("what is the weather in Rome?", temperature=0.2))
    )
    assert error.code is ErrorCode.CASSETTE_MISMATCH
    message = str(error)
    assert "Closest is interaction #0" in message
    assert "failing matchers: messages" in message
    assert (
        "messages[0].content: recorded 'what is the weather in Paris?', requested 'what is the weather in Rome?'"
        in (message)
    )


async def test_match_on_by_name_and_by_callable() -> None:
    chunks = text_stream("a")
    tape = cassette_of(interaction(chunks, content="recorded", temperature=0.1))
    by_model = ReplayAdapter(tape, match_on=["model"])
    assert await collect(by_model.stream(options("anything", temperature=0.9))) == chunks

    def same_length(live: RecordedRequest, recorded: RecordedRequest) -> bool:
        return len(live.messages) == len(recorded.messages)

    by_callable = ReplayAdapter(tape, match_on=same_length)
    assert await collect(by_callable.stream(options("different"))) == chunks

    with pytest.raises(LlmError) as caught:
        ReplayAdapter(tape, match_on=["model", "colour"])
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert "valid matchers: extra, fingerprint" in str(caught.value)


async def test_assert_all_played_lists_unplayed_interactions() -> None:
    replay = ReplayAdapter(cassette_of(interaction(text_stream("a")), interaction(text_stream("b"), content="second")))
    await collect(replay.stream(options()))
    with pytest.raises(AssertionError, match=r"1 of 2 .* never played: #1 \(model 'test-model', last user message"):
        replay.assert_all_played()
    await collect(replay.stream(options("second")))
    replay.assert_all_played()


async def test_concurrent_replays_are_matched_independently() -> None:
    tape = cassette_of(*(interaction(text_stream(f"answer {n}"), content=f"q{n}") for n in range(10)))
    replay = ReplayAdapter(tape, timing=Timing.fixed(0.0, 0.0))
    results = await asyncio.gather(*(collect(replay.stream(options(f"q{n}"))) for n in (3, 1, 4, 5, 9, 2, 6)))
    assert results == [text_stream(f"answer {n}") for n in (3, 1, 4, 5, 9, 2, 6)]


# -- outcomes --------------------------------------------------------------------------------------


async def test_a_recorded_error_is_raised_at_the_same_position() -> None:
    chunks = text_stream("a", "b")[:3]
    raised = Raised(t_ns=1, code="STREAM_ABORTED", message="connection reset", status=None, retry_after=None)
    got, error = await collect_until_error(
        ReplayAdapter(cassette_of(interaction(chunks, outcome=raised))).stream(options())
    )
    assert got == chunks
    assert (error.code, error.message) == (ErrorCode.STREAM_ABORTED, "connection reset")
    assert error.recoverable


async def test_a_cut_short_recording_raises_exhausted_only_when_read_further() -> None:
    chunks = text_stream("a", "b")[:2]
    tape = cassette_of(interaction(chunks, outcome=Cancelled(t_ns=5, reason="consumer closed the stream")))
    stream = ReplayAdapter(tape).stream(options())
    assert [await anext(stream), await anext(stream)] == chunks
    with pytest.raises(LlmError) as caught:
        await anext(stream)
    assert caught.value.code is ErrorCode.CASSETTE_EXHAUSTED
    assert "cut short after 2 chunk(s) (consumer closed the stream)" in str(caught.value)


async def test_an_unknown_recorded_code_becomes_invalid_response() -> None:
    raised = Raised(t_ns=1, code="FROM_THE_FUTURE", message="?")
    _, error = await collect_until_error(ReplayAdapter(cassette_of(interaction([], outcome=raised))).stream(options()))
    assert error.code is ErrorCode.INVALID_RESPONSE
    assert "FROM_THE_FUTURE" in error.message


# -- timing (virtual time) --------------------------------------------------------------------------


async def _arrivals(replay: ReplayAdapter) -> list[float]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    return [loop.time() - start async for _ in replay.stream(options())]


@pytest.mark.looptime
async def test_recorded_timing_reproduces_first_chunk_delay_and_gaps() -> None:
    chunks = text_stream("a", "b", "c")
    times = [400_000_000, 430_000_000, 1_430_000_000, 1_431_000_000, 1_500_000_000, 1_600_000_000, 1_700_000_000]
    events = [Event(t_ns=t, chunk=c) for t, c in zip(times, chunks, strict=True)]
    request = RecordedRequest.from_options(options())
    tape = cassette_of(Interaction(request=request, events=events, outcome=Completed(t_ns=2_000_000_000)))
    recorded = [t / 1e9 for t in times]
    assert await _arrivals(ReplayAdapter(tape, timing=Timing.recorded())) == pytest.approx(recorded, abs=1e-6)
    half = await _arrivals(ReplayAdapter(tape, timing=Timing.recorded(speed=2.0)))
    assert half == pytest.approx([t / 2 for t in recorded], abs=1e-6)


@pytest.mark.looptime
async def test_fixed_and_instant_timing() -> None:
    tape = cassette_of(interaction(text_stream("a", "b")))
    fixed = await _arrivals(ReplayAdapter(tape, timing=Timing.fixed(1.0, 0.25)))
    assert fixed == pytest.approx([1.0, 1.25, 1.5, 1.75, 2.0, 2.25], abs=1e-6)
    assert await _arrivals(ReplayAdapter(tape)) == [0.0] * 6


def test_timing_rejects_nonsense() -> None:
    with pytest.raises(LlmError) as caught:
        Timing.recorded(speed=0)
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    with pytest.raises(LlmError) as caught:
        Timing.fixed(-1, 0)
    assert caught.value.code is ErrorCode.INVALID_CONFIG


@pytest.mark.looptime
async def test_task_cancellation_stops_replay_mid_sleep() -> None:
    tape = cassette_of(interaction(text_stream("a", "b"), gap_ns=3_600_000_000_000))
    replay = ReplayAdapter(tape, timing=Timing.recorded())
    loop = asyncio.get_running_loop()
    start = loop.time()
    task = asyncio.create_task(collect(replay.stream(options())))
    await asyncio.sleep(10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.time() - start == pytest.approx(10)


@pytest.mark.looptime
async def test_an_abort_signal_stops_replay_mid_sleep() -> None:
    tape = cassette_of(interaction(text_stream("a", "b"), gap_ns=60_000_000_000))
    controller = AbortController()
    loop = asyncio.get_running_loop()
    start = loop.time()
    loop.call_later(90, controller.abort, "enough")
    got, error = await collect_until_error(
        ReplayAdapter(tape, timing=Timing.recorded()).stream(options(signal=controller.signal))
    )
    assert len(got) == 1
    assert error.code is ErrorCode.CANCELLED
    assert loop.time() - start == pytest.approx(90)


async def test_an_abort_signal_stops_instant_replay_between_chunks() -> None:
    tape = cassette_of(interaction(text_stream("a", "b")))
    controller = AbortController()
    stream = ReplayAdapter(tape).stream(options(signal=controller.signal))
    await anext(stream)
    controller.abort()
    with pytest.raises(LlmError) as caught:
        await anext(stream)
    assert caught.value.code is ErrorCode.CANCELLED


@pytest.mark.looptime
async def test_aclose_stops_a_timed_replay() -> None:
    tape = cassette_of(interaction(text_stream("a", "b")))
    stream = ReplayAdapter(tape, timing=Timing.recorded()).stream(options())
    await anext(stream)
    await stream.aclose()
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


# -- faults at replay time -------------------------------------------------------------------------


async def test_injected_failures_do_not_use_up_the_interaction() -> None:
    chunks = text_stream("a", "b")
    replay = ReplayAdapter(
        cassette_of(interaction(chunks)),
        faults=[Targeted(HttpError(503), calls=[1]), Targeted(Disconnect(after_chunks=2), calls=[2])],
    )
    got, error = await collect_until_error(replay.stream(options()))
    assert (got, error.code, error.status) == ([], ErrorCode.PROVIDER_HTTP_ERROR, 503)
    got, error = await collect_until_error(replay.stream(options()))
    assert (got, error.code) == (chunks[:2], ErrorCode.STREAM_ABORTED)
    assert replay.play_counts == [0]
    assert await collect(replay.stream(options())) == chunks  # the retry replays the recording
    replay.assert_all_played()


async def test_fail_first_over_one_interaction_fails_twice_then_succeeds() -> None:
    chunks = text_stream("a")
    replay = ReplayAdapter(cassette_of(interaction(chunks)), faults=[FailFirst(2, HttpError(503))])
    for _ in range(2):
        _, error = await collect_until_error(replay.stream(options()))
        assert error.status == 503
    assert await collect(replay.stream(options())) == chunks
    with pytest.raises(LlmError) as exhausted:
        await collect(replay.stream(options()))
    assert exhausted.value.code is ErrorCode.CASSETTE_EXHAUSTED


@pytest.mark.looptime
async def test_a_completed_stall_serves_and_uses_up_the_interaction() -> None:
    chunks = text_stream("a", "b")
    replay = ReplayAdapter(cassette_of(interaction(chunks)), faults=[Stall(after_chunks=1, seconds=30)])
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await collect(replay.stream(options())) == chunks
    assert loop.time() - start == pytest.approx(30.0)
    assert replay.play_counts == [1]


def test_an_invalid_fault_is_refused_when_the_adapter_is_built() -> None:
    with pytest.raises(LlmError) as caught:
        ReplayAdapter(cassette_of(), faults=("no-such-fault",))
    assert caught.value.code is ErrorCode.INVALID_CONFIG


async def test_replayed_chunks_are_the_recorded_objects_equal() -> None:
    delta = TextDelta(index=0, text="x")
    tape = cassette_of(interaction([delta]))
    (got,) = await collect(ReplayAdapter(tape, timing=Timing.fixed(0, 0)).stream(options()))
    assert got == delta


@pytest.mark.looptime
async def test_a_recorded_error_is_raised_at_its_recorded_time() -> None:
    raised = Raised(t_ns=2_500_000_000, code="PROVIDER_HTTP_ERROR", message="busy", status=503)
    replay = ReplayAdapter(cassette_of(interaction([], outcome=raised)), timing=Timing.recorded())
    loop = asyncio.get_running_loop()
    start = loop.time()
    _, error = await collect_until_error(replay.stream(options()))
    assert error.status == 503
    assert loop.time() - start == pytest.approx(2.5)


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("fault", "expected_ms"),
    [
        (Latency(first_chunk_s=0, between_s=0.01), [100, 210, 320, 430, 540, 650]),
        (Stall(after_chunks=2, seconds=1.0), [100, 200, 1300, 1400, 1500, 1600]),
    ],
    ids=["latency", "stall"],
)
async def test_fault_delays_shift_the_recorded_schedule(fault: Latency | Stall, expected_ms: list[int]) -> None:
    replay = ReplayAdapter(cassette_of(interaction(text_stream("a", "b"))), timing=Timing.recorded(), faults=[fault])
    loop = asyncio.get_running_loop()
    start = loop.time()
    arrivals = [round((loop.time() - start) * 1000) async for _ in replay.stream(options())]
    assert arrivals == expected_ms


@pytest.mark.parametrize("fault", [Latency(first_chunk_s=0, between_s=0), Stall(after_chunks=1, seconds=0)])
async def test_a_consumer_stopping_at_finish_uses_up_a_slowed_interaction(fault: Latency | Stall) -> None:
    first, second = interaction(text_stream("first")), interaction(text_stream("second"))
    replay = ReplayAdapter(cassette_of(first, second), faults=[fault])
    for expected in ("first", "second"):
        async for chunk in replay.stream(options()):
            if isinstance(chunk, Finish):
                break
            if isinstance(chunk, TextDelta):
                assert chunk.text == expected
    assert replay.play_counts == [1, 1]
    replay.assert_all_played()


async def test_repeats_of_interleaved_requests_each_cycle_through_their_own_recordings() -> None:
    # Once every recording was played, a repeat is answered from the recordings its request matched the first
    # time (looked up, not matched against the whole cassette again): each request keeps its own cycle.
    a1, a2, b1 = text_stream("a1"), text_stream("a2"), text_stream("b1")
    tape = cassette_of(interaction(a1, content="a"), interaction(b1, content="b"), interaction(a2, content="a"))
    replay = ReplayAdapter(tape, allow_repeats=True)
    got = [await collect(replay.stream(options(content))) for content in "ababaab"]
    assert got == [a1, b1, a2, b1, a1, a2, b1]
    _, error = await collect_until_error(replay.stream(options("c")))
    assert error.code is ErrorCode.CASSETTE_MISMATCH
    _, error = await collect_until_error(replay.stream(options("c")))
    assert error.code is ErrorCode.CASSETTE_MISMATCH
