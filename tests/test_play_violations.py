"""``play`` and ``show`` flag a stream that breaks a protocol rule; ``play --instant`` sleeps no fault's stall."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from chunktape import _virtual_time as virtual_time
from chunktape import save_cassette
from chunktape._cassettes.model import Cassette, Completed, Event, Interaction, RecordedRequest
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    CallId,
    Finish,
    FinishReason,
    GenerateOptions,
    Message,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
)
from chunktape.cli._app import app

CALL = CallId("call_1")
TOOL_CALL: list[StreamChunk] = [
    BlockStart(index=0, block_type="text"),
    TextDelta(index=0, text="let me look"),
    BlockEnd(index=0, block=TextBlock(text="let me look")),
    BlockStart(index=1, block_type="tool-call"),
    ToolCallDelta(index=1, id=CALL, name="weather", arguments_delta='{"city": "Oslo"}'),
    BlockEnd(index=1, block=ToolCallBlock(id=CALL, name="weather", arguments='{"city": "Oslo"}')),
    Finish(reason=FinishReason(kind="tool-calls")),
]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


def _cassette(path: Path, *streams: list[StreamChunk]) -> Path:
    interactions = []
    for number, chunks in enumerate(streams):
        options = GenerateOptions(model="m", messages=[Message(role="user", content=f"question {number}")])
        events = [Event(t_ns=(n + 1) * 1_000_000, chunk=chunk) for n, chunk in enumerate(chunks)]
        interactions.append(
            Interaction(
                request=RecordedRequest.from_options(options),
                events=events,
                outcome=Completed(t_ns=(len(chunks) + 1) * 1_000_000),
            )
        )
    save_cassette(Cassette(interactions=interactions), path)
    return path


def test_play_prints_a_deleted_block_end_and_exits_1(runner: CliRunner, tmp_path: Path) -> None:
    broken = [chunk for chunk in TOOL_CALL if not (isinstance(chunk, BlockEnd) and chunk.index == 1)]
    path = _cassette(tmp_path / "broken.msgpack", TOOL_CALL, broken)
    result = runner.invoke(app, ["play", str(path), "--instant"])
    assert result.exit_code == 1, result.output
    assert "PROTOCOL_VIOLATION" in result.stdout
    assert result.stdout.count("PROTOCOL_VIOLATION") == 1  # only the second interaction breaks a rule
    clean = runner.invoke(app, ["play", str(_cassette(tmp_path / "ok.msgpack", TOOL_CALL)), "--instant"])
    assert clean.exit_code == 0, clean.output


def test_show_marks_the_violating_interaction(runner: CliRunner, tmp_path: Path) -> None:
    broken = [chunk for chunk in TOOL_CALL if not (isinstance(chunk, BlockEnd) and chunk.index == 1)]
    result = runner.invoke(app, ["show", str(_cassette(tmp_path / "broken.msgpack", TOOL_CALL, broken))])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "question" in line]
    assert len(rows) == 2
    assert "VIOLATES" not in rows[0]
    assert "VIOLATES block-pairs" in rows[1]


def test_play_instant_runs_a_stall_in_virtual_time(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    original = virtual_time.replay_loop

    def spy(**kwargs: Any) -> virtual_time.VirtualTimeLoop:
        loop = original(**kwargs)
        loops.append(loop)
        return loop

    monkeypatch.setattr(virtual_time, "replay_loop", spy)
    path = _cassette(tmp_path / "ok.msgpack", TOOL_CALL)
    result = runner.invoke(app, ["play", str(path), "--instant", "--fault", "stall-30s"])
    assert result.exit_code == 0, result.output
    assert "stall-30s" in result.stdout
    assert len(loops) == 1
    assert loops[0].time() >= 30.0  # the loop's clock went through the stall: virtual seconds, not wall time
