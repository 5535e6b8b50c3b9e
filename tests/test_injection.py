"""Fault injection on chunk streams: each semantic pinned, over plain generators and scripted turns.

Virtual-time tests set ``noop_cycles=0``: looptime's 42 idle loop passes before each jump of the clock are there
for outside I/O, and these tests do none (with no handle ready no coroutine can run, so they change nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence

import looptime
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chunktape.faults._plan as injection_module
from chunktape import ReplayAdapter
from chunktape._abort import AbortController
from chunktape._errors import ErrorCode, LlmError, ProtocolViolation
from chunktape._protocol import (
    BlockStart,
    Finish,
    GenerateOptions,
    Message,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
)
from chunktape._validation import StreamValidator, validate
from chunktape.faults import (
    CORRUPT_KINDS,
    CORRUPT_RULES,
    STANDARD_FAULTS,
    Chaos,
    Corrupt,
    CorruptKind,
    Disconnect,
    FailFirst,
    HttpError,
    Latency,
    Stall,
    StreamError,
    StreamFault,
    Targeted,
    Truncate,
)
from chunktape.faults._plan import ActiveFault, FaultPlan
from chunktape.providers._demo import DEMO_TURNS
from chunktape.providers._scripted import ScriptedAdapter, ScriptedToolCall, ScriptedTurn, script_chunks
from fault_support import FaultyAdapter, first_request, from_list
from helpers import cassette_of, collect_until_error, drain, interaction_of, text_stream
from helpers import options as request_of

TOOL_TURN = DEMO_TURNS[0]  # reasoning, text, one tool call
CHUNKS = script_chunks(TOOL_TURN)
OPTIONS = first_request()


def activate(fault: StreamFault) -> ActiveFault:
    active = FaultPlan([fault]).select(OPTIONS)
    assert active is not None
    return active


class Source:
    """A plain async generator over chunks that records how far it was read and whether it was closed."""

    def __init__(self, chunks: Sequence[StreamChunk], between_s: float = 0.0) -> None:
        self.chunks = chunks
        self.between_s = between_s
        self.pulled = 0
        self.closed = False

    async def __call__(self) -> AsyncIterator[StreamChunk]:
        try:
            for chunk in self.chunks:
                await asyncio.sleep(self.between_s)
                self.pulled += 1
                yield chunk
        finally:
            self.closed = True


async def run_fault(
    fault: StreamFault, chunks: Sequence[StreamChunk] = CHUNKS, between_s: float = 0.0
) -> tuple[list[StreamChunk], LlmError | None, Source]:
    source = Source(chunks, between_s)
    active = activate(fault)
    try:
        active.before_stream()
    except LlmError as early:
        return [], early, source
    out, error = await drain(active.wrap(source(), None))
    return out, error, source


def test_public_names_are_sorted() -> None:
    assert injection_module.__all__ == sorted(injection_module.__all__)


# -- HttpError ---------------------------------------------------------------------------------


async def test_http_error_raises_before_any_chunk_with_status_and_retry_after() -> None:
    active = activate(HttpError(status=429, retry_after=2.5))
    with pytest.raises(LlmError) as caught:
        active.before_stream()
    error = caught.value
    assert error.code is ErrorCode.PROVIDER_HTTP_ERROR
    assert (error.status, error.retry_after, error.recoverable) == (429, 2.5, True)
    assert "http-429" in str(error)
    assert "seed 0" in str(error)


async def test_http_error_in_wrap_also_fails_before_reading_the_source() -> None:
    out, error, source = await run_fault(HttpError(status=401, message="bad key"), between_s=0)
    assert out == []
    assert error is not None
    assert error.status == 401
    assert not error.recoverable
    # wrap() alone (without before_stream) raises too, and never pulls a chunk.
    source = Source(CHUNKS)
    out, error = await drain(activate(HttpError(status=500)).wrap(source(), None))
    assert (out, source.pulled) == ([], 0)
    assert error is not None
    assert error.code is ErrorCode.PROVIDER_HTTP_ERROR


# -- Disconnect --------------------------------------------------------------------------------


async def test_disconnect_after_3_chunks_yields_exactly_3_then_stream_aborted() -> None:
    out, error, source = await run_fault(Disconnect(after_chunks=3))
    assert out == CHUNKS[:3]
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED
    assert "disconnect-after-3-chunks (seed 0)" in str(error)
    assert source.closed


async def test_disconnect_before_first_chunk() -> None:
    out, error, _ = await run_fault(STANDARD_FAULTS["disconnect-before-first-chunk"])
    assert out == []
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED


async def test_disconnect_never_lets_finish_through() -> None:
    out, error, _ = await run_fault(Disconnect(after_chunks=1000))
    assert out == CHUNKS[:-1]
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED


@pytest.mark.looptime(noop_cycles=0)
async def test_disconnect_after_seconds_of_loop_time() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    out, error, source = await run_fault(Disconnect(after_s=0.55), between_s=0.1)
    assert len(out) == 5
    assert loop.time() - start == pytest.approx(0.55)
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED
    assert "after 0.55s" in str(error)
    assert source.closed


@pytest.mark.parametrize("block_type", ["tool-call", "text", "reasoning"])
async def test_disconnect_inside_a_block_lands_inside_it(block_type: str) -> None:
    out, error, _ = await run_fault(Disconnect(inside=block_type))  # type: ignore[arg-type]
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED
    starts = [chunk for chunk in out if isinstance(chunk, BlockStart)]
    assert starts[-1].block_type == block_type
    validator = StreamValidator()
    for chunk in out:
        validator.feed(chunk)  # valid up to the cut ...
    with pytest.raises(ProtocolViolation, match="still open"):
        validator.close()  # ... which is inside the block


async def test_disconnect_mid_tool_call_is_computed_from_the_stream() -> None:
    two_calls = DEMO_TURNS[1]
    chunks = script_chunks(two_calls)
    out, error, _ = await run_fault(STANDARD_FAULTS["disconnect-mid-tool-call"], chunks)
    assert isinstance(out[-1], ToolCallDelta)
    assert out[-1].index == 1  # block 0 is reasoning, block 1 the first tool call
    assert error is not None
    assert "disconnect-mid-tool-call" in str(error)


async def test_disconnect_inside_a_missing_block_breaks_before_finish() -> None:
    text_only = script_chunks(DEMO_TURNS[2])
    out, error, _ = await run_fault(Disconnect(inside="tool-call"), text_only)
    assert out == text_only[:-1]
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED


# -- Stall -------------------------------------------------------------------------------------


async def consume_with_idle_timeout(stream: AsyncIterator[StreamChunk], idle: float, into: list[StreamChunk]) -> None:
    """A consumer with an idle watchdog: each chunk must arrive within ``idle`` seconds."""
    async with contextlib.aclosing(stream) as chunks:  # type: ignore[type-var]
        while True:
            async with asyncio.timeout(idle):
                into.append(await anext(chunks))


@pytest.mark.looptime(noop_cycles=0)
async def test_stall_trips_a_five_second_idle_timeout_in_virtual_time() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    active = activate(Stall(after_chunks=2, seconds=30))
    stream = active.wrap(Source(CHUNKS, between_s=0.01)(), None)
    received: list[StreamChunk] = []
    with pytest.raises(TimeoutError):
        await consume_with_idle_timeout(stream, 5, received)
    assert received == CHUNKS[:2]
    assert loop.time() - start == pytest.approx(0.02 + 5)


@pytest.mark.looptime(noop_cycles=0)
async def test_stall_without_a_timeout_completes_the_stream() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    out, error, _ = await run_fault(Stall(after_chunks=2, seconds=30))
    assert (out, error) == (CHUNKS, None)
    assert loop.time() - start == pytest.approx(30)
    assert activate(Stall(after_chunks=2, seconds=30)).consumes_interaction


@pytest.mark.looptime(noop_cycles=0)
async def test_stall_past_the_end_stalls_before_the_end() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    out, error, _ = await run_fault(Stall(after_chunks=10_000, seconds=7))
    assert (out, error) == (CHUNKS, None)
    assert loop.time() - start == pytest.approx(7)


@pytest.mark.looptime(noop_cycles=0)
async def test_abort_signal_ends_a_stall_promptly() -> None:
    loop = asyncio.get_running_loop()
    controller = AbortController()
    loop.call_later(3, controller.abort, "user pressed stop")
    start = loop.time()
    out, error = await drain(activate(Stall(after_chunks=1, seconds=30)).wrap(from_list(CHUNKS), controller.signal))
    assert len(out) == 1
    assert error is not None
    assert error.code is ErrorCode.CANCELLED
    assert loop.time() - start == pytest.approx(3)


# -- Latency -----------------------------------------------------------------------------------


async def _arrival_times(fault: Latency) -> list[float]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    times: list[float] = []
    async for _ in activate(fault).wrap(from_list(CHUNKS[:6]), None):
        times.append(round(loop.time() - start, 6))
    return times


@pytest.mark.looptime(noop_cycles=0)
async def test_latency_adds_first_chunk_and_between_delays() -> None:
    times = await _arrival_times(Latency(first_chunk_s=0.5, between_s=0.1))
    assert times == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9, 1.0])


@pytest.mark.looptime(noop_cycles=0)
async def test_latency_jitter_is_reproducible_from_the_seed() -> None:
    first = await _arrival_times(Latency(between_s=0.1, jitter_s=0.05, seed=1))
    again = await _arrival_times(Latency(between_s=0.1, jitter_s=0.05, seed=1))
    other = await _arrival_times(Latency(between_s=0.1, jitter_s=0.05, seed=2))
    assert first == again != other
    gaps = [b - a for a, b in zip([0.0, *first], first, strict=False)][1:]
    assert all(0.1 - 1e-6 <= gap <= 0.15 + 1e-6 for gap in gaps)


# -- Truncate ----------------------------------------------------------------------------------


@pytest.mark.parametrize("after", [0, 3, 10_000])
async def test_truncate_ends_silently_without_usage_or_finish(after: int) -> None:
    out, error, source = await run_fault(Truncate(after_chunks=after))
    assert error is None
    assert len(out) <= after
    assert not any(isinstance(chunk, UsageChunk | Finish) for chunk in out)
    assert out == CHUNKS[: len(out)]
    assert source.closed


# -- Corrupt -----------------------------------------------------------------------------------

STREAMS = {
    "tool-turn": CHUNKS,
    "two-calls": script_chunks(DEMO_TURNS[1]),
    "text-only": script_chunks(DEMO_TURNS[2]),
    "empty": script_chunks(ScriptedTurn()),
}


def assert_rejected(chunks: Iterable[StreamChunk], rule: str) -> None:
    with pytest.raises(ProtocolViolation) as caught:
        validate(chunks)
    assert caught.value.rule == rule, caught.value


async def _assert_corrupt(kind: CorruptKind) -> None:
    for name, chunks in STREAMS.items():
        for seed in range(8):
            out, error, _ = await run_fault(Corrupt(kind=kind, seed=seed), chunks)
            assert error is None, (name, seed)
            assert_rejected(out, CORRUPT_RULES[kind])


async def test_corrupt_unpaired_block_breaks_block_pairs() -> None:
    await _assert_corrupt("unpaired-block")


async def test_corrupt_bad_index_breaks_index_order() -> None:
    await _assert_corrupt("bad-index")


async def test_corrupt_interleaved_breaks_index_order() -> None:
    await _assert_corrupt("interleaved")


async def test_corrupt_bad_arguments_json_breaks_arguments_delta() -> None:
    await _assert_corrupt("bad-arguments-json")


async def test_corrupt_finish_not_last_breaks_finish_last() -> None:
    await _assert_corrupt("finish-not-last")


async def test_corrupt_usage_after_finish_breaks_usage_before_finish() -> None:
    await _assert_corrupt("usage-after-finish")


async def test_corrupt_duplicate_finish_breaks_finish_last() -> None:
    await _assert_corrupt("duplicate-finish")


async def test_corrupt_is_deterministic_for_a_seed() -> None:
    for kind in CORRUPT_KINDS:
        first, _, _ = await run_fault(Corrupt(kind=kind, seed=5))
        again, _, _ = await run_fault(Corrupt(kind=kind, seed=5))
        assert first == again


# -- selection: FailFirst, Chaos, Targeted, composition ------------------------------------------


async def test_fail_first_fails_calls_one_and_two_and_serves_call_three() -> None:
    adapter = FaultyAdapter([TOOL_TURN], [FailFirst(n=2, fault=HttpError(status=503))], first_chunk_s=0)
    outcomes: list[object] = []
    for _ in range(3):
        out, error = await drain(adapter.stream(OPTIONS))
        outcomes.append(error.status if error is not None else out)
    assert outcomes == [503, 503, CHUNKS]
    assert adapter.fault_ids == ["http-503", "http-503", None]
    # the one recorded turn was used up by the call that served it
    _, error = await drain(adapter.stream(OPTIONS))
    assert error is not None
    assert error.code is ErrorCode.CASSETTE_EXHAUSTED


def _chaos_sequence(seed: int, calls: int = 100) -> list[str | None]:
    plan = FaultPlan(
        [Chaos(rate=0.3, faults=[HttpError(status=500), HttpError(status=429), Disconnect(after_chunks=2)], seed=seed)]
    )
    sequence: list[str | None] = []
    for _ in range(calls):
        active = plan.select(OPTIONS)
        sequence.append(None if active is None else active.fault_id)
    return sequence


def test_chaos_is_reproducible_from_its_seed() -> None:
    first = _chaos_sequence(seed=7)
    assert first == _chaos_sequence(seed=7)
    assert first != _chaos_sequence(seed=8)
    fired = [item for item in first if item is not None]
    assert 10 <= len(fired) <= 50
    assert set(fired) == {"http-500", "http-429", "disconnect-after-2-chunks"}


def test_chaos_rate_bounds() -> None:
    never = FaultPlan([Chaos(rate=0, faults=[HttpError(status=500)], seed=1)])
    always = FaultPlan([Chaos(rate=1, faults=[HttpError(status=500)], seed=1)])
    assert all(never.select(OPTIONS) is None for _ in range(100))
    assert all(always.select(OPTIONS) is not None for _ in range(100))


def test_chaos_failure_names_the_seed() -> None:
    plan = FaultPlan([Chaos(rate=1, faults=[HttpError(status=502)], seed=1234)])
    active = plan.select(OPTIONS)
    assert active is not None
    assert active.seed == 1234
    with pytest.raises(LlmError, match=r"http-502 \(seed 1234\)"):
        active.before_stream()


def test_targeted_by_call_number_model_and_match() -> None:
    plan = FaultPlan(
        [
            Targeted(fault=HttpError(status=500), calls=[1, 3]),
            Targeted(fault=HttpError(status=429), model="other-model"),
            Targeted(fault=Truncate(after_chunks=1), match=r"delete \w+"),
        ]
    )
    other = GenerateOptions(model="other-model", messages=[Message(role="user", content="hi")])
    delete = GenerateOptions(model="demo-model", messages=[Message(role="user", content="please delete files")])
    picks = []
    for options in (OPTIONS, OPTIONS, OPTIONS, other, delete):
        active = plan.select(options)
        picks.append(None if active is None else active.fault_id)
    assert picks == ["http-500", None, "http-500", "http-429", "truncate-after-1-chunks"]
    assert plan.calls == 5


def test_targeted_fail_first_counts_only_selected_calls() -> None:
    plan = FaultPlan([Targeted(fault=FailFirst(n=1, fault=HttpError(status=503)), model="m2", id="m2-outage")])
    m2 = GenerateOptions(model="m2", messages=[])
    picks = []
    for options in (OPTIONS, m2, OPTIONS, m2):
        active = plan.select(options)
        picks.append(None if active is None else active.fault_id)
    assert picks == [None, "m2-outage", None, None]


def test_plan_string_ids_and_a_new_plan_starts_over() -> None:
    def new_plan() -> FaultPlan:
        return FaultPlan(["http-429", {"type": "fail-first", "n": 1, "fault": {"type": "truncate", "after_chunks": 1}}])

    plan = new_plan()
    first = plan.select(OPTIONS)
    assert first is not None
    assert first.fault_id == "http-429+truncate-after-1-chunks"
    assert plan.select(OPTIONS) is None  # both fired once: http-429 is transient, the other fails first 1
    again = new_plan().select(OPTIONS)
    assert again is not None
    assert again.fault_id == first.fault_id
    assert FaultPlan().select(OPTIONS) is None
    assert not FaultPlan()


@pytest.mark.looptime(noop_cycles=0)
async def test_faults_compose_in_order() -> None:
    loop = asyncio.get_running_loop()
    plan = FaultPlan([Latency(first_chunk_s=1.0, between_s=0.5), Disconnect(after_chunks=2)])
    active = plan.select(OPTIONS)
    assert active is not None
    assert not active.consumes_interaction
    start = loop.time()
    out, error = await drain(active.wrap(from_list(CHUNKS), None))
    assert out == CHUNKS[:2]
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED
    assert loop.time() - start == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("fault", "consumes"),
    [
        (HttpError(status=500), False),
        (Disconnect(after_chunks=1), False),
        (Truncate(after_chunks=1), False),
        (Corrupt(kind="bad-index"), False),
        (Stall(after_chunks=1, seconds=1), True),
        (Latency(between_s=1), True),
    ],
)
def test_only_faults_that_serve_the_whole_stream_consume_the_interaction(fault: StreamFault, consumes: bool) -> None:
    assert activate(fault).consumes_interaction is consumes


@pytest.mark.parametrize("name", list(STANDARD_FAULTS))
async def test_closing_the_wrapper_closes_the_source(name: str) -> None:
    source = Source(CHUNKS)
    active = activate(STANDARD_FAULTS[name])
    stream = active.wrap(source(), None)
    with contextlib.suppress(LlmError, StopAsyncIteration):
        await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert source.closed or source.pulled == 0


async def test_injection_over_a_scripted_adapter_stream() -> None:
    adapter = ScriptedAdapter([TOOL_TURN])
    active = activate(Disconnect(inside="tool-call"))
    out, error = await drain(active.wrap(adapter.stream(OPTIONS), None))
    assert isinstance(out[-1], ToolCallDelta)
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED


async def test_errors_of_the_source_pass_through() -> None:
    async def broken() -> AsyncIterator[StreamChunk]:
        yield CHUNKS[0]
        raise LlmError("recorded failure", ErrorCode.PROVIDER_HTTP_ERROR, status=502)

    for fault in (Latency(between_s=0), Corrupt(kind="duplicate-finish"), Stall(after_chunks=5, seconds=0)):
        out, error = await drain(activate(fault).wrap(broken(), None))
        assert out == CHUNKS[:1]
        assert error is not None
        assert error.status == 502


# -- property: any fault over any valid stream ---------------------------------------------------

_text = st.text(alphabet="ab cd\n", min_size=0, max_size=30)
_turns = st.builds(
    ScriptedTurn,
    text=_text,
    reasoning=_text,
    tool_calls=st.lists(
        st.builds(
            ScriptedToolCall,
            name=st.sampled_from(["read", "ls"]),
            arguments=st.dictionaries(st.sampled_from(["a", "path"]), st.integers(0, 9), max_size=2),
        ),
        max_size=2,
    ),
    usage=st.none() | st.just(TokenUsage(input_tokens=3, output_tokens=4)),
)
_counts = st.integers(0, 40)
_seconds = st.floats(0, 60, allow_nan=False)
_stream_faults: st.SearchStrategy[StreamFault] = st.one_of(
    st.builds(HttpError, status=st.integers(100, 599), retry_after=st.none() | _seconds),
    st.builds(Disconnect, after_chunks=_counts),
    st.builds(Disconnect, after_s=_seconds),
    st.builds(Disconnect, inside=st.sampled_from(["text", "tool-call", "reasoning"])),
    st.builds(Stall, after_chunks=_counts, seconds=_seconds),
    st.builds(Latency, first_chunk_s=_seconds, between_s=st.floats(0, 1), jitter_s=st.floats(0, 1), seed=st.integers()),
    st.builds(Truncate, after_chunks=_counts),
    st.builds(Corrupt, kind=st.sampled_from(CORRUPT_KINDS), seed=st.integers(0, 2**32)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turn=_turns, faults=st.lists(_stream_faults, min_size=1, max_size=3), args_piece=st.integers(1, 9))
def test_any_fault_over_any_valid_stream_raises_only_documented_codes(
    turn: ScriptedTurn, faults: list[StreamFault], args_piece: int
) -> None:
    chunks = script_chunks(turn, args_piece=args_piece)
    active = FaultPlan(faults).select(OPTIONS)
    assert active is not None

    async def scenario() -> tuple[list[StreamChunk], LlmError | None]:
        try:
            active.before_stream()
        except LlmError as error:
            return [], error
        return await drain(active.wrap(from_list(chunks, between_s=0.01), None))

    loop = looptime.new_event_loop(noop_cycles=0)  # as the marked tests (see the module's docstring)
    try:
        out, error = loop.run_until_complete(scenario())
    finally:
        loop.close()
    if error is not None:
        # The only codes injection raises (CANCELLED when the signal aborts a stall or delay).
        assert error.code in (ErrorCode.PROVIDER_HTTP_ERROR, ErrorCode.STREAM_ABORTED, ErrorCode.CANCELLED)
        assert any(f"{item.fault_id} (seed {item.seed})" in str(error) for item in active.fired)
    if not any(isinstance(fault, Corrupt) for fault in faults):
        # Without Corrupt, the output is a clean prefix of the stream: a validator only misses the end.
        assert out == chunks[: len(out)]
        validator = StreamValidator(require_finish=False)
        for chunk in out:
            validator.feed(chunk)
    if any(isinstance(fault, HttpError) for fault in faults):
        assert out == []
        assert error is not None
        assert error.code is ErrorCode.PROVIDER_HTTP_ERROR
    if isinstance(faults[0], Corrupt) and error is None and len(faults) == 1:
        assert_rejected(out, CORRUPT_RULES[faults[0].kind])


def test_text_delta_and_blocks_sanity() -> None:
    assert isinstance(CHUNKS[0], BlockStart)
    assert any(isinstance(chunk, TextDelta) for chunk in CHUNKS)


@pytest.mark.looptime(noop_cycles=0)
async def test_a_stall_abandoned_by_the_consumer_does_not_consume_the_interaction() -> None:
    served = activate(Stall(after_chunks=1, seconds=30))
    out, _ = await drain(served.wrap(from_list(CHUNKS), None))
    assert out == CHUNKS
    assert served.consumes_interaction

    abandoned = activate(Stall(after_chunks=1, seconds=30))
    assert abandoned.consumes_interaction  # the prediction, before the stream runs
    received: list[StreamChunk] = []
    with pytest.raises(TimeoutError):
        await consume_with_idle_timeout(abandoned.wrap(from_list(CHUNKS), None), 5, received)
    assert len(received) == 1
    assert not abandoned.consumes_interaction


async def test_disconnect_after_bytes_counts_streamed_content() -> None:
    out, error, source = await run_fault(Disconnect(after_bytes=3))
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED
    assert "disconnect-after-3-bytes" in str(error)
    content = "".join(
        c.arguments_delta if isinstance(c, ToolCallDelta) else getattr(c, "text", "")
        for c in out
        if type(c).__name__.endswith("Delta")
    )
    assert len(content.encode()) >= 3
    assert out == CHUNKS[: len(out)]
    assert source.closed


async def test_an_error_mid_stream_raises_the_providers_status_after_the_chunks_and_never_after_the_finish() -> None:
    chunks = text_stream("a", "b", "c")
    for after, delivered in ((1, 1), (2, 2), (100, len(chunks) - 1)):  # a shorter stream: just before its finish
        replay = ReplayAdapter(
            cassette_of(interaction_of(chunks)), faults=[StreamError(after_chunks=after, status=529, message="busy")]
        )
        got, error = await collect_until_error(replay.stream(request_of()))
        assert len(got) == delivered
        assert error is not None
        assert (error.code, error.status, error.recoverable) == (ErrorCode.PROVIDER_HTTP_ERROR, 529, True)
        assert "busy" in error.message
        assert [chunk async for chunk in replay.stream(request_of())] == chunks  # transient: the retry replays it
