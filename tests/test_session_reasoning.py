"""``use_cassette``'s session checks a call's reasoning effort before routing it, as the service would:
against the recorded adapter's list when replaying, the live adapter's when recording."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from chunktape import use_cassette
from chunktape._cassettes.codec import load_cassette
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import GenerateOptions, LlmAdapter, Message, ReasoningOption
from chunktape.providers._scripted import ScriptedAdapter, ScriptedTurn
from helpers import collect

OFFERED = [
    ReasoningOption(id="off", label="No thinking"),
    ReasoningOption(id="high", label="Think hard", default=True),
]


def ask(reasoning: str | None) -> GenerateOptions:
    return GenerateOptions(model="m", messages=[Message(role="user", content="hi")], reasoning=reasoning)


async def _record(path: Path, offered: list[ReasoningOption], reasoning: str | None) -> None:
    live = ScriptedAdapter([ScriptedTurn(text="ok")], reasoning_options=offered)
    async with use_cassette(path, live=lambda: live, mode="all") as tape:
        await collect(tape.stream(ask(reasoning)))


@pytest.mark.parametrize("suffix", [".json", ".msgpack"])
async def test_the_offered_list_with_its_off_id_travels_unchanged(
    tmp_path: Path, suffix: str, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / f"c{suffix}"
    await _record(path, OFFERED, "off")
    assert load_cassette(path).meta.reasoning_options == OFFERED
    async with use_cassette(path, live=never_live, mode="none") as tape:
        assert list(tape.reasoning_options()) == OFFERED
        await collect(tape.stream(ask("off")))


async def test_replay_rejects_an_effort_the_recorded_adapter_does_not_offer(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "c.json"
    await _record(path, OFFERED, "high")
    async with use_cassette(path, live=never_live, mode="none", match_on=("model",)) as tape:
        with pytest.raises(LlmError) as caught:
            await collect(tape.stream(ask("max")))
        assert caught.value.code is ErrorCode.UNSUPPORTED_OPTION
        assert "'max'" in caught.value.message
        assert tape.calls == []  # rejected before routing: nothing was played
        assert tape.miss is None
        await collect(tape.stream(ask("high")))  # the recording is still there to play


async def test_replay_of_an_adapter_that_offers_none_takes_none(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "c.json"
    await _record(path, [], None)
    async with use_cassette(path, live=never_live, mode="none", match_on=("model",)) as tape:
        with pytest.raises(LlmError) as caught:
            await collect(tape.stream(ask("high")))
        assert caught.value.code is ErrorCode.UNSUPPORTED_OPTION
        await collect(tape.stream(ask(None)))  # the model's default always passes


async def test_recording_rejects_an_effort_the_live_adapter_does_not_offer(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    live = ScriptedAdapter([ScriptedTurn(text="ok")], reasoning_options=OFFERED)
    async with use_cassette(path, live=lambda: live, mode="all") as tape:
        with pytest.raises(LlmError) as caught:
            await collect(tape.stream(ask("max")))
        assert caught.value.code is ErrorCode.UNSUPPORTED_OPTION
        assert tape.calls == []
    assert not path.exists()  # nothing was sent, so nothing was recorded
