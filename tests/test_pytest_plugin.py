"""The pytest plugin, driven through ``pytester`` on small test projects, as a user would run it.

Each ``run_pytest`` is an in-process pytest session (``pytester.runpytest``); only the xdist test spawns processes (its
workers).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from chunktape import load_cassette
from chunktape.faults import STANDARD_FAULTS
from helpers import run_pytest

INI = """
[pytest]
asyncio_mode = {asyncio_mode}
asyncio_default_fixture_loop_scope = function
filterwarnings = error
xfail_strict = true
addopts = --strict-markers -p no:cacheprovider -p no:hypothesispytest -p no:looptime
{extra}
"""

AGENT = '''
"""A tiny agent: streams one reply per question."""
from chunktape import GenerateOptions, LlmAdapter, Message, TextDelta


async def ask(adapter: LlmAdapter, question: str) -> str:
    options = GenerateOptions(model="m", messages=[Message(role="user", content=question)])
    return "".join([chunk.text async for chunk in adapter.stream(options) if isinstance(chunk, TextDelta)])
'''

# The live adapter echoes; with LIVE=raise in the environment, building it fails the test.
CONFTEST = """
import os
from pathlib import Path

import pytest

from chunktape.providers._scripted import ScriptedAdapter, ScriptedTurn


class Echo(ScriptedAdapter):
    async def aclose(self) -> None:
        import asyncio

        asyncio.get_running_loop()
        with Path("closed.log").open("a") as log:
            log.write("closed\\n")


@pytest.fixture
def tape_live_adapter():
    def build():
        if os.environ.get("LIVE") == "raise":
            raise RuntimeError("the live adapter was built")
        return Echo(lambda options, n: ScriptedTurn(text=f"echo: {options.messages[-1].content}"))

    return build
"""

QUESTIONS_TEST = """
from pathlib import Path

from agent import ask


async def test_chat(tape):
    for question in Path("questions.txt").read_text().split():
        assert await ask(tape, question) == f"echo: {question}"
    assert Path("fail.txt").read_text() == "no"
"""


def project(pytester: pytest.Pytester, asyncio_mode: str = "auto", ini: str = "", **files: str) -> None:
    pytester.makefile(".ini", pytest=INI.format(asyncio_mode=asyncio_mode, extra=ini))
    pytester.makepyfile(agent=AGENT, conftest=CONFTEST)
    pytester.makepyfile(**{name: textwrap.dedent(text) for name, text in files.items()})


def questions(path: Path) -> list[str | None]:
    return [interaction.request.messages[-1].content for interaction in load_cassette(path).interactions]


def test_records_once_then_replays_offline_without_building_the_live_adapter(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project(
        pytester,
        test_agent="""
        import pytest
        from agent import ask


        async def test_hello(tape):
            assert await ask(tape, "hello") == "echo: hello"
            assert tape.path.name == "test_hello.msgpack"
            assert [call.recorded for call in tape.calls] == [tape.mode == "once"]


        class TestGroup:
            @pytest.mark.parametrize("q", ["a", "b/c", "long" * 40], ids=str)
            async def test_param(self, tape, q):
                assert await ask(tape, q) == f"echo: {q}"
        """,
    )
    result = run_pytest(pytester, "--tape-mode", "once")
    result.assert_outcomes(passed=4)
    folder = pytester.path / "cassettes" / "test_agent"
    names = sorted(path.name for path in folder.iterdir())
    assert names[:2] == ["TestGroup.test_param[a].msgpack", "TestGroup.test_param[b%2Fc].msgpack"]
    assert re.fullmatch(r"TestGroup\.test_param\[[long]+-[0-9a-f]{12}\.msgpack", names[2])
    assert len(names[2]) == 100 + len(".msgpack")
    assert names[3] == "test_hello.msgpack"
    assert questions(folder / "test_hello.msgpack") == ["hello"]
    result.stdout.fnmatch_lines(
        [
            "chunktape: wrote 4 cassette(s), 4 interaction(s):",
            "  cassettes/test_agent/TestGroup.test_param[a].msgpack (1 interaction(s))",
        ]
    )
    assert (pytester.path / "closed.log").read_text() == "closed\n" * 4  # closed at teardown, on a loop

    monkeypatch.setenv("LIVE", "raise")
    offline = run_pytest(pytester, "--tape-strict")
    offline.assert_outcomes(passed=4)
    assert "chunktape: wrote" not in offline.stdout.str()


def test_new_episodes_appends_all_rewrites_and_a_failing_recording_is_kept_aside(pytester: pytest.Pytester) -> None:
    project(pytester, test_chat=QUESTIONS_TEST)
    cassette = pytester.path / "cassettes" / "test_chat" / "test_chat.msgpack"
    (pytester.path / "fail.txt").write_text("no")
    (pytester.path / "questions.txt").write_text("a")
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=1)

    (pytester.path / "questions.txt").write_text("a b")
    appended = run_pytest(pytester, "--tape-mode", "new_episodes")
    appended.assert_outcomes(passed=1)
    assert questions(cassette) == ["a", "b"]
    appended.stdout.fnmatch_lines(["  cassettes/test_chat/test_chat.msgpack (2 interaction(s))"])

    (pytester.path / "questions.txt").write_text("c")
    run_pytest(pytester, "--tape-mode", "all").assert_outcomes(passed=1)
    assert questions(cassette) == ["c"]

    (pytester.path / "questions.txt").write_text("d")
    (pytester.path / "fail.txt").write_text("yes")
    failed = run_pytest(pytester, "--tape-mode", "all")
    failed.assert_outcomes(failed=1)
    assert questions(cassette) == ["c"]  # the good cassette is untouched
    assert questions(cassette.with_name("test_chat.failed.msgpack")) == ["d"]
    failed.stdout.fnmatch_lines(
        [
            "chunktape: 1 test(s) did not pass while recording; their cassettes were left as they were and the "
            "recordings kept beside them:",
            "  cassettes/test_chat/test_chat.failed.msgpack (1 interaction(s)) from test_chat.py::test_chat",
        ]
    )
    assert not list(cassette.parent.glob("*journal*"))


def test_replay_misses_fail_with_the_cassette_message_not_a_traceback(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        test_misses="""
        import pytest
        from chunktape import LlmError
        from agent import ask


        async def test_missing(tape):
            await ask(tape, "anyone?")


        @pytest.mark.tape(name="recorded")
        async def test_mismatch(tape):
            await ask(tape, "something else")


        @pytest.mark.tape(name="recorded")
        async def test_caught(tape):
            try:
                await ask(tape, "swallowed")
            except LlmError:
                pass
            assert False, "the agent gave up"


        @pytest.mark.tape(name="corrupt")
        async def test_corrupt(tape):
            pass


        @pytest.mark.tape(name="recorded")
        async def test_record(tape):
            assert await ask(tape, "hello") == "echo: hello"
        """,
    )
    other = pytester.mkdir("other")  # its own project: no conftest providing a live adapter
    (other / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    (other / "test_nolive.py").write_text(AGENT + "\n\nasync def test_needs_live(tape):\n    await ask(tape, 'x')\n")
    run_pytest(pytester, "test_misses.py", "--tape-mode", "once", "-k", "test_record").assert_outcomes(
        passed=1, deselected=4
    )
    (pytester.path / "cassettes" / "test_misses" / "corrupt.msgpack").write_bytes(b"not a cassette")

    result = run_pytest(pytester, "test_misses.py", "-k", "not test_record")
    result.assert_outcomes(failed=3, errors=1)
    result.stdout.fnmatch_lines(["cassettes/test_misses/corrupt.msgpack: [[]CASSETTE_CORRUPT[]] *"])
    result.stdout.fnmatch_lines(
        [
            "test_misses.py::test_missing: [[]CASSETTE_NOT_FOUND[]] no cassette at cassettes/test_misses/"
            "test_missing.msgpack (record mode 'none' only replays); record it with: "
            "pytest 'test_misses.py::test_missing' --tape-mode once",
        ]
    )
    result.stdout.fnmatch_lines(["test_misses.py::test_mismatch: [[]CASSETTE_MISMATCH[]] *", "*something else*"])
    result.stdout.fnmatch_lines(
        ["*the agent gave up*", "*the cassette reported (and the test caught): [[]CASSETTE_MISMATCH[]]*"]
    )
    output = result.stdout.str()
    assert "replaying.py" not in output  # no frames from inside chunktape
    assert "session.py" not in output

    nolive = run_pytest(pytester, "other", "--tape-mode", "once")
    nolive.assert_outcomes(failed=1)
    nolive.stdout.fnmatch_lines(["*recording needs a live adapter, and none is configured*", "*def tape_live_adapter*"])


def test_fault_matrix_runs_a_baseline_and_one_test_per_fault_on_one_cassette(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        test_matrix="""
        import pytest
        from chunktape import LlmError
        from agent import ask

        FAULTS = ["http-429", "disconnect-mid-text", {"type": "http-error", "status": 418, "id": "teapot"}]


        @pytest.mark.tape_fault_matrix(faults=FAULTS)
        async def test_agent(tape):
            try:
                reply = await ask(tape, "hello")
            except LlmError as error:
                assert tape.fault is not None
                assert tape.injected == [tape.fault.id]
                assert error.code in {"PROVIDER_HTTP_ERROR", "STREAM_ABORTED"}
            else:
                assert tape.fault is None
                assert reply == "echo: hello"


        @pytest.mark.parametrize("q", ["x", "y"])
        @pytest.mark.tape_fault_matrix(faults=["http-500"])
        async def test_both(tape, q):
            with pytest.raises(LlmError) if tape.fault else __import__("contextlib").nullcontext():
                assert await ask(tape, q) == f"echo: {q}"


        @pytest.mark.tape_fault_matrix
        def test_default(tape):
            pass
        """,
    )
    missing = run_pytest(pytester, "-k", "test_agent and http-429")
    missing.assert_outcomes(errors=1, deselected=len(STANDARD_FAULTS) + 8)
    missing.stdout.fnmatch_lines(
        [
            "*[[]CASSETTE_NOT_FOUND[]] the fault matrix replays cassettes/test_matrix/test_agent.msgpack, which does "
            "not exist yet; its fault-free run records it: pytest 'test_matrix.py::test_agent[[]no-fault[]]' "
            "--tape-mode once"
        ]
    )

    result = run_pytest(pytester, "--tape-mode", "once", "-v", "-k", "not test_default")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(
        [
            "test_matrix.py::test_agent[[]no-fault[]] PASSED*",
            "test_matrix.py::test_agent[[]http-429[]] PASSED*",
            "test_matrix.py::test_agent[[]disconnect-mid-text[]] PASSED*",
            "test_matrix.py::test_agent[[]teapot[]] PASSED*",
            "test_matrix.py::test_both[[]x-no-fault[]] PASSED*",
            "test_matrix.py::test_both[[]x-http-500[]] PASSED*",
            "test_matrix.py::test_both[[]y-no-fault[]] PASSED*",
        ]
    )
    folder = pytester.path / "cassettes" / "test_matrix"
    assert sorted(path.name for path in folder.iterdir()) == [
        "test_agent.msgpack",
        "test_both[x].msgpack",
        "test_both[y].msgpack",
    ]
    assert questions(folder / "test_agent.msgpack") == ["hello"]

    collected = run_pytest(pytester, "--collect-only", "-q", "-k", "test_default")
    ids = re.findall(r"test_default\[(.+)\]", collected.stdout.str())
    assert ids == ["no-fault", *STANDARD_FAULTS]


def test_strict_fails_a_test_that_leaves_interactions_unplayed(pytester: pytest.Pytester) -> None:
    project(pytester, test_chat=QUESTIONS_TEST)
    (pytester.path / "fail.txt").write_text("no")
    (pytester.path / "questions.txt").write_text("a b")
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=1)
    (pytester.path / "questions.txt").write_text("a")

    run_pytest(pytester).assert_outcomes(passed=1)
    strict = run_pytest(pytester, "--tape-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(
        [
            "*--tape-strict: 1 of 2 recorded interaction(s) in *test_chat.msgpack were never played: "
            "#1 (model 'm', last user message 'b'); the test made fewer calls than were recorded; "
            "re-record with --tape-mode all to drop them"
        ]
    )
    pytester.makefile(".ini", pytest=INI.format(asyncio_mode="auto", extra="tape_strict = true"))
    run_pytest(pytester).assert_outcomes(failed=1)


def test_recording_under_xdist_writes_every_cassette_and_appends_to_a_shared_one(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        test_parallel="""
        import pytest
        from agent import ask


        @pytest.mark.parametrize("n", range(4))
        async def test_own(tape, n):
            assert await ask(tape, f"q{n}") == f"echo: q{n}"


        @pytest.mark.parametrize("n", range(4))
        @pytest.mark.tape(name="shared", mode="new_episodes")
        async def test_shared(tape, n):
            assert await ask(tape, f"s{n}") == f"echo: s{n}"
        """,
    )
    # xdist's controller in this interpreter, as in test_plugin_safety: the workers that record are fresh processes.
    result = run_pytest(pytester, "-n", "2", "-k", "test_own", "--tape-mode", "once")
    result.assert_outcomes(passed=4)
    folder = pytester.path / "cassettes" / "test_parallel"
    for n in range(4):
        assert questions(folder / f"test_own[{n}].msgpack") == [f"q{n}"]
    result.stdout.fnmatch_lines(["chunktape: wrote 4 cassette(s), 4 interaction(s):"])

    run_pytest(pytester, "-n", "2", "-k", "test_shared").assert_outcomes(passed=4)
    assert sorted(map(str, questions(folder / "shared.msgpack"))) == ["s0", "s1", "s2", "s3"]


def test_precedence_is_command_line_then_marker_then_ini_then_default(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        test_modes="""
        import pytest
        from pathlib import Path


        def test_plain(tape, tape_dir):
            Path("plain.txt").write_text(f"{tape.mode} {tape.path.relative_to(Path.cwd())}")


        @pytest.mark.tape(mode="all", name="custom name")
        def test_marked(tape):
            Path("marked.txt").write_text(f"{tape.mode} {tape.path.name}")
        """,
    )

    def seen(*args: str) -> tuple[str, str]:
        run_pytest(pytester, *args).assert_outcomes(passed=2)
        return (pytester.path / "plain.txt").read_text(), (pytester.path / "marked.txt").read_text()

    default = seen()
    assert default == ("none cassettes/test_modes/test_plain.msgpack", "all custom%20name.msgpack")
    pytester.makefile(".ini", pytest=INI.format(asyncio_mode="auto", extra="tape_mode = once\ntape_dir = ini-tapes"))
    assert seen() == ("once ini-tapes/test_modes/test_plain.msgpack", "all custom%20name.msgpack")
    cli = seen("--tape-mode", "new_episodes", "--tape-dir", "cli-tapes")
    assert cli == ("new_episodes cli-tapes/test_modes/test_plain.msgpack", "new_episodes custom%20name.msgpack")

    pytester.makefile(".ini", pytest=INI.format(asyncio_mode="auto", extra="tape_mode = sometimes"))
    bad = run_pytest(pytester)
    bad.stderr.fnmatch_lines(
        ["*tape_mode = 'sometimes' is not a record mode; valid: none, once, new_episodes, all, rewrite"]
    )
    bad_cli = run_pytest(pytester, "--tape-mode", "sometimes")
    bad_cli.stderr.fnmatch_lines(["*argument --tape-mode: invalid choice: 'sometimes'*"])


ASYNC_TESTS = """
import pytest
from agent import ask


@pytest.mark.asyncio
async def test_asyncio(tape):
    assert await ask(tape, "asyncio") == "echo: asyncio"


@pytest.mark.anyio
async def test_anyio(tape):
    assert await ask(tape, "anyio") == "echo: anyio"


@pytest.fixture
def anyio_backend():
    return "asyncio"
"""

# A tape_live_adapter fixture may return an adapter rather than a factory; the user's fixture owns it.
BORROWED = """
import pytest
from agent import ask
from chunktape.providers._scripted import ScriptedTurn
from conftest import Echo


@pytest.fixture
def tape_live_adapter():
    return Echo([ScriptedTurn(text="mine")])


@pytest.mark.asyncio
async def test_borrowed(tape):
    assert await ask(tape, "mine") == "mine"
"""


def test_async_tests_under_pytest_asyncio_strict_mode_and_anyio(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every installed plugin autoloaded, as users run: ours comes from its ``pytest11`` entry point alone
    (no ``-p chunktape``), beside pytest-asyncio's strict mode and anyio's plugin."""
    project(pytester, asyncio_mode="strict", test_async=ASYNC_TESTS, test_borrowed=BORROWED)
    result = pytester.runpytest("-p", "no:langsmith_plugin", "--tape-mode", "once")
    result.assert_outcomes(passed=3)
    folder = pytester.path / "cassettes"
    assert questions(folder / "test_async" / "test_asyncio.msgpack") == ["asyncio"]
    assert questions(folder / "test_async" / "test_anyio.msgpack") == ["anyio"]
    assert questions(folder / "test_borrowed" / "test_borrowed.msgpack") == ["mine"]
    # The two adapters the factory built were closed; the one the fixture returned is the fixture's to close.
    assert (pytester.path / "closed.log").read_text() == "closed\n" * 2
    monkeypatch.setenv("LIVE", "raise")
    pytester.runpytest("-p", "no:langsmith_plugin", "--tape-strict").assert_outcomes(passed=3)


def test_markers_are_registered_with_their_signature(pytester: pytest.Pytester) -> None:
    # The project's ini keeps pytest-asyncio's unset-loop-scope warning out of this interpreter.
    pytester.makefile(".ini", pytest=INI.format(asyncio_mode="auto", extra=""))
    result = run_pytest(pytester, "--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.tape(name=None, mode=None, faults=(), timing=None, match_on=None, allow_repeats=False, "
            "allow_secrets=(), virtual_time=None, max_age=None):*",
            "@pytest.mark.tape_fault_matrix(faults=STANDARD_FAULTS, calls=None):*",
        ]
    )
    help_text = run_pytest(pytester, "--help").stdout.str()
    assert "chunktape: record and replay LLM streams:" in help_text
    assert "--tape-mode={none,once,new_episodes,all,rewrite}" in help_text
    assert "--tape-prune=[{list,delete}]" in help_text


README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_example_records_then_replays(pytester: pytest.Pytester) -> None:
    """The README's "Record and replay in pytest" files, as written there: no drift between docs and code."""
    section = README.read_text().split("## Record and replay in pytest", 1)[1].split("\n## ", 1)[0]
    files = dict(re.findall(r"```\w+ (\S+)\n(.*?)```", section, flags=re.DOTALL))
    assert sorted(files) == ["conftest.py", "pyproject.toml", "test_agent.py"]
    for name, text in files.items():
        (pytester.path / name).write_text(text)

    recorded = run_pytest(pytester, "--tape-mode", "once", "-v")
    recorded.assert_outcomes(passed=len(STANDARD_FAULTS) + 2)
    recorded.stdout.fnmatch_lines(
        [
            "test_agent.py::test_capital_under_faults[[]no-fault[]] PASSED*",
            *(f"test_agent.py::test_capital_under_faults[[]{ident}[]] PASSED*" for ident in STANDARD_FAULTS),
            "chunktape: wrote 2 cassette(s), 2 interaction(s):",
        ]
    )
    folder = pytester.path / "cassettes" / "test_agent"
    cassettes = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert sorted(cassettes) == ["test_capital.msgpack", "test_capital_under_faults.msgpack"]

    offline = run_pytest(pytester, "--tape-strict")
    offline.assert_outcomes(passed=len(STANDARD_FAULTS) + 2)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == cassettes


def test_a_bad_marker_fails_only_its_test_with_its_message_once(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        test_bad="""
import pytest

@pytest.mark.tape_fault_matrix(faults=123)
async def test_bad_matrix(tape):
    pass

@pytest.mark.tape(faults=["no-such-fault"])
async def test_bad_fault(tape):
    pass

def test_unrelated():
    pass
""",
    )
    result = run_pytest(pytester, "-rN")  # no short summary: its width depends on the terminal
    result.assert_outcomes(passed=1, errors=2)
    output = result.stdout.str()
    assert "tape_fault_matrix(faults=...) takes a mapping or a sequence of faults" in output
    assert output.count("unknown standard fault 'no-such-fault'") == 1
    assert "During handling of the above exception" not in output


def test_a_fault_matrix_given_as_a_mapping_names_its_runs_and_shares_one_cassette(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        test_map="""
        import pytest
        from chunktape import LlmError
        from chunktape.faults import HttpError
        from agent import ask


        @pytest.mark.tape_fault_matrix(faults={"slow": HttpError(status=503)})
        async def test_agent(tape):
            if tape.fault is None:
                assert await ask(tape, "hello") == "echo: hello"
            else:
                assert tape.fault_id == "slow"
                with pytest.raises(LlmError):
                    await ask(tape, "hello")
        """,
    )
    result = run_pytest(pytester, "--tape-mode", "once", "-v", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_agent[[]no-fault[]] PASSED*", "*test_agent[[]slow[]] PASSED*"])
    assert sorted(path.name for path in (pytester.path / "cassettes" / "test_map").iterdir()) == ["test_agent.msgpack"]
