"""A small test project for the fault matrix: a two-call agent on ``stream_with_retry`` and a scripted live adapter."""

from __future__ import annotations

import pytest

__all__ = ["make_project"]

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

from chunktape.providers._scripted import ScriptedAdapter, ScriptedToolCall, ScriptedTurn

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
from chunktape._errors import ErrorCode
from chunktape.faults import Corrupt
from chunktape.harness import DoneEvent, RetryPolicy, TextEvent, ToolCallEvent, stream_with_retry

QUESTION = [Message(role="user", content="weather in Oslo?")]


async def turn(tape, messages):
    """One harness call: the text of the attempt that ended it, its tool calls and its DoneEvent."""
    texts, calls = {}, []
    async for event in stream_with_retry(tape, GenerateOptions(model="m", messages=messages), {policy}):
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
    assert getattr(asyncio.get_running_loop(), "virtual", False) is {virtual}
    text, done = await agent(tape)
    if tape.fault is None or (tape.fault.transient and not isinstance(tape.fault, Corrupt)):
        assert (text, done.reason) == ("it is sunny in Oslo", "stop")
    elif isinstance(tape.fault, Corrupt):  # the harness does not retry a protocol violation
        assert done.error.code is ErrorCode.PROTOCOL_VIOLATION
    else:
        assert done.error.code is ErrorCode.PROVIDER_HTTP_ERROR
        assert done.error.status == tape.fault.status
'''


def make_project(
    pytester: pytest.Pytester, *, ini: str = "", matrix_args: str = "", virtual: str = "", policy: str = "RetryPolicy()"
) -> None:
    """Write the project; ``matrix_args`` follow the marker, ``virtual`` is whether each run must be on chunktape's
    virtual clock, ``policy`` is the agent's ``RetryPolicy`` (its delays are real seconds when virtual time is off)."""
    pytester.makefile(".ini", pytest=INI.format(extra=ini))
    pytester.makepyfile(conftest=CONFTEST)
    pytester.makepyfile(
        test_agent=AGENT_TEST.replace("{matrix_args}", matrix_args)
        .replace("{virtual}", virtual or "True")
        .replace("{policy}", policy)
    )
