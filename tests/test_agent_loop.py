"""The agent loop: tools run, results fed back, record and replay, cancellation, metrics, the reasoning check."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from chunktape import RecordingAdapter, ReplayAdapter, Timing
from chunktape._abort import AbortController
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    Finish,
    FinishReason,
    GenerateOptions,
    LlmAdapter,
    Message,
    ReasoningOption,
    StreamChunk,
    TokenUsage,
    ToolSpec,
)
from chunktape.cli._demo_loop import demo_agent
from chunktape.harness import (
    DoneEvent,
    ErrorEvent,
    HarnessEvent,
    RetryPolicy,
    StreamMetrics,
    TextEvent,
    Tool,
    ToolCallEvent,
    ToolResultEvent,
    ToolRunner,
    TurnEvent,
    collect,
    run_agent,
)
from chunktape.providers._demo import DEMO_AGENT_TURNS, DEMO_FILES, demo_adapter
from chunktape.providers._scripted import ScriptedAdapter, ScriptedError, ScriptedToolCall, ScriptedTurn

SPECS = [ToolSpec(name="read_file"), ToolSpec(name="list_files")]
OPTIONS = GenerateOptions(model="m", messages=[Message(role="user", content="What is in src/?")], tools=SPECS)

TWO_TOOLS = ScriptedTurn(
    text="Let me look.",
    tool_calls=[
        ScriptedToolCall(id="call_1", name="read_file", arguments={"path": "src/a.py"}),
        ScriptedToolCall(id="call_2", name="list_files", arguments={"path": "src/"}),
    ],
)
ANSWER = ScriptedTurn(text="src/ holds a.py.")


def _files() -> dict[str, Tool]:
    def read_file(path: str) -> str:
        return f"contents of {path}"

    async def list_files(path: str) -> list[str]:
        await asyncio.sleep(0.5)
        return [f"{path}a.py", f"{path}b.py"]

    return {"read_file": read_file, "list_files": list_files}


async def _events(
    adapter: LlmAdapter,
    tools: Mapping[str, Tool] | ToolRunner,
    options: GenerateOptions = OPTIONS,
    **kwargs: Any,
) -> list[HarnessEvent]:
    return [event async for event in run_agent(adapter, options, tools, **kwargs)]


def _comparable(events: Sequence[HarnessEvent]) -> list[Any]:
    """Events without their metrics (floats of loop time) and errors (compared by code)."""
    out: list[Any] = []
    for event in events:
        match event:
            case DoneEvent():
                out.append(("done", event.reason, event.usage, event.finish, event.error and event.error.code))
            case TurnEvent():
                out.append(("turn", event.turn, event.done.reason, event.done.usage))
            case ErrorEvent():
                out.append(("error", event.error.code, event.will_retry, event.attempt))
            case _:
                out.append(event)
    return out


def _done(events: Sequence[HarnessEvent]) -> DoneEvent:
    last = events[-1]
    assert isinstance(last, DoneEvent)
    assert sum(isinstance(event, DoneEvent) for event in events) == 1
    return last


def _of(kind: type[Any], events: Sequence[HarnessEvent]) -> list[Any]:
    return [event for event in events if isinstance(event, kind)]


# -- the loop ----------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_a_two_tool_run_records_and_replays_with_identical_events(tmp_path: Path) -> None:
    path = tmp_path / "agent.msgpack"
    live = ScriptedAdapter([TWO_TOOLS, ANSWER], first_chunk_s=0.2, between_s=0.01)
    async with RecordingAdapter(live, path) as recorder:
        recorded = await _events(recorder, _files())
    replay = ReplayAdapter(path, timing=Timing.recorded())
    replayed = await _events(replay, _files())

    assert _comparable(replayed) == _comparable(recorded)
    replay.assert_all_played()
    assert [type(event).__name__ for event in recorded if not isinstance(event, TextEvent)] == [
        "ToolCallEvent",
        "ToolCallEvent",
        "TurnEvent",
        "ToolResultEvent",
        "ToolResultEvent",
        "TurnEvent",
        "DoneEvent",
    ]
    results = _of(ToolResultEvent, recorded)
    assert [(r.tool_call_id, r.name, r.is_error) for r in results] == [
        ("call_1", "read_file", False),
        ("call_2", "list_files", False),
    ]
    assert results[1].result == ["src/a.py", "src/b.py"]
    assert results[1].content == '["src/a.py","src/b.py"]'  # non-str results go back as JSON
    second = replay.cassette.interactions[1].request.messages
    assert [m.role for m in second] == ["user", "assistant", "tool", "tool"]
    assert second[1].content == "Let me look."
    assert [call.id for call in second[1].tool_calls] == ["call_1", "call_2"]
    assert [(m.tool_call_id, m.content) for m in second[2:]] == [
        ("call_1", "contents of src/a.py"),
        ("call_2", '["src/a.py","src/b.py"]'),
    ]
    assert _done(replayed).reason == "stop"


@pytest.mark.looptime
async def test_parallel_calls_of_a_turn_run_concurrently_and_report_in_call_order() -> None:
    loop = asyncio.get_running_loop()
    started: dict[str, float] = {}

    async def slow(path: str) -> str:
        started["slow"] = loop.time()
        await asyncio.sleep(2.0)
        return "slow done"

    async def quick(path: str) -> str:
        started["quick"] = loop.time()
        await asyncio.sleep(1.0)
        return "quick done"

    adapter = ScriptedAdapter([TWO_TOOLS, ANSWER])
    begin = loop.time()
    events = await _events(adapter, {"read_file": slow, "list_files": quick})
    assert [r.result for r in _of(ToolResultEvent, events)] == ["slow done", "quick done"]
    assert started["slow"] == started["quick"]
    assert loop.time() - begin == pytest.approx(2.0)  # virtual time: concurrent, not 3 s in a row


@pytest.mark.looptime
async def test_a_tool_that_raises_reaches_the_model_as_is_error_and_its_next_turn_replays(tmp_path: Path) -> None:
    def model(options: GenerateOptions, call: int) -> ScriptedTurn:
        if call == 0:
            return ScriptedTurn(
                tool_calls=[ScriptedToolCall(id="call_1", name="read_file", arguments={"path": "/etc/passwd"})]
            )
        last = options.messages[-1]
        seen = msgspec.json.decode(last.content or "null")
        return ScriptedTurn(text=f"The tool said: {seen['message']}" if seen.get("error") else "fine")

    def read_file(path: str) -> str:
        raise PermissionError(f"Permission denied: {path}")

    path = tmp_path / "error.msgpack"
    async with RecordingAdapter(ScriptedAdapter(model), path) as recorder:
        recorded = await _events(recorder, {"read_file": read_file})
    replayed = await _events(ReplayAdapter(path), {"read_file": read_file})

    for events in (recorded, replayed):
        [result] = _of(ToolResultEvent, events)
        assert result.is_error
        assert result.result == {"error": True, "message": "Permission denied: /etc/passwd"}
        assert result.content == '{"error":true,"message":"Permission denied: /etc/passwd"}'
        assert "".join(e.text for e in _of(TextEvent, events)) == "The tool said: Permission denied: /etc/passwd"
        assert _done(events).reason == "stop"
    assert _comparable(replayed) == _comparable(recorded)


@pytest.mark.looptime
async def test_unknown_tools_bad_arguments_and_unencodable_results_are_errors_for_the_model() -> None:
    turn = ScriptedTurn(
        tool_calls=[
            ScriptedToolCall(id="c1", name="delete_everything"),
            ScriptedToolCall(id="c2", name="read_file", arguments={"nope": 1}),
            ScriptedToolCall(id="c3", name="list_files", arguments={"path": "x"}),
        ]
    )

    def read_file(path: str) -> str:
        return path

    def list_files(path: str) -> object:
        return object()

    events = await _events(ScriptedAdapter([turn, ANSWER]), {"read_file": read_file, "list_files": list_files})
    results = _of(ToolResultEvent, events)
    assert [r.is_error for r in results] == [True, True, True]
    assert results[0].result["message"] == "unknown tool 'delete_everything' (available: list_files, read_file)"
    assert "nope" in results[1].result["message"]
    assert results[2].result["message"]  # msgspec's "Encoding objects of type object is unsupported"
    assert _done(events).reason == "stop"  # the model got all three errors and answered


@pytest.mark.looptime
async def test_the_run_stops_after_max_turns_without_running_the_last_calls() -> None:
    calls: list[str] = []

    def read_file(path: str) -> str:
        calls.append(path)
        return "again"

    again = ScriptedTurn(tool_calls=[ScriptedToolCall(name="read_file", arguments={"path": "x"})])
    events = await _events(ScriptedAdapter([again], cycle=True), {"read_file": read_file}, max_turns=3)
    assert [event.turn for event in _of(TurnEvent, events)] == [1, 2, 3]
    assert calls == ["x", "x"]
    assert _done(events).reason == "tool_use"
    with pytest.raises(LlmError) as raised:
        run_agent(ScriptedAdapter([again]), OPTIONS, {}, max_turns=0)
    assert raised.value.code is ErrorCode.INVALID_CONFIG


@pytest.mark.looptime
async def test_a_tool_runner_subclass_replaces_how_tools_are_executed() -> None:
    class Canned(ToolRunner):
        async def run(self, call: ToolCallEvent) -> ToolResultEvent:
            return ToolResultEvent(tool_call_id=call.id, name=call.name, result="canned", content="canned")

    adapter = ScriptedAdapter([TWO_TOOLS, ANSWER])
    events = await _events(adapter, Canned({}))
    assert [r.content for r in _of(ToolResultEvent, events)] == ["canned", "canned"]


# -- cancellation ------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_a_cancel_mid_tool_call_ends_with_done_cancel_and_the_side_effect_stays(tmp_path: Path) -> None:
    written = tmp_path / "written.txt"
    cleaned_up: list[str] = []

    def read_file(path: str) -> str:  # a tool with a side effect that finishes at once
        written.write_text("done")
        return "written"

    async def list_files(path: str) -> str:  # still running when the user presses Stop
        try:
            await asyncio.sleep(60)
        finally:
            cleaned_up.append(path)
        return "never"

    controller = AbortController()
    options = msgspec.structs.replace(OPTIONS, signal=controller.signal)
    loop = asyncio.get_running_loop()
    loop.call_later(5.0, controller.abort, "user pressed stop")
    adapter = ScriptedAdapter([TWO_TOOLS, ANSWER])
    begin = loop.time()
    events = await _events(adapter, {"read_file": read_file, "list_files": list_files}, options)

    done = _done(events)
    assert done.reason == "cancel"
    assert done.error is not None
    assert done.error.code is ErrorCode.CANCELLED
    assert written.read_text() == "done"  # tools already run are not rolled back
    assert [r.tool_call_id for r in _of(ToolResultEvent, events)] == ["call_1"]
    assert cleaned_up == ["src/"]  # the running tool was cancelled, and its cleanup ran
    assert adapter.calls == 1  # the model was not asked again
    assert loop.time() - begin == pytest.approx(5.0)


@pytest.mark.looptime
async def test_a_cancel_mid_stream_of_a_later_turn_ends_with_done_cancel() -> None:
    ran: list[str] = []

    def read_file(path: str) -> str:
        ran.append(path)
        return "ok"

    turns = [
        ScriptedTurn(tool_calls=[ScriptedToolCall(id="c1", name="read_file", arguments={"path": "a"})]),
        ScriptedTurn(text="a long answer " * 50),
    ]
    controller = AbortController()
    options = msgspec.structs.replace(OPTIONS, signal=controller.signal)
    seen: list[HarnessEvent] = []
    async for event in run_agent(ScriptedAdapter(turns, between_s=0.1), options, {"read_file": read_file}):
        seen.append(event)
        if isinstance(event, TextEvent) and len(_of(TextEvent, seen)) == 3:
            controller.abort()
    assert _done(seen).reason == "cancel"
    assert ran == ["a"]
    assert len(_of(TextEvent, seen)) == 3
    assert [e.done.reason for e in _of(TurnEvent, seen)] == ["tool_use", "cancel"]


@pytest.mark.looptime
async def test_cancelling_the_consumer_task_cancels_running_tools() -> None:
    cleaned_up: list[str] = []

    async def forever(path: str) -> str:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned_up.append(path)
        return "never"

    turn = ScriptedTurn(tool_calls=[ScriptedToolCall(name="read_file", arguments={"path": "a"})])
    task = asyncio.ensure_future(_events(ScriptedAdapter([turn, ANSWER]), {"read_file": forever}))
    await asyncio.sleep(10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned_up == ["a"]


# -- metrics and collect -----------------------------------------------------------------------------


@pytest.mark.looptime
async def test_metrics_add_up_across_turns_and_a_retry_supersedes_only_its_turn() -> None:
    turns = [
        ScriptedTurn(
            text="Looking.",
            tool_calls=[ScriptedToolCall(id="c1", name="read_file", arguments={"path": "a"})],
            usage=TokenUsage(input_tokens=10, output_tokens=3, reasoning_tokens=1),
        ),
        ScriptedTurn(text="Half an answer that breaks", error=ScriptedError(code="STREAM_ABORTED", after_chunks=3)),
        ScriptedTurn(text="The answer.", usage=TokenUsage(input_tokens=20, output_tokens=4, cached_input_tokens=8)),
    ]
    loop = asyncio.get_running_loop()
    begin = loop.time()
    metrics = StreamMetrics()
    adapter = ScriptedAdapter(turns, first_chunk_s=0.25, between_s=0.01)
    policy = RetryPolicy(retry_delay=0.5)
    transcript = await collect(
        run_agent(adapter, OPTIONS, {"read_file": lambda path: "ok"}, policy=policy, metrics=metrics)
    )

    done = transcript.done
    assert done is not None
    assert done.reason == "stop"
    assert done.metrics is metrics
    assert metrics.ttfb == pytest.approx(0.25)
    assert metrics.total_duration == pytest.approx(loop.time() - begin)
    assert (metrics.tool_call_count, metrics.retry_count, metrics.attempts) == (1, 1, 3)
    turn_metrics = [turn.done.metrics for turn in transcript.turns]
    assert metrics.chunk_count == sum(m.chunk_count for m in turn_metrics if m is not None)
    assert (
        done.usage
        == metrics.token_usage
        == TokenUsage(input_tokens=30, output_tokens=7, cached_input_tokens=8, reasoning_tokens=1)
    )
    assert transcript.text == "Looking.The answer."  # turn 1's text survives turn 2's retry
    assert [r.tool_call_id for r in transcript.tool_results] == ["c1"]
    assert [call.id for call in transcript.tool_calls] == ["c1"]
    assert len(transcript.turns) == 2


@pytest.mark.looptime
async def test_the_history_holds_only_the_attempt_that_counted() -> None:
    requests: list[GenerateOptions] = []

    def model(options: GenerateOptions, call: int) -> ScriptedTurn:
        requests.append(options)
        call_a = [ScriptedToolCall(id="c1", name="read_file", arguments={"path": "a"})]
        if call == 0:
            return ScriptedTurn(
                text="Let me look at it", tool_calls=call_a, error=ScriptedError(code="TIMEOUT", after_chunks=2)
            )
        if call == 1:
            return ScriptedTurn(text="Let me look at it", reasoning="think", tool_calls=call_a)
        return ANSWER

    events = await _events(ScriptedAdapter(model), {"read_file": lambda path: "ok"}, policy=RetryPolicy(retry_delay=0))
    assert _done(events).reason == "stop"
    assistant = requests[2].messages[1]
    assert (assistant.content, assistant.reasoning_content) == ("Let me look at it", "think")


# -- the reasoning check -----------------------------------------------------------------------------


class Permissive(LlmAdapter):
    """An adapter that would stream anything it is given, and counts its ``stream()`` calls."""

    def __init__(self, offered: Sequence[ReasoningOption] = ()) -> None:
        self.offered = tuple(offered)
        self.calls = 0

    @property
    def name(self) -> str:
        return "permissive"

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return self.offered

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        self.calls += 1
        yield Finish(reason=FinishReason(kind="stop"))


@pytest.mark.looptime
@pytest.mark.parametrize(
    ("offered", "effort", "rejected"),
    [
        ((), "low", True),
        (("off", "low"), "max", True),
        (("off", "low"), "off", False),
        ((), None, False),
    ],
)
async def test_an_effort_the_adapter_does_not_offer_is_rejected_before_stream(
    offered: tuple[str, ...], effort: str | None, rejected: bool
) -> None:
    adapter = Permissive([ReasoningOption(id=option) for option in offered])
    options = msgspec.structs.replace(OPTIONS, reasoning=effort)
    events = await _events(adapter, {})
    events = await _events(adapter, {}, options)
    done = _done(events)
    if not rejected:
        assert done.reason == "stop"
        return
    assert adapter.calls == 1  # only the first run, without a reasoning effort, reached stream()
    assert done.reason == "error"
    assert done.error is not None
    assert done.error.code is ErrorCode.UNSUPPORTED_OPTION
    assert f"{effort!r} is not offered (offered: {list(offered) or 'none'})" in str(done.error)
    [error] = _of(ErrorEvent, events)
    assert not error.recoverable
    assert not error.will_retry


@pytest.mark.looptime
async def test_the_offered_efforts_with_off_travel_through_record_and_replay(tmp_path: Path) -> None:
    offered = [ReasoningOption(id="off", label="Off"), ReasoningOption(id="high", label="High", default=True)]
    path = tmp_path / "reasoning.msgpack"
    live = ScriptedAdapter([TWO_TOOLS, ANSWER], reasoning_options=offered)
    options = msgspec.structs.replace(OPTIONS, reasoning="off")
    async with RecordingAdapter(live, path) as recorder:
        assert _done(await _events(recorder, _files(), options)).reason == "stop"
    replay = ReplayAdapter(path)
    assert list(replay.reasoning_options()) == offered
    assert _done(await _events(replay, _files(), options)).reason == "stop"
    fresh = ReplayAdapter(path)
    rejected = await _events(fresh, _files(), msgspec.structs.replace(options, reasoning="max"))
    error = _done(rejected).error
    assert error is not None
    assert error.code is ErrorCode.UNSUPPORTED_OPTION
    assert fresh.calls == 0  # rejected before the replay's stream() was called
    assert replay.cassette.interactions[0].request.reasoning == "off"


# -- the demo ----------------------------------------------------------------------------------------


@pytest.mark.looptime
async def test_the_demo_agent_feeds_the_failed_read_back_and_asks_again() -> None:
    transcript = await demo_agent(demo_adapter(turns=DEMO_AGENT_TURNS))
    assert transcript.done is not None
    assert transcript.done.reason == "stop"
    assert len(transcript.turns) == len(DEMO_AGENT_TURNS)
    assert [(r.name, r.is_error) for r in transcript.tool_results] == [
        ("list_files", False),
        ("read_file", False),
        ("read_file", True),
        ("read_file", False),
    ]
    assert transcript.tool_results[2].result["message"] == "read timed out: src/app/main.py"
    assert transcript.tool_results[3].content == DEMO_FILES["src/app/main.py"]
