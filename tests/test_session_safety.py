"""Recording sessions never lose a recording: secret hits, failed runs, writers sharing a cassette (library face)."""

from __future__ import annotations

import asyncio
import stat
from pathlib import Path

import pytest

from chunktape import (
    CassetteSession,
    Completed,
    ErrorCode,
    LlmError,
    RecordingAdapter,
    ReplayAdapter,
    load_cassette,
    use_cassette,
)
from chunktape._recorder import RUN_TAG
from helpers import PacedAdapter, collect, collect_until_error, options, paced, text_stream

KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"


def _echo() -> PacedAdapter:
    return PacedAdapter(lambda request: paced(text_stream(f"reply {request.messages[0].content}")))


def _leaky() -> PacedAdapter:
    """A provider that echoes a key-shaped value in its reply."""
    return PacedAdapter(paced(text_stream("your key is ", KEY[:10], KEY[10:], ".")))


def _down() -> PacedAdapter:
    refused = LlmError("paced: could not connect to http://127.0.0.1:9/ (ConnectError)", ErrorCode.STREAM_ABORTED)
    return PacedAdapter([], error=refused)


def _questions(path: Path) -> list[str | None]:
    return [interaction.request.messages[0].content for interaction in load_cassette(path).interactions]


def _kept_private_and_clean(failed: Path) -> None:
    assert stat.S_IMODE(failed.stat().st_mode) == 0o600
    assert KEY.encode() not in failed.read_bytes()
    assert "[REDACTED]" in "".join(getattr(c, "text", "") for c in load_cassette(failed).interactions[0].chunks)


async def test_a_secret_in_the_reply_keeps_the_recording_redacted_and_says_how_to_accept_it(tmp_path: Path) -> None:
    path = tmp_path / "leak.msgpack"
    session = use_cassette(path, live=_leaky, mode="once")
    assert len(await collect(session.stream(options("key?")))) == len(text_stream("a", "b", "c", "."))
    with pytest.raises(LlmError) as caught:
        await session.aclose()
    error = caught.value
    failed = tmp_path / "leak.failed.msgpack"
    assert error.code is ErrorCode.SECRET_DETECTED
    assert not path.exists()
    assert not (tmp_path / "leak.msgpack.journal").exists()  # it held the key in clear
    _kept_private_and_clean(failed)
    text = str(error)
    assert KEY not in text
    assert "sk-p…(" in text  # masked
    assert f"kept in {failed} with every credential replaced by [REDACTED] (mode 0600)" in text
    assert "pass its value in allow_secrets=[...] and record again" in text
    assert session.written == failed

    # The second way out the message gives is doable: the redacted recording replays as the cassette.
    assert f"mv {failed} {path}" in text
    failed.rename(path)
    replayed = await collect(ReplayAdapter(path).stream(options("key?")))
    assert "".join(getattr(c, "text", "") for c in replayed) == "your key is [REDACTED]."


async def test_allow_secrets_accepts_a_value_that_only_looks_like_a_key(tmp_path: Path) -> None:
    path = tmp_path / "leak.msgpack"
    async with use_cassette(path, live=_leaky, mode="once", allow_secrets=[KEY]) as session:
        await collect(session.stream(options("key?")))
    assert KEY.encode() in path.read_bytes()
    assert not (tmp_path / "leak.failed.msgpack").exists()


async def test_a_secret_in_the_request_is_kept_too_but_only_re_recording_can_accept_it(tmp_path: Path) -> None:
    path = tmp_path / "prompt.json"
    recorder = RecordingAdapter(_echo(), path)
    await collect(recorder.stream(options(f"use {KEY}")))
    with pytest.raises(LlmError) as caught:
        recorder.save()
    failed = tmp_path / "prompt.failed.json"
    assert stat.S_IMODE(failed.stat().st_mode) == 0o600
    assert KEY not in failed.read_text()
    assert load_cassette(failed).interactions[0].request.messages[0].content == "use [REDACTED]"
    # The redacted request would not match the live one on replay, so moving it into place is not offered.
    assert "mv " not in str(caught.value)
    assert "allow_secrets" in str(caught.value)


async def test_a_session_in_which_every_call_raised_writes_no_cassette(tmp_path: Path) -> None:
    path = tmp_path / "down.msgpack"
    async with use_cassette(path, live=_down, mode="once") as session:
        _, error = await collect_until_error(session.stream(options("hi")))
        assert error.code is ErrorCode.STREAM_ABORTED
    assert not path.exists()
    assert session.written == tmp_path / "down.failed.msgpack"
    assert load_cassette(session.written).interactions[0].outcome.code == "STREAM_ABORTED"  # type: ignore[union-attr]
    # The next run records again instead of replaying the failure for ever.
    again = await _record(path, "once", "hi")
    await again.aclose()
    assert again.written == path
    assert _questions(path) == ["hi"]
    assert (tmp_path / "down.failed.msgpack").exists()  # a failed recording is never removed for you


def test_a_deliberate_recording_of_an_error_is_kept_with_failed_false(tmp_path: Path) -> None:
    path = tmp_path / "error.msgpack"
    session = use_cassette(path, live=_down, mode="once")

    async def call() -> None:
        await collect_until_error(session.stream(options("hi")))

    asyncio.run(call())
    assert session.close(failed=False) == path
    assert load_cassette(path).interactions[0].outcome.code == "STREAM_ABORTED"  # type: ignore[union-attr]


async def test_leaving_async_with_on_an_exception_keeps_the_recording_aside(tmp_path: Path) -> None:
    path = tmp_path / "broken.msgpack"
    with pytest.raises(RuntimeError):
        async with use_cassette(path, live=_echo, mode="once") as session:
            await collect(session.stream(options("hi")))
            raise RuntimeError("the agent broke")
    assert not path.exists()
    assert _questions(tmp_path / "broken.failed.msgpack") == ["hi"]


async def _record(path: Path, mode: str, question: str, run_id: str | None = None) -> CassetteSession:
    session = use_cassette(path, live=_echo, mode=mode, run_id=run_id)
    await collect(session.stream(options(question)))
    return session


async def test_once_adds_to_a_cassette_another_writer_created_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "shared.msgpack"
    # Both decide to record (the file does not exist yet), then save one after the other, as xdist workers do.
    first, second = await _record(path, "once", "a"), await _record(path, "once", "b")
    await first.aclose()
    await second.aclose()
    assert _questions(path) == ["a", "b"]
    assert second.cassette.interactions == load_cassette(path).interactions
    async with use_cassette(path, mode="none") as replay:
        for question in ("a", "b"):
            assert await collect(replay.stream(options(question))) == text_stream(f"reply {question}")


async def test_all_replaces_once_per_run_and_keeps_the_runs_union(tmp_path: Path) -> None:
    path = tmp_path / "shared.msgpack"
    await (await _record(path, "all", "stale")).aclose()
    writers = [await _record(path, "all", question, run_id="run-1") for question in ("a", "b", "c")]
    for writer in writers:
        await writer.aclose()
    assert _questions(path) == ["a", "b", "c"]  # the stale recording went, none of this run's did
    assert load_cassette(path).meta.tags[RUN_TAG] == "run-1"
    assert all(type(item.outcome) is Completed for item in load_cassette(path).interactions)

    await (await _record(path, "all", "d", run_id="run-2")).aclose()
    assert _questions(path) == ["d"]  # a new run re-records from scratch
    await (await _record(path, "all", "e")).aclose()
    assert _questions(path) == ["e"]  # without a run id: replace, as before
    assert RUN_TAG not in load_cassette(path).meta.tags


async def test_all_replaces_an_unreadable_cassette_of_an_earlier_run(tmp_path: Path) -> None:
    path = tmp_path / "broken.msgpack"
    path.write_bytes(b"not a cassette")
    await (await _record(path, "all", "a", run_id="run-1")).aclose()
    assert _questions(path) == ["a"]
