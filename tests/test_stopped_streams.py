"""Streams stopped every way a consumer stops them leave nothing behind: no task, no file descriptor, no file."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from chunktape import (
    AbortController,
    Cancelled,
    Cassette,
    ErrorCode,
    LlmAdapter,
    LlmError,
    RecordingAdapter,
    ReplayAdapter,
    StreamChunk,
    Timing,
    load_cassette,
    save_cassette,
)
from helpers import interaction_of, options, text_stream

STREAMS = 1000
BATCH = 50


def _open_files() -> set[tuple[str, str]]:
    """Open descriptors that point at files (fd, target).

    Sockets, pipes and anon inodes are left out on purpose: in a pytest-xdist worker the session-scoped loopback
    servers of other tests close keep-alive sockets from their own thread at any moment, and this test opens
    none, so counting them would only measure that background churn.
    """
    files = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between listdir and readlink
            continue
        if target.startswith("/"):
            files.add((fd, target))
    return files


async def _stop(adapter: LlmAdapter, number: int) -> str:
    """Read a few chunks of one stream, then stop it: ``aclose()``, task cancellation or the abort signal."""
    after = number % 7
    how = ("aclose", "cancel", "abort")[number % 3]
    if how == "aclose":
        stream = adapter.stream(options())
        for _ in range(after):
            await anext(stream)
        await stream.aclose()
    elif how == "cancel":

        async def consume() -> None:
            async for _ in adapter.stream(options()):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.001 * after + 0.0005)  # virtual time: between two chunks
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    else:
        controller = AbortController()
        signalled: AsyncIterator[StreamChunk] = adapter.stream(options(signal=controller.signal))
        for _ in range(after):
            await anext(signalled)
        controller.abort()
        with pytest.raises(LlmError) as caught:
            await anext(signalled)
        assert caught.value.code is ErrorCode.CANCELLED
    return how


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts file descriptors through /proc")
@pytest.mark.looptime
async def test_a_thousand_stopped_streams_leave_no_task_descriptor_or_file(tmp_path: Path) -> None:
    source = tmp_path / "source.msgpack"
    chunks = text_stream(*(f"piece {n} " for n in range(20)))
    save_cassette(Cassette(interactions=[interaction_of(chunks)]), source)
    tasks_before = asyncio.all_tasks()
    files_before = _open_files()

    replay = ReplayAdapter(source, timing=Timing.recorded(), allow_repeats=True)
    recorder = RecordingAdapter(replay, tmp_path / "recorded.msgpack")  # half the streams are recorded too
    stopped: dict[str, int] = {}
    for start in range(0, STREAMS, BATCH):
        hows = await asyncio.gather(
            *(_stop(recorder if number % 2 else replay, number) for number in range(start, start + BATCH))
        )
        for how in hows:
            stopped[how] = stopped.get(how, 0) + 1
    await recorder.aclose()

    assert sum(stopped.values()) == STREAMS
    assert min(stopped.values()) >= STREAMS // 4
    assert asyncio.all_tasks() == tasks_before
    assert _open_files() - files_before == set()
    assert sorted(os.listdir(tmp_path)) == ["recorded.msgpack", "source.msgpack"]  # no journal, no temp file
    recorded = load_cassette(tmp_path / "recorded.msgpack").interactions
    # a stream closed before its first chunk was asked for never started, so it records nothing
    never_started = [n for n in range(1, STREAMS, 2) if n % 3 == 0 and n % 7 == 0]
    assert len(recorded) == STREAMS // 2 - len(never_started)
    assert all(isinstance(item.outcome, Cancelled) for item in recorded)
