"""Faults that behave like a real provider: transient ones fire once, permanent ones on every call; fault runs
of the pytest matrix run in virtual time. The matrix is driven through ``pytester`` in-process, as a user runs it.
"""

from __future__ import annotations

import pytest

from chunktape.faults import (
    STANDARD_FAULTS,
    Always,
    Chaos,
    Disconnect,
    FailFirst,
    HttpError,
    Targeted,
    is_transient,
    parse_fault,
)
from chunktape.faults.plan import FaultPlan
from chunktape.protocol import GenerateOptions, Message

OPTIONS = GenerateOptions(model="m", messages=[Message(role="user", content="hi")])
OTHER = GenerateOptions(model="m", messages=[Message(role="user", content="bye")])

PERMANENT = {"http-401", "http-400"}


def _fired(plan: FaultPlan, calls: int, options: GenerateOptions = OPTIONS) -> list[str | None]:
    return [None if (active := plan.select(options)) is None else active.fault_id for _ in range(calls)]


def test_every_standard_fault_says_whether_a_retry_recovers() -> None:
    assert {ident for ident, fault in STANDARD_FAULTS.items() if not fault.transient} == PERMANENT
    assert [HttpError(status=status).transient for status in (408, 409, 429, 500, 503, 599)] == [True] * 6
    assert [HttpError(status=status).transient for status in (400, 401, 403, 404, 422)] == [False] * 5
    assert not Always(fault=HttpError(status=503)).transient
    assert FailFirst(n=2, fault=HttpError(status=401)).transient
    assert not Targeted(fault=HttpError(status=400), calls=[2]).transient
    assert not is_transient(Chaos(rate=0.5, faults=[HttpError(status=503), HttpError(status=401)]))


@pytest.mark.parametrize("ident", list(STANDARD_FAULTS))
def test_a_transient_fault_fires_once_and_a_permanent_one_on_every_call(ident: str) -> None:
    fired = _fired(FaultPlan([ident]), 4)
    assert fired == ([ident] * 4 if ident in PERMANENT else [ident, None, None, None])


def test_wrappers_override_the_rule() -> None:
    assert _fired(FaultPlan([Always(fault=HttpError(status=503))]), 3) == ["http-503"] * 3
    assert _fired(FaultPlan([FailFirst(n=2, fault=HttpError(status=401))]), 3) == ["http-401", "http-401", None]
    parsed = parse_fault({"type": "always", "fault": {"type": "disconnect", "after_chunks": 0}})
    assert parsed == Always(fault=Disconnect(after_chunks=0))
    assert parsed.fault_id == "always-disconnect-before-first-chunk"


def test_targeted_fires_on_each_listed_call_or_once_on_the_first_match() -> None:
    listed = FaultPlan([Targeted(fault=HttpError(status=503), calls=[2, 3])])
    assert _fired(listed, 4) == [None, "http-503", "http-503", None]
    matched = FaultPlan([Targeted(fault=HttpError(status=503), match="bye")])
    assert _fired(matched, 1) == [None]
    assert _fired(matched, 2, OTHER) == ["http-503", None]
    permanent = FaultPlan([Targeted(fault=HttpError(status=400), match="bye")])
    assert _fired(permanent, 2, OTHER) == ["http-400", "http-400"]
    assert _fired(permanent, 1) == [None]


INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = error
addopts = --strict-markers -p no:cacheprovider -p no:hypothesispytest
{extra}
"""

CONFTEST = """
import pytest

from chunktape.providers.scripted import ScriptedAdapter, ScriptedToolCall, ScriptedTurn

TURNS = [
    ScriptedTurn(text="let me look", tool_calls=[ScriptedToolCall(name="weather", arguments={"city": "Oslo"})]),
    ScriptedTurn(text="it is sunny in Oslo"),
]


@pytest.fixture
def tape_live_adapter():
    return lambda: ScriptedAdapter(TURNS)
"""

# A two-call agent on chunktape's own reference harness, as the README shows it.
AGENT_TEST = '''
import asyncio

import pytest

from chunktape import GenerateOptions, Message, ToolCallBlock
from chunktape.errors import ErrorCode
from chunktape.faults import Corrupt
from chunktape.harness import DoneEvent, TextEvent, ToolCallEvent, stream_with_retry

QUESTION = [Message(role="user", content="weather in Oslo?")]


async def turn(tape, messages):
    """One harness call: the text of the attempt that ended it, its tool calls and its DoneEvent."""
    texts, calls = {}, []
    async for event in stream_with_retry(tape, GenerateOptions(model="m", messages=messages)):
        if isinstance(event, TextEvent):
            texts[event.attempt] = texts.get(event.attempt, "") + event.text
        elif isinstance(event, ToolCallEvent):
            calls.append(event)
        elif isinstance(event, DoneEvent):
            return texts.get(event.metrics.attempts, ""), calls, event


async def agent(tape):
    text, calls, done = await turn(tape, QUESTION)
    if done.reason != "tool_use":
        return text, done
    blocks = [ToolCallBlock(id=call.id, name=call.name, arguments=call.raw_arguments) for call in calls]
    reply = Message(role="assistant", content=text, tool_calls=blocks)
    result = Message(role="tool", content="sunny", tool_call_id=calls[0].id)
    text, _, done = await turn(tape, [*QUESTION, reply, result])
    return text, done


@pytest.mark.tape_fault_matrix{matrix_args}
async def test_agent(tape):
    assert getattr(asyncio.get_running_loop(), "looptime_on", False) is {virtual}
    text, done = await agent(tape)
    if tape.fault is None or (tape.fault.transient and not isinstance(tape.fault, Corrupt)):
        assert (text, done.reason) == ("it is sunny in Oslo", "stop")
    elif isinstance(tape.fault, Corrupt):  # the harness does not retry a protocol violation
        assert done.error.code is ErrorCode.PROTOCOL_VIOLATION
    else:
        assert done.error.code is ErrorCode.PROVIDER_HTTP_ERROR
        assert done.error.status == tape.fault.status
'''


def _project(pytester: pytest.Pytester, *, ini: str = "", matrix_args: str = "", virtual: str = "") -> None:
    pytester.makefile(".ini", pytest=INI.format(extra=ini))
    pytester.makepyfile(conftest=CONFTEST)
    pytester.makepyfile(
        test_agent=AGENT_TEST.replace("{matrix_args}", matrix_args).replace(
            "{virtual}", virtual or "(tape.fault is not None)"
        )
    )


def test_the_default_matrix_over_a_two_call_agent_records_then_passes_in_virtual_time(
    pytester: pytest.Pytester,
) -> None:
    _project(pytester)
    result = pytester.runpytest("-p", "chunktape", "--tape-mode", "once")
    result.assert_outcomes(passed=len(STANDARD_FAULTS) + 1)
    # Replayed offline afterwards: the same, with no live adapter needed.
    result = pytester.runpytest("-p", "chunktape")
    result.assert_outcomes(passed=len(STANDARD_FAULTS) + 1)


def test_calls_moves_the_fault_to_the_second_call(pytester: pytest.Pytester) -> None:
    _project(pytester, matrix_args='(faults=["http-503", "http-401", "stall-30s"], calls=2)')
    result = pytester.runpytest("-p", "chunktape", "--tape-mode", "once")
    result.assert_outcomes(passed=4)


def test_virtual_time_can_be_turned_off_by_ini_and_by_marker(pytester: pytest.Pytester) -> None:
    _project(pytester, ini="tape_virtual_time = false", matrix_args='(faults=["http-500"])', virtual="False")
    pytester.runpytest("-p", "chunktape", "--tape-mode", "once").assert_outcomes(passed=2)
    _project(
        pytester,
        matrix_args='(faults=["http-500"])\n@pytest.mark.tape(virtual_time=False)',
        virtual="False",
    )
    pytester.runpytest("-p", "chunktape").assert_outcomes(passed=2)


def test_a_bad_calls_argument_fails_that_test_only(pytester: pytest.Pytester) -> None:
    _project(pytester, matrix_args="(calls=0)")
    result = pytester.runpytest("-p", "chunktape")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*tape_fault_matrix(calls=...) takes a call number (1-based)*"])
