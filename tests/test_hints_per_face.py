"""Every hint names the knob of the face the user is in, and none of another face's.

The library speaks in ``use_cassette``/``ReplayAdapter`` arguments, the pytest plugin in its options and the
tape marker, the CLI in its commands and flags, the replay server in ``--match-on``, ``--repeat`` and
``POST /reset``. Each cassette miss (not found, mismatch, exhausted), unplayed interactions and a secret left in
a recording are met in each face where a user can meet them, and the text is grepped for foreign knobs.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import looptime
import pytest
from typer.testing import CliRunner

from chunktape import (
    Cassette,
    Completed,
    ErrorCode,
    Event,
    GenerateOptions,
    Interaction,
    LlmError,
    Message,
    RecordedRequest,
    ReplayAdapter,
    save_cassette,
    use_cassette,
)
from chunktape._replayer import Timing
from chunktape.cli import app
from chunktape.cli._common import with_cli_hint
from chunktape.faults import Disconnect, Fault, Latency, Stall
from chunktape.http import ReplayServer
from chunktape.providers._scripted import ScriptedAdapter, ScriptedTurn
from fake_provider import FakeProvider
from helpers import collect, collect_until_error, run_pytest, text_stream
from test_pytest_plugin import project
from test_record_cli_safety import PROMPT_KEY, _reply, record
from test_record_cli_safety import runner as runner

LIBRARY_KNOBS = (r'mode="', r"use_cassette\(", r"(?<!tape\()allow_repeats=True", r"(?<!tape\()match_on=")
PYTEST_KNOBS = (r"--tape-", r"@pytest\.mark")
CLI_KNOBS = (r"--allow-secret", r"chunktape redact", r"-o FILE")
SERVER_KNOBS = (r"--match-on", r"--repeat", r"POST /reset")
FOREIGN = {
    "library": (*PYTEST_KNOBS, *CLI_KNOBS, *SERVER_KNOBS),
    "pytest": (*LIBRARY_KNOBS, *CLI_KNOBS, *SERVER_KNOBS),
    "cli": (*LIBRARY_KNOBS, *PYTEST_KNOBS, *SERVER_KNOBS),
    "server": (*LIBRARY_KNOBS, *PYTEST_KNOBS, r"--allow-secret"),
}
KEY = "sk-proj-Hintsperface0123456789abcdefghijkl"


def assert_in_face(face: str, text: str, *knobs: str) -> None:
    """``text`` names each of ``knobs`` (literally) and no knob of another face."""
    for knob in knobs:
        assert knob in text, (knob, text)
    foreign = [pattern for pattern in FOREIGN[face] if re.search(pattern, text)]
    assert not foreign, (foreign, text)


def request(content: str) -> GenerateOptions:
    return GenerateOptions(model="m", messages=[Message(role="user", content=content)])


def cassette(*questions: str) -> Cassette:
    interactions = []
    for question in questions:
        chunks = text_stream(f"echo: {question}")
        interactions.append(
            Interaction(
                request=RecordedRequest.from_options(request(question)),
                events=[Event(t_ns=position, chunk=chunk) for position, chunk in enumerate(chunks)],
                outcome=Completed(t_ns=len(chunks)),
            )
        )
    return Cassette(interactions=interactions)


# -- library ----------------------------------------------------------------------------------------------


async def test_library_not_found_names_the_record_mode(tmp_path: Path) -> None:
    async with use_cassette(tmp_path / "missing.msgpack") as tape:
        _, error = await collect_until_error(tape.stream(request("hi")))
    assert error.code is ErrorCode.CASSETTE_NOT_FOUND
    assert_in_face("library", str(error), 'mode="once"')


async def test_library_mismatch_names_mode_and_match_on_then_shows_the_diff() -> None:
    _, error = await collect_until_error(ReplayAdapter(cassette("hi")).stream(request("bye")))
    assert error.code is ErrorCode.CASSETTE_MISMATCH
    text = str(error)
    assert_in_face("library", text, 'mode="new_episodes"', "match_on=")
    assert text.index("match_on=") < text.index("Closest is interaction #0")  # the next step before the diff
    assert "messages[0].content: recorded 'hi', requested 'bye'" in text


async def test_library_exhausted_names_allow_repeats() -> None:
    replay = ReplayAdapter(cassette("hi"))
    await collect(replay.stream(request("hi")))
    _, error = await collect_until_error(replay.stream(request("hi")))
    assert error.code is ErrorCode.CASSETTE_EXHAUSTED
    assert_in_face("library", str(error), 'mode="new_episodes"', "allow_repeats=True")


async def test_library_unplayed_names_the_record_mode() -> None:
    replay = ReplayAdapter(cassette("hi", "bye"))
    await collect(replay.stream(request("hi")))
    with pytest.raises(AssertionError) as info:
        replay.assert_all_played()
    assert_in_face("library", str(info.value), "#1", 'mode="all"')


async def test_library_secret_names_allow_secrets(tmp_path: Path) -> None:
    live = ScriptedAdapter(lambda options, n: ScriptedTurn(text=f"your key: {KEY}"))
    tape = use_cassette(tmp_path / "secret.msgpack", live=lambda: live, mode="once")
    await collect(tape.stream(request("a key please")))
    with pytest.raises(LlmError) as info:
        await tape.aclose()
    assert info.value.code is ErrorCode.SECRET_DETECTED
    assert_in_face("library", str(info.value), "allow_secrets=[...]")


# -- pytest -----------------------------------------------------------------------------------------------

FACE_TESTS = """
import pytest
from agent import ask


@pytest.mark.tape(name="recorded")
async def test_record(tape):
    assert await ask(tape, "hi") == "echo: hi"
    assert await ask(tape, "bye") == "echo: bye"


async def test_missing(tape):
    await ask(tape, "anyone?")


@pytest.mark.tape(name="recorded")
async def test_mismatch(tape):
    await ask(tape, "something else")


@pytest.mark.tape(name="recorded")
async def test_exhausted(tape):
    for _ in range(3):
        await ask(tape, "hi")


@pytest.mark.tape(name="recorded")
async def test_unplayed(tape):
    await ask(tape, "hi")


async def test_secret(tape):
    await ask(tape, "my key is KEY")
""".replace("KEY", KEY)


_RECORDED: dict[str, bytes] = {}
"""The cassette ``test_record`` records, kept from the first project that recorded it (per process)."""


@pytest.fixture
def face_project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A fresh project holding ``test_record``'s cassette: recorded by pytest once, copied for the next tests."""
    project(pytester, test_face=FACE_TESTS)
    cassette = pytester.path / "cassettes" / "test_face" / "recorded.msgpack"
    if "recorded" in _RECORDED:
        cassette.parent.mkdir(parents=True)
        cassette.write_bytes(_RECORDED["recorded"])
        return pytester
    run_pytest(pytester, "test_face.py", "--tape-mode", "once", "-k", "test_record").assert_outcomes(
        passed=1, deselected=5
    )
    assert sorted(path.name for path in cassette.parent.parent.rglob("*") if path.is_file()) == ["recorded.msgpack"]
    _RECORDED["recorded"] = cassette.read_bytes()
    return pytester


@pytest.mark.parametrize(
    ("test", "args", "knobs"),
    [
        ("test_missing", (), ("--tape-mode once",)),
        ("test_mismatch", (), ("--tape-mode new_episodes", "@pytest.mark.tape(match_on=")),
        ("test_exhausted", (), ("--tape-mode new_episodes", "@pytest.mark.tape(allow_repeats=True)")),
        ("test_unplayed", ("--tape-strict",), ("--tape-strict:", "--tape-mode all")),
        ("test_secret", ("--tape-mode", "once"), ("@pytest.mark.tape(allow_secrets=[...])",)),
    ],
)
def test_pytest_hints_name_the_plugins_options_and_marker(
    face_project: pytest.Pytester, test: str, args: tuple[str, ...], knobs: tuple[str, ...]
) -> None:
    result = run_pytest(face_project, "test_face.py", "-k", test, *args)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == 1, result.stdout.str()
    assert_in_face("pytest", result.stdout.str(), *knobs)


def test_the_tape_marker_lets_calls_replay_again(face_project: pytest.Pytester) -> None:
    face_project.makepyfile(
        test_again="""
        import pytest
        from agent import ask


        @pytest.mark.tape(name="recorded", allow_repeats=True)
        async def test_again(tape):
            for _ in range(3):
                assert await ask(tape, "hi") == "echo: hi"
        """.replace("\n        ", "\n")
    )
    (face_project.path / "cassettes" / "test_again").mkdir()
    recorded = face_project.path / "cassettes" / "test_face" / "recorded.msgpack"
    (face_project.path / "cassettes" / "test_again" / "recorded.msgpack").write_bytes(recorded.read_bytes())
    run_pytest(face_project, "test_again.py").assert_outcomes(passed=1)


# -- CLI --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["play", "show", "serve"])
def test_cli_not_found_names_chunktape_record(runner: CliRunner, tmp_path: Path, command: str) -> None:
    result = runner.invoke(app, [command, str(tmp_path / "missing.msgpack")])
    assert result.exit_code == 3
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("chunktape: error: [CASSETTE_NOT_FOUND] ")
    assert_in_face("cli", line, "chunktape record -o FILE")


def test_cli_secret_names_allow_secret(runner: CliRunner, fake_provider: FakeProvider, tmp_path: Path) -> None:
    fake_provider.enqueue(_reply("Noted."))
    result = record(runner, fake_provider.url, tmp_path / "out.msgpack", "-p", f"my key is {PROMPT_KEY}")
    assert result.exit_code == 3
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("chunktape: error: [SECRET_DETECTED] ")
    assert_in_face("cli", line, "--allow-secret VALUE")


async def test_cli_words_a_miss_no_command_meets_without_another_faces_knobs() -> None:
    replay = ReplayAdapter(cassette("hi"))
    _, mismatch = await collect_until_error(replay.stream(request("bye")))
    await collect(replay.stream(request("hi")))
    _, exhausted = await collect_until_error(replay.stream(request("hi")))
    for error in (mismatch, exhausted):
        line = with_cli_hint(error, "play")
        assert line.startswith(f"[{error.code.value}] ")
        assert_in_face("cli", line)


# -- replay server ----------------------------------------------------------------------------------------


def _ask(server: ReplayServer, content: str) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "stream": True}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)


def test_server_mismatch_names_match_on_then_shows_the_diff() -> None:
    with ReplayServer(cassette("hi"), timing=Timing.instant()) as server:
        assert server.url.startswith("http://127.0.0.1:")
        response = _ask(server, "bye")
    assert response.headers["x-chunktape-error"] == "CASSETTE_MISMATCH"
    message = response.json()["error"]["message"]
    assert_in_face("server", message, "--match-on")
    assert message.index("--match-on") < message.index("Closest is interaction #0")
    assert "messages[0].content: recorded 'hi', requested 'bye'" in message


def test_server_exhausted_names_reset_and_repeat() -> None:
    with ReplayServer(cassette("hi"), timing=Timing.instant()) as server:
        assert _ask(server, "hi").status_code == 200
        response = _ask(server, "hi")
    assert response.headers["x-chunktape-error"] == "CASSETTE_EXHAUSTED"
    assert_in_face("server", response.json()["error"]["message"], "POST /reset", "--repeat")


def test_serve_a_missing_scenario_cassette_names_the_command_line(runner: CliRunner, tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    save_cassette(cassette("hi"), good)
    scenarios = tmp_path / "scenarios.json"
    scenarios.write_text('{"scenarios": [{"name": "gone", "cassette": "missing.msgpack"}]}')
    result = runner.invoke(app, ["serve", str(good), "--scenarios", str(scenarios)])
    assert result.exit_code != 0
    line = result.stderr.strip().splitlines()[-1]
    assert "missing.msgpack" in line
    assert_in_face("cli", line)


# -- audit of issue 13: time faults read the loop's clock only ------------------------------------------------


SCHEDULE_MS = (0, 10, 20, 220, 230, 240)
"""When each chunk of ``text_stream("a", "b")`` was recorded: three quick ones, a 200 ms gap, three more."""


def _timed_cassette() -> Cassette:
    events = [
        Event(t_ns=at * 1_000_000, chunk=chunk) for at, chunk in zip(SCHEDULE_MS, text_stream("a", "b"), strict=True)
    ]
    outcome = Completed(t_ns=events[-1].t_ns)
    return Cassette(
        interactions=[Interaction(request=RecordedRequest.from_options(request("hi")), events=events, outcome=outcome)]
    )


async def _played(fault: Fault) -> tuple[list[tuple[int, str]], str | None]:
    """Each chunk with its loop-time offset (ms) and type, and the code the stream ended with."""
    loop = asyncio.get_running_loop()
    replay = ReplayAdapter(_timed_cassette(), timing=Timing.recorded(), faults=[fault])
    start, seen = loop.time(), []
    try:
        async for chunk in replay.stream(request("hi")):
            seen.append((round((loop.time() - start) * 1000), type(chunk).__name__))
    except LlmError as error:
        return seen, error.code.value
    return seen, None


@pytest.mark.parametrize(
    "fault",
    [Disconnect(after_s=0.12), Stall(after_chunks=1, seconds=0.1), Latency(first_chunk_s=0.05, between_s=0.02)],
    ids=["disconnect-after-s", "stall", "latency"],
)
def test_a_time_fault_runs_the_same_schedule_in_real_and_virtual_time(fault: Fault) -> None:
    with asyncio.Runner(loop_factory=lambda: looptime.new_event_loop(start=0)) as runner:
        virtual = runner.run(_played(fault))
    real = asyncio.run(_played(fault))
    # Virtual time keeps the schedule exactly; real time must deliver the same chunks and end the same way
    # (the disconnect falls in the 200 ms gap, 100 ms from either neighbour: no timing is asserted).
    assert [kind for _, kind in real[0]] == [kind for _, kind in virtual[0]]
    assert real[1] == virtual[1]
    offsets = [at for at, _ in virtual[0]]
    if isinstance(fault, Disconnect):
        assert (offsets, virtual[1]) == ([0, 10, 20], "STREAM_ABORTED")
    elif isinstance(fault, Stall):  # the stall shifts the rest of the recorded schedule by its 100 ms
        assert (offsets, virtual[1]) == ([0, *(at + 100 for at in SCHEDULE_MS[1:])], None)
    else:
        assert virtual[1] is None
        assert offsets[0] >= 50  # the first chunk waits the added latency
