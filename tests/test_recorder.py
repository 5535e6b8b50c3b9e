"""RecordingAdapter: a tee that records chunks, timing and every way a stream can end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from chunktape import (
    AbortController,
    BlockStart,
    Cancelled,
    CassetteMeta,
    Completed,
    ErrorCode,
    Finish,
    GenerateOptions,
    LlmError,
    Raised,
    RecordedRequest,
    RecordingAdapter,
    ReplayAdapter,
    StreamChunk,
    StreamViolationWarning,
    TextDelta,
    load_cassette,
    recover,
    validate,
)
from chunktape import _abort as abort
from chunktape._cassettes.journal import CrashedJournalWarning, Journal, journal_path
from chunktape.providers import ScriptedAdapter, ScriptedTurn
from helpers import GatedAdapter, PacedAdapter, collect, collect_until_error, options, paced, text_stream, tool_stream

ENCODINGS = ["c.msgpack", "c.json"]


@pytest.mark.looptime
@pytest.mark.parametrize("name", ENCODINGS)
async def test_round_trip_keeps_chunks_and_virtual_timing(tmp_path: Path, name: str) -> None:
    chunks = text_stream("It ", "was ", "a ", "dark ", "night")
    delays = [0.75, 0.01, 0.2, 0.033, 1.5, 0.004, 0.05, 0.0, 0.125]
    inner = PacedAdapter(list(zip(delays, chunks, strict=True)))
    async with RecordingAdapter(inner, tmp_path / name) as recorder:
        assert await collect(recorder.stream(options())) == chunks

    interaction = load_cassette(tmp_path / name).interactions[0]
    expected_ns, elapsed = [], 0.0
    for delay in delays[: len(chunks)]:
        elapsed += delay
        expected_ns.append(round(elapsed * 1e9))
    assert [event.t_ns for event in interaction.events] == pytest.approx(expected_ns, abs=1000)
    assert interaction.outcome == Completed(t_ns=interaction.events[-1].t_ns)
    assert await collect(ReplayAdapter(tmp_path / name).stream(options())) == chunks


async def test_round_trip_with_a_tool_call_split_anywhere(tmp_path: Path) -> None:
    chunks = tool_stream("search", '{"q', 'uery": "ch', 'unk"', ", ", '"limit": 3}')
    async with RecordingAdapter(PacedAdapter(paced(chunks)), tmp_path / "t.json") as recorder:
        await collect(recorder.stream(options()))
    replayed = await collect(ReplayAdapter(tmp_path / "t.json").stream(options()))
    assert replayed == chunks
    validate(replayed)


async def test_chunks_reach_the_consumer_as_they_arrive(tmp_path: Path) -> None:
    chunks = text_stream("first", " second")
    inner = GatedAdapter(chunks)
    async with RecordingAdapter(inner, tmp_path / "c.msgpack") as recorder:
        stream = recorder.stream(options())
        first = await asyncio.wait_for(anext(stream), timeout=5)
        assert first == chunks[0]
        assert not inner.release.is_set()  # the inner stream is still blocked: nothing was buffered
        inner.release.set()
        assert [first, *await collect(stream)] == chunks


# -- every way a stream ends -----------------------------------------------------------------------


async def _record(tmp_path: Path, inner: PacedAdapter, consume: int | None = None) -> list[object]:
    got: list[object] = []
    async with (
        RecordingAdapter(inner, tmp_path / "c.msgpack") as recorder,
        contextlib.aclosing(recorder.stream(options())) as stream,
    ):
        async for chunk in stream:
            got.append(chunk)
            if consume is not None and len(got) == consume:
                break  # aclosing() then calls stream.aclose()
    return got


async def test_normal_end_is_completed(tmp_path: Path) -> None:
    await _record(tmp_path, PacedAdapter(paced(text_stream("a", "b"))))
    assert isinstance(load_cassette(tmp_path / "c.msgpack").interactions[0].outcome, Completed)


async def test_llm_error_mid_stream_is_recorded_reraised_unchanged_and_replayed(tmp_path: Path) -> None:
    chunks = text_stream("a", "b")[:3]
    error = LlmError("rate limited", ErrorCode.PROVIDER_HTTP_ERROR, status=429, retry_after=2.5)
    with pytest.raises(LlmError) as caught:
        await _record(tmp_path, PacedAdapter(paced(chunks), error=error))
    assert caught.value is error

    interaction = load_cassette(tmp_path / "c.msgpack").interactions[0]
    assert interaction.outcome == Raised(
        t_ns=interaction.outcome.t_ns, code="PROVIDER_HTTP_ERROR", message="rate limited", status=429, retry_after=2.5
    )
    got, replayed = await collect_until_error(ReplayAdapter(tmp_path / "c.msgpack").stream(options()))
    assert got == chunks
    assert (replayed.code, replayed.message, replayed.status, replayed.retry_after) == (
        ErrorCode.PROVIDER_HTTP_ERROR,
        "rate limited",
        429,
        2.5,
    )


async def test_other_exceptions_are_recorded_as_invalid_response_and_reraised(tmp_path: Path) -> None:
    chunks = text_stream("a")[:2]
    with pytest.raises(ValueError, match="bad frame"):
        await _record(tmp_path, PacedAdapter(paced(chunks), error=ValueError("bad frame")))
    outcome = load_cassette(tmp_path / "c.msgpack").interactions[0].outcome
    assert isinstance(outcome, Raised)
    assert outcome.code == "INVALID_RESPONSE"
    assert outcome.message == "ValueError: bad frame"
    assert outcome.exception_type == "builtins.ValueError"
    with pytest.raises(LlmError) as replayed:
        await collect(ReplayAdapter(tmp_path / "c.msgpack").stream(options()))
    assert replayed.value.code is ErrorCode.INVALID_RESPONSE


async def _assert_cut_short(path: Path, count: int, reason: str) -> None:
    interaction = load_cassette(path).interactions[0]
    assert isinstance(interaction.outcome, Cancelled)
    assert interaction.outcome.reason == reason
    assert len(interaction.events) == count
    replayed, error = await collect_until_error(ReplayAdapter(path).stream(options()))
    assert replayed == [event.chunk for event in interaction.events]
    assert error.code is ErrorCode.CASSETTE_EXHAUSTED


async def test_aclose_after_k_chunks_is_cancelled(tmp_path: Path) -> None:
    inner = PacedAdapter(paced(text_stream("a", "b", "c")))
    assert len(await _record(tmp_path, inner, consume=3)) == 3
    assert inner.closed == 1  # the inner stream was closed too
    await _assert_cut_short(tmp_path / "c.msgpack", 3, "consumer closed the stream")


@pytest.mark.looptime
async def test_task_cancellation_is_cancelled(tmp_path: Path) -> None:
    chunks = text_stream("a", "b", "c")
    inner = PacedAdapter([(0.1, chunks[0]), (0.1, chunks[1]), (60.0, chunks[2])])
    received: list[object] = []
    async with RecordingAdapter(inner, tmp_path / "c.msgpack") as recorder:

        async def consume() -> None:
            async for chunk in recorder.stream(options()):
                received.append(chunk)

        task = asyncio.create_task(consume())
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(received) == 2
    await _assert_cut_short(tmp_path / "c.msgpack", 2, "task cancelled")


class _OpenAfterFinish(PacedAdapter):
    """A provider that sends the whole stream, finish included, and then keeps the connection open."""

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        async for chunk in super().stream(options):
            yield chunk
        await abort.sleep(3600, options.signal)


@pytest.mark.looptime
@pytest.mark.parametrize("stop", ["task cancelled", "abort signal"])
async def test_a_stop_after_the_finish_chunk_is_complete(tmp_path: Path, stop: str) -> None:
    """An agent cancelled (its timeout, its task group) or aborted once it has the finish chunk got the whole
    stream: the recording is complete, as one that closes the stream there is."""
    chunks = text_stream("a", "b")
    controller = AbortController()
    async with RecordingAdapter(_OpenAfterFinish(paced(chunks, gap=0.1)), tmp_path / "c.msgpack") as recorder:

        async def consume() -> None:
            async for _ in recorder.stream(options(signal=controller.signal)):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(1.0)
        if stop == "task cancelled":
            task.cancel()
        else:
            controller.abort("user pressed stop")
        with pytest.raises((asyncio.CancelledError, LlmError)):
            await task
    (interaction,) = load_cassette(tmp_path / "c.msgpack").interactions
    assert type(interaction.outcome) is Completed
    assert [event.chunk for event in interaction.events] == chunks
    assert await collect(ReplayAdapter(tmp_path / "c.msgpack").stream(options())) == chunks


@pytest.mark.looptime
async def test_abort_signal_is_cancelled(tmp_path: Path) -> None:
    chunks = text_stream("a", "b", "c")
    inner = PacedAdapter([(0.1, chunks[0]), (60.0, chunks[1])])
    controller = AbortController()
    asyncio.get_running_loop().call_later(1.0, controller.abort, "user pressed stop")
    async with RecordingAdapter(inner, tmp_path / "c.msgpack") as recorder:
        with pytest.raises(LlmError) as caught:
            await collect(recorder.stream(options(signal=controller.signal)))
    assert caught.value.code is ErrorCode.CANCELLED
    await _assert_cut_short(tmp_path / "c.msgpack", 1, "abort signal")


# -- concurrency -------------------------------------------------------------------------------------


def _per_request(request: object) -> list[tuple[float, object]]:
    number = int(request.messages[0].content)  # type: ignore[attr-defined]
    chunks = text_stream(*(f"{number}:{piece} " for piece in range(6)))
    return [(((number * 7 + position) % 5) * 0.01, chunk) for position, chunk in enumerate(chunks)]


@pytest.mark.looptime
async def test_fifty_concurrent_streams_record_separately_and_replay_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "many.msgpack"
    async with RecordingAdapter(PacedAdapter(_per_request), path) as recorder:  # type: ignore[arg-type]
        results = await asyncio.gather(*(collect(recorder.stream(options(str(n)))) for n in range(50)))

    interactions = load_cassette(path).interactions
    assert len(interactions) == 50
    for number, interaction in enumerate(interactions):
        assert interaction.request.messages[0].content == str(number)
        assert interaction.chunks == results[number]
        assert all(f"{number}:" in chunk.text for chunk in interaction.chunks if isinstance(chunk, TextDelta))
        validate(interaction.chunks)

    replay = ReplayAdapter(path)
    order = list(reversed(range(50)))
    replayed = await asyncio.gather(*(collect(replay.stream(options(str(n)))) for n in order))
    assert [replayed[order.index(n)] for n in range(50)] == results
    replay.assert_all_played()


async def test_identical_concurrent_requests_get_attempt_numbers(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    async with RecordingAdapter(PacedAdapter(paced(text_stream("x"))), path) as recorder:
        await asyncio.gather(*(collect(recorder.stream(options())) for _ in range(3)))
        await collect(recorder.stream(options("other")))
    assert [interaction.attempt for interaction in load_cassette(path).interactions] == [1, 2, 3, 1]


# -- validation ----------------------------------------------------------------------------------------


async def test_protocol_violations_are_recorded_faithfully_with_a_warning(tmp_path: Path) -> None:
    broken = [TextDelta(index=0, text="no block-start"), *text_stream("ok")]
    with pytest.warns(StreamViolationWarning, match="block-pairs"):
        await _record(tmp_path, PacedAdapter(paced(broken)))
    assert await collect(ReplayAdapter(tmp_path / "c.msgpack").stream(options())) == broken


async def test_validate_false_records_without_warning(tmp_path: Path) -> None:
    broken = [BlockStart(index=3, block_type="text")]
    async with RecordingAdapter(PacedAdapter(paced(broken)), tmp_path / "c.msgpack", validate=False) as recorder:
        assert await collect(recorder.stream(options())) == broken


# -- files ---------------------------------------------------------------------------------------------


async def test_journal_is_removed_after_save_and_nothing_written_without_calls(tmp_path: Path) -> None:
    async with RecordingAdapter(PacedAdapter(paced(text_stream("a"))), tmp_path / "c.msgpack") as recorder:
        await collect(recorder.stream(options()))
        assert journal_path(tmp_path / "c.msgpack").exists()
    assert os.listdir(tmp_path) == ["c.msgpack"]

    async with RecordingAdapter(PacedAdapter([]), tmp_path / "empty.msgpack"):
        pass
    assert not (tmp_path / "empty.msgpack").exists()


async def test_stream_after_close_is_an_error(tmp_path: Path) -> None:
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("a"))), tmp_path / "c.msgpack")
    await recorder.aclose()
    await recorder.aclose()
    with pytest.raises(LlmError) as caught:
        await collect(recorder.stream(options()))
    assert caught.value.code is ErrorCode.INVALID_CONFIG


async def test_scripted_retry_sequence_records_attempts(tmp_path: Path) -> None:
    from chunktape.providers import ScriptedError

    turns = [ScriptedTurn(error=ScriptedError(status=429, retry_after=1.0)), ScriptedTurn(text="done")]
    path = tmp_path / "retry.json"
    async with RecordingAdapter(ScriptedAdapter(turns), path) as recorder:
        with pytest.raises(LlmError):
            await collect(recorder.stream(options()))
        await collect(recorder.stream(options()))
    first, second = load_cassette(path).interactions
    assert (first.attempt, second.attempt) == (1, 2)
    assert isinstance(first.outcome, Raised)
    assert first.outcome.status == 429


_CRASH_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {tests!r})
    from helpers import PacedAdapter, options, text_stream
    from chunktape import RecordingAdapter

    async def main():
        chunks = text_stream(*[f"piece {{n}} " for n in range({count})])
        steps = [(0.0, chunk) for chunk in chunks[: {count} + 1]] + [(3600.0, chunks[-1])]
        recorder = RecordingAdapter(PacedAdapter(steps), {path!r})
        received = 0
        async for chunk in recorder.stream(options()):
            received += 1
            if received == {count} + 1:
                print("received", received, flush=True)

    asyncio.run(main())
    """
)


def test_a_sigkilled_recording_loses_no_received_event(tmp_path: Path) -> None:
    path = tmp_path / "crash.msgpack"
    count = 40
    script = _CRASH_SCRIPT.format(tests=str(Path(__file__).parent), count=count, path=str(path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env) as process:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == f"received {count + 1}".encode()
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert not path.exists()

    cassette = recover(journal_path(path))
    (interaction,) = cassette.interactions
    assert len(interaction.events) == count + 1  # block-start and every delta
    assert interaction.chunks == text_stream(*[f"piece {n} " for n in range(count)])[: count + 1]
    assert isinstance(interaction.outcome, Cancelled)

    # The next recording of the same cassette must not wipe what the crashed one left (it used to truncate it).
    async def record_again() -> None:
        async with RecordingAdapter(PacedAdapter(paced(text_stream("again"))), path) as recorder:
            await collect(recorder.stream(options("again")))

    with pytest.warns(CrashedJournalWarning, match="chunktape recover"):
        asyncio.run(record_again())
    (aside,) = tmp_path.glob("crash.msgpack.journal.crashed-*")
    assert recover(aside) == cassette
    assert load_cassette(path).interactions[0].chunks == text_stream("again")
    assert not journal_path(path).exists()


def test_a_new_recorder_moves_a_crashed_journal_aside_instead_of_wiping_it(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    crashed = Journal(journal_path(path), CassetteMeta(adapter="crashed"))
    crashed.begin(0, RecordedRequest.from_options(options("before the crash")), None, 1)
    for position, chunk in enumerate(text_stream("lost", "?")[:3]):
        crashed.event(0, position, chunk)
    crashed.close(remove=False)  # the lock is dropped as if the process had died; nobody recovered it
    expected = recover(journal_path(path))
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("new"))), path)

    with pytest.warns(CrashedJournalWarning) as caught:
        asyncio.run(collect(recorder.stream(options("after"))))
    (aside,) = tmp_path.glob("c.json.journal.crashed-*")
    assert f"chunktape recover {aside}" in str(caught[0].message)
    assert recorder.journal_path == journal_path(path)  # the usual name, started afresh
    assert recover(aside) == expected
    assert recover(aside).interactions[0].request.messages[0].content == "before the crash"
    asyncio.run(recorder.aclose())
    assert load_cassette(path).interactions[0].chunks == text_stream("new")
    assert sorted(os.listdir(tmp_path)) == sorted(["c.json", aside.name])


async def test_two_live_recorders_of_one_cassette_get_separate_journals(tmp_path: Path) -> None:
    path = tmp_path / "shared.msgpack"
    first = RecordingAdapter(PacedAdapter(paced(text_stream("one"))), path)
    second = RecordingAdapter(PacedAdapter(paced(text_stream("two"))), path)
    await collect(first.stream(options("1")))
    await collect(second.stream(options("2")))
    assert first.journal_path != second.journal_path
    assert recover(first.journal_path).interactions[0].chunks == text_stream("one")
    assert recover(second.journal_path).interactions[0].chunks == text_stream("two")
    await first.aclose()
    await second.aclose()
    assert os.listdir(tmp_path) == ["shared.msgpack"]


async def test_an_adapter_failing_before_its_generator_starts_is_recorded(tmp_path: Path) -> None:
    class Refusing(PacedAdapter):
        def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
            raise LlmError("no such model", ErrorCode.UNSUPPORTED_OPTION)

    async with RecordingAdapter(Refusing([]), tmp_path / "c.msgpack") as recorder:
        with pytest.raises(LlmError):
            await collect(recorder.stream(options()))
    outcome = load_cassette(tmp_path / "c.msgpack").interactions[0].outcome
    assert isinstance(outcome, Raised)
    assert outcome.code == "UNSUPPORTED_OPTION"


async def test_the_request_is_recorded_as_it_was_sent(tmp_path: Path) -> None:
    from chunktape import Message

    messages = [Message(role="user", content="first")]
    async with RecordingAdapter(PacedAdapter(paced(text_stream("a"))), tmp_path / "c.msgpack") as recorder:
        await collect(recorder.stream(GenerateOptions(model="m", messages=messages)))
        messages.append(Message(role="assistant", content="a"))  # agents grow the list they passed in
    (interaction,) = load_cassette(tmp_path / "c.msgpack").interactions
    assert [message.content for message in interaction.request.messages] == ["first"]


# -- a consumer that stops at finish, and a consumer that is slow ----------------------------------


async def test_a_consumer_stopping_at_finish_records_a_complete_stream(tmp_path: Path) -> None:
    chunks = text_stream("a", "b")
    path = tmp_path / "c.msgpack"
    async with RecordingAdapter(PacedAdapter(paced(chunks)), path) as recorder:
        async for chunk in recorder.stream(options()):
            if isinstance(chunk, Finish):
                break  # the async for's aclose() lands on the finish chunk's yield
    (interaction,) = load_cassette(path).interactions
    assert isinstance(interaction.outcome, Completed)
    assert await collect(ReplayAdapter(path).stream(options())) == chunks


@pytest.mark.looptime
async def test_recorded_gaps_count_the_provider_not_the_consumer(tmp_path: Path) -> None:
    chunks = text_stream("a", "b", "c")
    path = tmp_path / "c.msgpack"
    async with RecordingAdapter(PacedAdapter(paced(chunks, gap=0.01)), path) as recorder:
        async for _ in recorder.stream(options()):
            await asyncio.sleep(0.5)  # a slow consumer: replaying to it will be slow again by itself
    offsets = [event.t_ns for event in load_cassette(path).interactions[0].events]
    assert offsets == pytest.approx([10_000_000 * (n + 1) for n in range(len(chunks))], abs=1000)


async def test_an_extra_field_that_cannot_be_recorded_is_an_unsupported_option(tmp_path: Path) -> None:
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("x"))), tmp_path / "c.msgpack")
    with pytest.raises(LlmError, match=r"extra field\(s\) \['handle'\] cannot be recorded") as caught:
        await collect(recorder.stream(options(extra={"handle": object(), "fine": 1})))
    assert caught.value.code is ErrorCode.UNSUPPORTED_OPTION
    await recorder.aclose()
