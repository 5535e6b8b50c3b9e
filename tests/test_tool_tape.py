"""Tool executions on tape: a recorded agent run keeps each tool execution, a replay answers from it (no tool
called), a verifying replay reports where real tools diverge; the file format stays compatible."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from typer.testing import CliRunner

from chunktape import Timing, use_cassette
from chunktape._cassettes.codec import load_cassette, open_cassette
from chunktape._cassettes.journal import Journal, recover
from chunktape._cassettes.model import Cassette, CassetteMeta, ToolRun
from chunktape._cassettes.redaction import find_secrets, redact
from chunktape._cassettes.store import save_cassette
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import GenerateOptions, LlmAdapter, Message, ToolSpec
from chunktape.cli import app
from chunktape.harness import (
    HarnessEvent,
    Tool,
    ToolDivergenceWarning,
    ToolResultEvent,
    ToolRunner,
    collect,
    run_agent,
)
from chunktape.providers._scripted import ScriptedAdapter, ScriptedToolCall, ScriptedTurn
from helpers import run_pytest

pytest_plugins = ["pytester"]

SPECS = [ToolSpec(name="read_file"), ToolSpec(name="list_files")]
OPTIONS = GenerateOptions(model="m", messages=[Message(role="user", content="What is in src/?")], tools=SPECS)
TURNS = [
    ScriptedTurn(
        text="Let me look.",
        tool_calls=[
            ScriptedToolCall(id="call_1", name="read_file", arguments={"path": "src/a.py"}),
            ScriptedToolCall(id="call_2", name="list_files", arguments={"path": "src/"}),
        ],
    ),
    ScriptedTurn(text="src/ holds a.py and b.py."),
]


class Tools:
    """Real tools that count their calls (a replay must call none)."""

    def __init__(self, listing: list[str] | None = None) -> None:
        self.calls: list[str] = []
        self.listing = listing

    def mapping(self) -> dict[str, Tool]:
        def read_file(path: str) -> str:
            self.calls.append("read_file")
            return f"contents of {path}"

        async def list_files(path: str) -> list[str]:
            self.calls.append("list_files")
            await asyncio.sleep(0.5)
            return self.listing if self.listing is not None else [f"{path}a.py", f"{path}b.py"]

        return {"read_file": read_file, "list_files": list_files}


def live() -> LlmAdapter:
    return ScriptedAdapter(TURNS)


async def _run(adapter: LlmAdapter, runner: ToolRunner) -> list[HarnessEvent]:
    return [event async for event in run_agent(adapter, OPTIONS, runner)]


def _results(events: list[HarnessEvent]) -> list[ToolResultEvent]:
    return [event for event in events if isinstance(event, ToolResultEvent)]


async def _record(path: Path) -> list[HarnessEvent]:
    tools = Tools()
    async with use_cassette(path, live=live, mode="once") as tape:
        events = await _run(tape, tape.tools(tools.mapping()))
    assert tools.calls == ["read_file", "list_files"]
    return events


@pytest.mark.looptime
async def test_a_recorded_agent_run_keeps_each_tool_execution(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    await _record(path)
    runs = load_cassette(path).tool_runs
    assert [(run.name, run.arguments, run.call_id, run.after_interaction) for run in runs] == [
        ("read_file", {"path": "src/a.py"}, "call_1", 0),
        ("list_files", {"path": "src/"}, "call_2", 0),
    ]
    assert runs[0].result == "contents of src/a.py"
    assert runs[0].duration_ns == 0
    assert runs[1].result == ["src/a.py", "src/b.py"]
    assert runs[1].content == '["src/a.py","src/b.py"]'
    assert runs[1].duration_ns == 500_000_000  # virtual time


@pytest.mark.looptime
async def test_replay_answers_from_the_recording_and_calls_no_tool(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "run.msgpack"
    recorded = await _record(path)
    start = asyncio.get_running_loop().time()
    async with use_cassette(path, live=never_live, mode="none") as tape:
        runner = tape.tools()  # no real tools needed at all
        events = await _run(tape, runner)
        tape.assert_all_played()
    assert asyncio.get_running_loop().time() == start  # nothing ran, nothing slept
    assert _results(events) == _results(recorded)
    assert (await collect(_aiter(events))).text == "Let me look.src/ holds a.py and b.py."


async def _aiter(events: list[HarnessEvent]) -> Any:
    for event in events:
        yield event


@pytest.mark.looptime
async def test_recorded_timing_replays_each_tool_run_with_its_recorded_duration(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "run.json"
    await _record(path)
    loop = asyncio.get_running_loop()
    async with use_cassette(path, live=never_live, mode="none", timing=Timing.recorded(speed=2.0)) as tape:
        start = loop.time()
        await _run(tape, tape.tools())
    assert loop.time() - start == pytest.approx(0.25)  # list_files took 0.5 s; the calls of a turn run together


@pytest.mark.looptime
async def test_replay_with_real_tools_passed_still_calls_none(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "run.json"
    await _record(path)
    tools = Tools()
    async with use_cassette(path, live=never_live, mode="once") as tape:
        await _run(tape, tape.tools(tools.mapping()))
    assert tools.calls == []


@pytest.mark.looptime
async def test_a_tool_call_not_on_tape_is_a_mismatch_naming_the_tool_and_arguments(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "run.json"
    await _record(path)
    cassette = load_cassette(path)
    other = msgspec.structs.replace(cassette.tool_runs[1], arguments={"path": "lib/"})
    save_cassette(msgspec.structs.replace(cassette, tool_runs=[cassette.tool_runs[0], other]), path)
    async with use_cassette(path, live=never_live, mode="none") as tape:
        with pytest.raises(LlmError) as caught:
            await _run(tape, tape.tools())
    assert caught.value.code is ErrorCode.CASSETTE_MISMATCH
    assert 'tool call list_files({"path":"src/"}) is not in' in caught.value.message
    assert 'list_files({"path":"lib/"})' in caught.value.message


@pytest.mark.looptime
async def test_unplayed_tool_runs_fail_assert_all_played(tmp_path: Path, never_live: Callable[[], LlmAdapter]) -> None:
    path = tmp_path / "run.json"
    await _record(path)
    cassette = load_cassette(path)
    save_cassette(msgspec.structs.replace(cassette, tool_runs=[*cassette.tool_runs, cassette.tool_runs[0]]), path)
    async with use_cassette(path, live=never_live, mode="none") as tape:
        await _run(tape, tape.tools())
        with pytest.raises(AssertionError, match=r"1 recorded tool run\(s\) .* never played: read_file"):
            tape.assert_all_played()


@pytest.mark.looptime
async def test_verify_runs_real_tools_and_reports_a_divergent_result(
    tmp_path: Path, never_live: Callable[[], LlmAdapter]
) -> None:
    path = tmp_path / "run.json"
    recorded = await _record(path)
    tools = Tools(listing=["src/c.py"])
    async with use_cassette(path, live=never_live, mode="none") as tape:
        with pytest.warns(ToolDivergenceWarning, match="list_files"):
            events = await _run(tape, tape.tools(tools.mapping(), verify=True))
        tape.assert_all_played()
    assert tools.calls == ["read_file", "list_files"]
    [divergence] = tape.tool_divergences
    assert divergence.name == "list_files"
    assert divergence.arguments == {"path": "src/"}
    assert divergence.recorded is not None
    assert divergence.recorded.content == '["src/a.py","src/b.py"]'
    assert divergence.actual.content == '["src/c.py"]'
    # The model got the recorded results, so the replayed model calls that follow still matched.
    assert _results(events) == _results(recorded)


@pytest.mark.looptime
async def test_verify_with_matching_tools_reports_nothing(tmp_path: Path, never_live: Callable[[], LlmAdapter]) -> None:
    path = tmp_path / "run.json"
    await _record(path)
    async with use_cassette(path, live=never_live, mode="none") as tape:
        await _run(tape, tape.tools(Tools().mapping(), verify=True))
    assert tape.tool_divergences == []


async def test_recording_needs_the_real_tools(tmp_path: Path) -> None:
    async with use_cassette(tmp_path / "run.json", live=live, mode="all") as tape:
        with pytest.raises(LlmError) as caught:
            tape.tools()
    assert caught.value.code is ErrorCode.INVALID_CONFIG


@pytest.mark.looptime
async def test_new_episodes_appends_tool_runs_after_their_own_interaction(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    await _record(path)
    tools = Tools()
    question = GenerateOptions(model="m", messages=[Message(role="user", content="And lib/?")], tools=SPECS)
    call = ScriptedToolCall(id="call_3", name="list_files", arguments={"path": "lib/"})
    turns = [ScriptedTurn(tool_calls=[call]), ScriptedTurn(text="lib/ holds a.py.")]
    async with use_cassette(path, live=lambda: ScriptedAdapter(turns), mode="new_episodes") as tape:
        runner = tape.tools(tools.mapping())
        [event async for event in run_agent(tape, OPTIONS, runner)]  # on tape: no tool runs
        [event async for event in run_agent(tape, question, runner)]  # recorded: the tool runs
    assert tools.calls == ["list_files"]
    runs = load_cassette(path).tool_runs
    assert [(run.arguments, run.after_interaction) for run in runs] == [
        ({"path": "src/a.py"}, 0),
        ({"path": "src/"}, 0),
        ({"path": "lib/"}, 2),
    ]


def test_a_cassette_without_tool_runs_loads_and_is_written_as_before(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text('{"version": 1, "meta": {"adapter": "x"}, "interactions": []}\n')
    assert load_cassette(old).tool_runs == []
    assert open_cassette(old).tool_runs == []
    save_cassette(load_cassette(old), tmp_path / "new.json")
    assert "toolRuns" not in (tmp_path / "new.json").read_text()


@pytest.mark.looptime
@pytest.mark.parametrize("first", [".json", ".msgpack"])
async def test_tool_runs_convert_losslessly_between_encodings(tmp_path: Path, first: str) -> None:
    path = tmp_path / f"run{first}"
    await _record(path)
    cassette = load_cassette(path)
    other = tmp_path / ("run.msgpack" if first == ".json" else "run.json")
    save_cassette(cassette, other)
    assert load_cassette(other) == cassette
    assert open_cassette(other).tool_runs == cassette.tool_runs
    assert open_cassette(path).to_cassette() == cassette


KEY = "sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6"


def test_redaction_covers_tool_results_and_arguments(tmp_path: Path) -> None:
    runs = [
        ToolRun(name="env", arguments={"token": KEY}, result={"key": KEY}, content=f'{{"key":"{KEY}"}}'),
    ]
    cassette = Cassette(meta=CassetteMeta(adapter="x"), tool_runs=runs)
    findings = find_secrets(cassette)
    assert findings
    assert all("tool run #0 (env)" in finding for finding in findings)
    cleaned = redact(cassette)
    assert KEY not in msgspec.json.encode(cleaned).decode()
    assert find_secrets(cleaned) == []


async def test_a_recorded_tool_result_holding_a_key_is_never_saved(tmp_path: Path) -> None:
    path = tmp_path / "run.json"

    def read_file(path: str) -> str:
        return f"API_KEY={KEY}"

    tools: dict[str, Tool] = {"read_file": read_file, "list_files": lambda path: []}
    tape = use_cassette(path, live=live, mode="once")
    await _run(tape, tape.tools(tools))
    with pytest.raises(LlmError) as caught:
        await tape.aclose()
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    assert "tool run #0 (read_file)" in caught.value.message
    assert not path.exists()
    assert KEY not in tape.failed_path.read_text()


def test_recover_keeps_journaled_tool_runs(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "run.json.journal", CassetteMeta(adapter="x"), cassette=tmp_path / "run.json")
    run = ToolRun(name="read_file", arguments={"path": "a"}, result="A", content="A", call_id="c1")
    journal.tool(run)
    journal.close(remove=False)
    assert recover(journal.path).tool_runs == [run]


def test_recover_append_keeps_the_tool_runs_of_both(tmp_path: Path) -> None:
    target = tmp_path / "run.json"
    before = ToolRun(name="read_file", arguments={"path": "a"}, content="A", after_interaction=0)
    save_cassette(Cassette(interactions=[], tool_runs=[before]), target)
    journal = Journal(tmp_path / "crashed.journal", CassetteMeta(adapter="x"), cassette=tmp_path / "crashed.json")
    journal.tool(ToolRun(name="list_files", arguments={}, content="[]"))
    journal.close(remove=False)
    result = CliRunner().invoke(app, ["recover", str(journal.path), "-o", str(target), "--append"])
    assert result.exit_code == 0, result.output
    assert [run.name for run in load_cassette(target).tool_runs] == ["read_file", "list_files"]


def _agent_project(pytester: pytest.Pytester) -> None:
    """A project whose live adapter asks for one tool call, add(1, 2), then answers."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(
        """
        import pytest
        from chunktape.providers._scripted import ScriptedAdapter, ScriptedToolCall, ScriptedTurn

        @pytest.fixture
        def tape_live_adapter():
            call = ScriptedToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})
            return lambda: ScriptedAdapter([ScriptedTurn(tool_calls=[call]), ScriptedTurn(text="3")])
        """
    )


def test_the_tape_fixture_offers_tools(pytester: pytest.Pytester) -> None:
    _agent_project(pytester)
    pytester.makepyfile(
        """
        import asyncio
        from chunktape.harness import collect, run_agent
        from chunktape._protocol import GenerateOptions, Message

        CALLS = []

        def add(a, b):
            CALLS.append((a, b))
            return a + b

        def test_agent(tape):
            options = GenerateOptions(model="m", messages=[Message(role="user", content="1+2?")])
            transcript = asyncio.run(collect(run_agent(tape, options, tape.tools({"add": add}))))
            assert transcript.text == "3"
            assert [result.content for result in transcript.tool_results] == ["3"]
            print("CALLS", len(CALLS))
        """
    )
    recorded = run_pytest(pytester, "--tape-mode", "once", "-s")
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["*CALLS 1*"])
    replayed = run_pytest(pytester, "--tape-strict", "-s")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(["*CALLS 0*"])


def test_the_tape_fixture_lists_tool_divergences_in_the_report(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _agent_project(pytester)
    pytester.makepyfile(
        """
        import asyncio, os
        from chunktape.harness import collect, run_agent
        from chunktape._protocol import GenerateOptions, Message

        def add(a, b):
            return a + b + int(os.environ.get("OFF_BY", "0"))

        def test_agent(tape):
            options = GenerateOptions(model="m", messages=[Message(role="user", content="1+2?")])
            asyncio.run(collect(run_agent(tape, options, tape.tools({"add": add}, verify=tape.path.exists()))))
            assert not tape.tool_divergences
        """
    )
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=1)
    monkeypatch.setenv("OFF_BY", "1")
    replayed = run_pytest(pytester, "-W", "default::chunktape.harness.ToolDivergenceWarning")
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(
        [
            "*chunktape: real tools diverged from the recording*",
            """*tool call add({"a":1,"b":2}) diverged from the recording: recorded '3', the real tool returned '4'*""",
        ]
    )
