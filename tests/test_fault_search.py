"""The fault search finds and shrinks the fault schedule that breaks an agent (``chunktape.pytest._search``).

The sample agents (``sample_agents``) each carry one planted bug; the search must find each and shrink it to one
fault, and let the correct agent pass. Every run is in virtual time, so stalls and Retry-After waits
cost no wall time.
"""

from __future__ import annotations

import functools
import re
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from hypothesis.database import InMemoryExampleDatabase

import sample_agents as samples
from chunktape import ErrorCode, LlmAdapter, LlmError, ReplayAdapter, Timing
from chunktape.faults import (
    STANDARD_FAULTS,
    Disconnect,
    FailFirst,
    HttpError,
    Stall,
    Targeted,
    Truncate,
)
from chunktape.http._server.scenarios import parse_scenarios
from chunktape.pytest._search import AgentHang, Schedule, SearchResult, run_virtual, search_faults
from helpers import run_pytest


@pytest.fixture(scope="module")
def cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The correct agent's conversation: a text + tool-call turn, then the answer (recorded in virtual time)."""
    return samples.record(tmp_path_factory.mktemp("search") / "weather.msgpack")


def search(agent: samples.SampleAgent, cassette: Path, **options: Any) -> SearchResult:
    options.setdefault("database", None)
    return search_faults(functools.partial(samples.check, agent), cassette, **options)


def reproduce(agent: samples.SampleAgent, cassette: Path, schedule: Schedule) -> BaseException | None:
    adapter = ReplayAdapter(cassette, faults=schedule.faults, timing=schedule.timing)
    return run_virtual(functools.partial(samples.check, agent), adapter, 600)


def only_fault(result: SearchResult) -> Targeted:
    assert result.failure is not None, result.report()
    assert len(result.failure.faults) == 1, result.report()
    return result.failure.faults[0]


def test_finds_text_streamed_twice_after_a_disconnect_past_the_first_tool_call_delta(cassette: Path) -> None:
    result = search(samples.DUPLICATES_TEXT, cassette)
    fault = only_fault(result)
    assert fault.calls == [1]  # the turn that streams text, then a tool call
    # A disconnect once the tool call began (inside it, or after as many chunks): which form the shrink ends on
    # depends on the catalogue drawn from; the reproductions below say it is the bug.
    assert isinstance(fault.fault, Disconnect)
    assert isinstance(result.error, AssertionError)
    assert "Let me look that up for you. Let me look that up for you." in str(result.error)
    assert result.failure is not None
    assert isinstance(reproduce(samples.DUPLICATES_TEXT, cassette, result.failure), AssertionError)
    assert reproduce(samples.CORRECT, cassette, result.failure) is None
    assert result.calls == 2
    assert result.examples_to_find is not None
    assert result.examples >= result.examples_to_find


def test_finds_an_ignored_retry_after(cassette: Path) -> None:
    result = search(samples.IGNORES_RETRY_AFTER, cassette)
    fault = only_fault(result)
    assert fault.fault == STANDARD_FAULTS["http-429"]
    assert str(result.error) == "called again 1s before the Retry-After of 2s passed"
    assert result.failure is not None
    assert reproduce(samples.CORRECT, cassette, result.failure) is None


def test_finds_a_hang_on_a_stall_without_an_idle_timeout_as_a_timeout(cassette: Path) -> None:
    result = search(samples.NO_IDLE_TIMEOUT, cassette, deadline_s=100)
    fault = only_fault(result)
    assert fault == Targeted(calls=[1], fault=Stall(after_chunks=0, seconds=200.0))  # outlasts the deadline
    assert isinstance(result.error, AgentHang)
    assert result.error.code is ErrorCode.TIMEOUT
    assert result.hang
    assert "asyncio.timeout(100) (virtual seconds)" in result.report()
    assert result.failure is not None
    assert reproduce(samples.CORRECT, cassette, result.failure) is None


def test_a_correct_agent_passes_every_example(cassette: Path) -> None:
    result = search(samples.CORRECT, cassette, max_examples=200)
    assert result.failure is None
    assert result.error is None
    assert result.examples == 200
    assert result.report() == "no failing fault schedule in 200 examples (seed 0)"


def test_the_search_is_deterministic_for_a_seed(cassette: Path) -> None:
    first, second = (search(samples.DUPLICATES_TEXT, cassette, seed=7) for _ in range(2))
    assert first.failure == second.failure
    assert (first.examples, first.examples_to_find) == (second.examples, second.examples_to_find)


def test_a_found_failure_replays_first_from_the_example_database(cassette: Path) -> None:
    database = InMemoryExampleDatabase()
    first = search(samples.IGNORES_RETRY_AFTER, cassette, database=database, key="retry-after")
    assert first.examples_to_find is not None
    assert first.examples_to_find > 1
    again = search(samples.IGNORES_RETRY_AFTER, cassette, database=database, key="retry-after")
    assert again.examples_to_find == 1
    assert again.failure == first.failure


def test_schedules_print_as_a_marker_line_and_a_scenario_entry_that_round_trip() -> None:
    schedule = Schedule(
        (
            Targeted(calls=[1], fault=HttpError(status=429, retry_after=2.0, message='say "hi"\n', id="http-429")),
            Targeted(calls=[3], fault=Disconnect(after_chunks=4)),
            Targeted(calls=[4], fault=Truncate(after_chunks=0)),
        ),
        Timing.recorded(speed=2.0),
    )
    line = schedule.marker()
    assert line.startswith("@pytest.mark.tape(faults=[Targeted(calls=[1], fault=HttpError(status=429, ")
    assert str(schedule) == line
    assert schedule.imports() == (
        "from chunktape.faults import Disconnect, HttpError, Targeted, Truncate\nfrom chunktape import Timing"
    )
    namespace: dict[str, Any] = {}
    exec(schedule.imports(), namespace)
    namespace["pytest"] = SimpleNamespace(mark=SimpleNamespace(tape=lambda **options: options))
    assert eval(line.removeprefix("@"), namespace) == {"faults": list(schedule.faults), "timing": schedule.timing}

    entry = schedule.scenario("agent-search", "cassettes/agent.msgpack")
    assert entry.splitlines()[:4] == [
        "[[scenarios]]",
        'name = "agent-search"',
        'cassette = "cassettes/agent.msgpack"',
        'timing = { mode = "recorded", speed = 2.0 }',
    ]
    (scenario,) = parse_scenarios(msgspec.toml.decode(entry))
    assert scenario.faults == schedule.faults
    assert (scenario.timing.kind, scenario.timing.speed) == ("recorded", 2.0)
    instant = Schedule(schedule.faults, Timing.instant())
    assert "timing" not in instant.marker()
    assert "timing" not in instant.scenario("x", "y")


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_faults": 0}, "max_faults must be an integer >= 1"),
        ({"max_examples": 0}, "max_examples must be an integer >= 1"),
        ({"deadline_s": float("inf")}, "deadline_s must be a finite number of seconds > 0"),
        ({"timing": "recorded"}, "timing must be a Timing"),
        ({"faults": [FailFirst(n=1, fault=HttpError(status=500))]}, "faults[0] is a FailFirst; give stream faults"),
        ({"faults": []}, "faults= lists no fault"),
        ({"faults": ["http-999"]}, "unknown standard fault 'http-999'"),
    ],
)
def test_invalid_options_are_config_errors(cassette: Path, options: dict[str, Any], problem: str) -> None:
    with pytest.raises(LlmError) as raised:
        search(samples.CORRECT, cassette, **options)
    assert raised.value.code is ErrorCode.INVALID_CONFIG
    assert problem in raised.value.message


def test_an_agent_failing_without_faults_gets_an_empty_schedule(cassette: Path) -> None:
    async def wrong(adapter: LlmAdapter) -> None:
        outcome = await samples.CORRECT.run(adapter)
        assert outcome.text == "something else"

    result = search_faults(wrong, cassette, database=None)
    assert result.failure is not None
    assert result.failure.faults == ()
    assert result.examples == 0
    assert result.report().startswith("the agent fails without any fault:\n    AssertionError")


def test_an_agent_that_never_calls_the_adapter_is_a_config_error(cassette: Path) -> None:
    async def idle(adapter: LlmAdapter) -> None:
        pass

    with pytest.raises(LlmError, match="made no stream\\(\\) call") as raised:
        search_faults(idle, cassette, database=None)
    assert raised.value.code is ErrorCode.INVALID_CONFIG


# -- the pytest marker ----------------------------------------------------------------------------

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = error
addopts = --strict-markers -p no:cacheprovider -p no:hypothesispytest -p no:looptime
"""

SEARCH_TESTS = """
import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from sample_agents import CORRECT, DUPLICATES_TEXT, check

DB = DirectoryBasedExampleDatabase("search-db")


@pytest.mark.tape(name="weather")
@pytest.mark.tape_fault_search(database=DB)
async def test_duplicates(tape):
    await check(DUPLICATES_TEXT, tape)


@pytest.mark.tape(name="weather")
@pytest.mark.tape_fault_search(max_examples=30, database=None)
async def test_correct(tape):
    await check(CORRECT, tape)


@pytest.mark.tape_fault_search
def test_sync(tape):
    pass


@pytest.mark.tape(name="weather")
@pytest.mark.tape_fault_search(max_faults=0, database=None)
async def test_bad_option(tape):
    await check(CORRECT, tape)


@pytest.mark.tape(name="weather")
@pytest.mark.tape_fault_search(examples=3)
async def test_unknown_option(tape):
    await check(CORRECT, tape)
"""


def test_the_marker_fails_a_planted_bug_with_the_shrunk_one_fault_marker_line(pytester: pytest.Pytester) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makepyfile(test_search=textwrap.dedent(SEARCH_TESTS))
    samples.record(pytester.mkdir("cassettes") / "test_search" / "weather.msgpack")

    result = run_pytest(pytester)
    result.assert_outcomes(passed=1, failed=4)
    output = result.stdout.str()
    marker = r"@pytest\.mark\.tape\(faults=\[Targeted\(calls=\[1\], fault=Disconnect\(.*?\)\)\]"
    found = re.search(marker + r", timing=Timing\.recorded\(\)\)", output)
    assert found is not None, output
    expected = found[0]
    assert "test_search.py::test_duplicates: tape_fault_search: the agent fails under this 1-fault schedule" in output
    assert 'cassette = "cassettes/test_search/weather.msgpack"' in output
    assert "test_sync: @pytest.mark.tape_fault_search: the test must be an async function" in output
    assert "test_bad_option: @pytest.mark.tape_fault_search: [INVALID_CONFIG] fault search: max_faults" in output
    assert "test_unknown_option: @pytest.mark.tape_fault_search: takes keyword arguments only" in output

    # The failure was saved in the example database: the next run tries it first.
    again = run_pytest(pytester, "-k", "test_duplicates")
    again.assert_outcomes(failed=1)
    assert "(found after 1 example(s)" in again.stdout.str()
    assert expected in again.stdout.str()


def test_a_failure_of_the_search_itself_is_reported_as_chunktapes_not_the_agents(cassette: Path) -> None:
    async def agent(adapter: LlmAdapter) -> None:
        adapter.no_such_face()  # type: ignore[attr-defined]

    result = search_faults(agent, cassette, database=None, max_examples=1)
    assert result.failure is not None
    assert not result.failure.faults
    assert result.report().startswith("chunktape's fault search failed here, not the agent")

    async def broken(adapter: LlmAdapter) -> None:
        raise ValueError("the agent's own bug")

    report = search_faults(broken, cassette, database=None, max_examples=1).report()
    assert report.startswith("the agent fails without any fault")


def test_the_stand_in_has_the_http_faces_of_tape(cassette: Path) -> None:
    """An SDK agent on ``tape.http_client()`` (async) and on a sync client: the schedule's faults reach it."""
    import openai

    tool = samples.WEATHER_TOOL
    question: Any = {
        "model": "sample",
        "messages": [{"role": "user", "content": samples.QUESTION}],
        "tools": [
            {
                "type": "function",
                "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
            }
        ],
        "stream": True,
    }

    async def agent(adapter: Any) -> None:
        url = "http://127.0.0.1:9/v1"
        sdk = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0, http_client=adapter.http_client())
        try:
            async for _ in await sdk.chat.completions.create(**question):
                pass
        finally:
            await sdk.close()
        with openai.OpenAI(
            base_url=url, api_key="k", max_retries=0, http_client=adapter.http_client(sync=True)
        ) as sync:
            for _ in sync.chat.completions.create(**question):
                pass

    result = search_faults(
        agent,
        cassette,
        faults=["http-401"],
        database=None,
        max_examples=5,
        max_faults=1,
        replay_options={"allow_repeats": True},
    )
    assert result.failure is not None, result.report()
    assert result.failure.faults, result.report()  # the fault-free run passed: both clients got their answers
    assert "AuthenticationError" in result.report()
