"""use_cassette and the record modes, with vcrpy's semantics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from chunktape import (
    CassetteSession,
    ErrorCode,
    LlmAdapter,
    LlmError,
    ReasoningOption,
    RecordMode,
    load_cassette,
    use_cassette,
)
from chunktape.providers import ScriptedAdapter, ScriptedTurn
from helpers import PacedAdapter, collect, collect_until_error, options, paced, text_stream


class LiveFactory:
    """Builds a PacedAdapter answering every request with ``reply <content>``; counts how often it is built."""

    def __init__(self) -> None:
        self.built = 0
        self.adapters: list[PacedAdapter] = []

    def __call__(self) -> LlmAdapter:
        self.built += 1
        adapter = PacedAdapter(lambda request: paced(text_stream(f"reply {request.messages[0].content}")))
        self.adapters.append(adapter)
        return adapter


async def _session(path: Path, mode: str, live: Callable[[], LlmAdapter] | None, *questions: str) -> CassetteSession:
    async with use_cassette(path, live=live, mode=mode) as tape:
        for question in questions:
            assert await collect(tape.stream(options(question))) == text_stream(f"reply {question}")
    return tape


def _questions(path: Path) -> list[str | None]:
    return [interaction.request.messages[0].content for interaction in load_cassette(path).interactions]


async def test_none_with_a_missing_file_is_not_found_and_never_builds_live(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "missing.msgpack"
    async with use_cassette(path, live=never_live, mode="none") as tape:
        _, error = await collect_until_error(tape.stream(options()))
    assert error.code is ErrorCode.CASSETTE_NOT_FOUND
    assert str(error) == (
        f'[CASSETTE_NOT_FOUND] {path} does not exist; record it: use_cassette(path, live=..., mode="once")'
    )
    assert not path.exists()


async def test_none_replays_and_a_miss_is_a_mismatch(tmp_path: Path, never_live: Callable[[], LlmAdapter]) -> None:
    path = tmp_path / "c.msgpack"
    await _session(path, "once", LiveFactory(), "a")
    async with use_cassette(path, live=never_live) as tape:
        assert tape.mode is RecordMode.NONE
        assert await collect(tape.stream(options("a"))) == text_stream("reply a")
        _, error = await collect_until_error(tape.stream(options("b")))
    assert error.code is ErrorCode.CASSETTE_MISMATCH
    assert _questions(path) == ["a"]


async def test_once_records_a_missing_cassette_then_only_replays(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "c.json"
    live = LiveFactory()
    tape = await _session(path, "once", live, "a", "b")
    assert live.built == 1
    assert [call.recorded for call in tape.calls] == [True, True]
    assert _questions(path) == ["a", "b"]
    assert tape.cassette == load_cassette(path)

    async with use_cassette(path, live=never_live, mode=RecordMode.ONCE) as replaying:
        assert await collect(replaying.stream(options("b"))) == text_stream("reply b")
        _, error = await collect_until_error(replaying.stream(options("new question")))
    assert error.code is ErrorCode.CASSETTE_MISMATCH
    assert [call.recorded for call in replaying.calls] == [False, False]
    assert _questions(path) == ["a", "b"]


async def test_new_episodes_replays_matches_and_appends_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    await _session(path, "once", LiveFactory(), "a")
    live = LiveFactory()
    tape = await _session(path, "new_episodes", live, "a", "b", "a")
    assert live.built == 1
    assert [call.recorded for call in tape.calls] == [False, True, True]  # a second "a" is a new episode
    assert _questions(path) == ["a", "b", "a"]
    assert [interaction.attempt for interaction in load_cassette(path).interactions] == [1, 1, 2]
    assert tape.cassette == load_cassette(path)


async def test_new_episodes_with_only_hits_never_builds_live(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "c.msgpack"
    await _session(path, "once", LiveFactory(), "a")
    before = path.read_bytes()
    await _session(path, "new_episodes", never_live, "a")
    assert path.read_bytes() == before


async def test_all_always_records_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    await _session(path, "once", LiveFactory(), "a", "b")
    live = LiveFactory()
    tape = await _session(path, "all", live, "c")
    assert live.built == 1
    assert _questions(path) == ["c"]
    assert tape.path == path


async def test_live_is_closed_when_the_session_ends(tmp_path: Path) -> None:
    closed: list[bool] = []

    class Closing(PacedAdapter):
        async def aclose(self) -> None:
            closed.append(True)

    async with use_cassette(tmp_path / "c.msgpack", live=lambda: Closing(paced(text_stream("x"))), mode="all") as t:
        await collect(t.stream(options()))
    assert closed == [True]


async def test_an_unknown_mode_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(LlmError) as caught:
        use_cassette(tmp_path / "c.msgpack", mode="sometimes")
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert "valid modes: none, once, new_episodes, all" in str(caught.value)


async def test_recording_without_a_live_factory_is_a_config_error(tmp_path: Path) -> None:
    async with use_cassette(tmp_path / "c.msgpack", mode="once") as tape:
        _, error = await collect_until_error(tape.stream(options()))
    assert error.code is ErrorCode.INVALID_CONFIG
    assert "live=" in str(error)


async def test_replay_options_reach_the_replayer(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    await _session(path, "once", LiveFactory(), "a")
    async with use_cassette(path, allow_repeats=True) as tape:
        for _ in range(3):
            assert await collect(tape.stream(options("a"))) == text_stream("reply a")
        assert len(tape.calls) == 3
        tape.assert_all_played()


def _record_sync(path: Path, mode: str, live: Callable[[], LlmAdapter], question: str) -> CassetteSession:
    """Stream on one loop, then close where no loop runs: what a sync pytest fixture does around an async test."""
    session = use_cassette(path, live=live, mode=mode)

    async def run() -> None:
        await collect(session.stream(options(question)))

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    return session


def test_close_saves_and_closes_live_without_a_running_loop(tmp_path: Path) -> None:
    closed: list[bool] = []

    class Closing(PacedAdapter):
        async def aclose(self) -> None:
            asyncio.get_running_loop()  # closed on a loop, as an async adapter expects
            closed.append(True)

    path = tmp_path / "c.msgpack"
    session = _record_sync(path, "once", lambda: Closing(paced(text_stream("reply a"))), "a")
    assert session.close() == path
    assert session.close() == path  # once
    assert closed == [True]
    assert _questions(path) == ["a"]
    assert session.written == path


def test_a_failed_recording_is_kept_beside_and_never_replaces_the_cassette(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    _record_sync(path, "once", LiveFactory(), "a").close()
    session = _record_sync(path, "all", LiveFactory(), "b")
    assert session.close(failed=True) == tmp_path / "c.failed.msgpack"
    assert session.failed_path == tmp_path / "c.failed.msgpack"
    assert _questions(path) == ["a"]
    assert _questions(session.failed_path) == ["b"]
    assert not list(tmp_path.glob("*.journal*"))


def test_close_without_a_recording_writes_nothing(tmp_path: Path, never_live: Callable[[], LlmAdapter]) -> None:
    session = use_cassette(tmp_path / "c.msgpack", live=never_live)
    assert session.close(failed=True) is None
    assert list(tmp_path.iterdir()) == []


async def test_close_inside_a_loop_says_to_await_aclose(tmp_path: Path) -> None:
    session = use_cassette(tmp_path / "c.msgpack")
    with pytest.raises(LlmError, match="await aclose"):
        session.close()
    await session.aclose()


async def test_new_episodes_keeps_a_cassette_written_meanwhile_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    mine = use_cassette(path, live=LiveFactory(), mode="new_episodes")  # begins before the file exists
    await _session(path, "new_episodes", LiveFactory(), "theirs")
    async with mine:
        await collect(mine.stream(options("mine")))
    assert _questions(path) == ["theirs", "mine"]


async def test_a_request_recorded_with_a_credential_in_it_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, never_live: Callable[[], LlmAdapter]
) -> None:
    monkeypatch.setenv("ACME_API_KEY", "acme-live-0123456789")
    request = options("please use acme-live-0123456789 for the call")
    path = tmp_path / "c.msgpack"
    async with use_cassette(path, live=lambda: PacedAdapter(paced(text_stream("ok"))), mode="once") as tape:
        recorded = await collect(tape.stream(request))
    assert b"acme-live" not in path.read_bytes()
    async with use_cassette(path, live=never_live, mode="none") as tape:
        assert await collect(tape.stream(request)) == recorded


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"match_on": "bogus"}, "bogus"),
        ({"faults": ["no-such-fault"]}, "no-such-fault"),
        ({"timing": "recorded"}, "timing must be a Timing"),
    ],
)
def test_bad_replay_options_are_refused_even_when_recording(
    tmp_path: Path, option: dict[str, object], message: str
) -> None:
    with pytest.raises(LlmError, match=message) as caught:
        use_cassette(tmp_path / "new.msgpack", live=lambda: PacedAdapter([]), mode="once", **option)  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.INVALID_CONFIG


async def test_a_passing_recording_keeps_an_earlier_failed_recording(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    session = use_cassette(path, live=lambda: PacedAdapter(paced(text_stream("no"))), mode="all")
    await collect(session.stream(options()))
    session.save(failed=True)
    await session.aclose()
    assert session.failed_path.exists()
    again = use_cassette(path, live=lambda: PacedAdapter(paced(text_stream("yes"))), mode="all")
    await collect(again.stream(options()))
    await again.aclose()
    assert path.exists()
    assert again.failed_path.exists()  # it holds what was never saved anywhere else


async def test_reasoning_options_survive_record_and_replay(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    offered = [ReasoningOption(id="thinking", label="Think", default=True), ReasoningOption(id="no-thinking")]
    path = tmp_path / "c.json"
    live = ScriptedAdapter([ScriptedTurn(text="ok")], reasoning_options=offered)
    async with use_cassette(path, live=lambda: live, mode="once") as tape:
        await collect(tape.stream(options(reasoning="thinking")))
        assert list(tape.reasoning_options()) == offered
    async with use_cassette(path, live=never_live, mode="none") as tape:
        assert list(tape.reasoning_options()) == offered
        await collect(tape.stream(options(reasoning="thinking")))


async def test_a_request_recorded_with_an_allowed_credential_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, never_live: Callable[[], LlmAdapter]
) -> None:
    monkeypatch.setenv("MY_API_KEY", "supersecretvalue123")
    request = options("key is supersecretvalue123")
    path = tmp_path / "c.msgpack"
    allowed = ["supersecretvalue123"]
    live = lambda: PacedAdapter(paced(text_stream("ok")))  # noqa: E731
    async with use_cassette(path, live=live, mode="once", allow_secrets=allowed) as tape:
        recorded = await collect(tape.stream(request))
    assert b"supersecretvalue123" in path.read_bytes()  # allowed: kept as recorded
    async with use_cassette(path, live=never_live, mode="none", allow_secrets=allowed) as tape:
        assert await collect(tape.stream(request)) == recorded
