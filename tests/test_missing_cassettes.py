"""One missing cassette, one error; and one recording shared by tests in other files.

With no cassettes, the first test of a run that needs a cassette fails saying so, with the command that records it;
every later test that needs the same cassette is skipped before it runs, naming that first test (pytest folds the
skips of one matrix into one line). A fault matrix's fault runs point at their ``[no-fault]`` run, which records.
"""

from __future__ import annotations

import re
import shlex

import pytest

from chunktape import load_cassette
from chunktape.faults import STANDARD_FAULTS
from helpers import run_pytest
from test_pytest_plugin import README, project, questions

FIVE = '["http-429", "http-500", "disconnect-mid-text", "stall-30s", "truncate"]'

MATRIX = f"""
import pytest
from chunktape import LlmError
from agent import ask


@pytest.mark.tape_fault_matrix(faults={FIVE})
async def test_agent(tape):
    try:
        assert await ask(tape, "hello") == "echo: hello"
    except LlmError:
        assert tape.fault is not None
"""


def readme_project(pytester: pytest.Pytester) -> None:
    section = README.read_text().split("## Record and replay in pytest", 1)[1].split("\n## ", 1)[0]
    for name, text in re.findall(r"```\w+ (\S+)\n(.*?)```", section, flags=re.DOTALL):
        (pytester.path / name).write_text(text)


def recording_command(output: str, nodeid: str) -> list[str]:
    """The arguments of the ``pytest ... --tape-mode once`` a failure printed for ``nodeid``."""
    found = re.search(rf"record it with: pytest ('{re.escape(nodeid)}' --tape-mode once)$", output, re.MULTILINE)
    assert found is not None, output
    return shlex.split(found.group(1))


def test_the_readme_example_without_cassettes_fails_once_per_cassette(pytester: pytest.Pytester) -> None:
    readme_project(pytester)
    result = run_pytest(pytester, "-rs")
    result.assert_outcomes(failed=2, skipped=len(STANDARD_FAULTS))
    output = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_capital: [[]CASSETTE_NOT_FOUND[]] no cassette at "
            "cassettes/test_agent/test_capital.msgpack (record mode 'none' only replays); "
            "record it with: pytest 'test_agent.py::test_capital' --tape-mode once",
            "(the code under test caught it; the test then failed: AssertionError: *",
            f"chunktape: 2 cassette(s) missing; the first test that needs each says how to record it, and the "
            f"{len(STANDARD_FAULTS)} other test(s) that replay them were skipped (-rs lists them):",
            "  cassettes/test_agent/test_capital.msgpack: test_agent.py::test_capital",
            "  cassettes/test_agent/test_capital_under_faults.msgpack: "
            f"test_agent.py::test_capital_under_faults[[]no-fault[]] ({len(STANDARD_FAULTS)} skipped)",
            f"SKIPPED [[]{len(STANDARD_FAULTS)}[]] test_agent.py:*: chunktape: "
            "cassettes/test_agent/test_capital_under_faults.msgpack does not exist; "
            "test_agent.py::test_capital_under_faults[[]no-fault[]] records it",
        ]
    )
    assert output.count("record it with:") == 2
    # The command it printed records that cassette; the run then fails once, for the other one.
    run_pytest(pytester, *recording_command(output, "test_agent.py::test_capital")).assert_outcomes(passed=1)
    again = run_pytest(pytester)
    again.assert_outcomes(passed=1, failed=1, skipped=len(STANDARD_FAULTS))
    args = recording_command(again.stdout.str(), "test_agent.py::test_capital_under_faults[no-fault]")
    run_pytest(pytester, *args).assert_outcomes(passed=1)
    run_pytest(pytester).assert_outcomes(passed=len(STANDARD_FAULTS) + 2)


@pytest.mark.parametrize("workers", [None, "2"])
def test_a_fault_matrix_without_a_cassette_is_one_failure(pytester: pytest.Pytester, workers: str | None) -> None:
    project(pytester, test_matrix=MATRIX)
    result = run_pytest(pytester, "-rs", *(("-n", workers) if workers else ()))
    result.assert_outcomes(failed=1, skipped=5)
    output = result.stdout.str()
    assert output.count("record it with:") == 1
    assert "record it with: pytest 'test_matrix.py::test_agent[no-fault]' --tape-mode once" in output
    result.stdout.fnmatch_lines(
        ["  cassettes/test_matrix/test_agent.msgpack: test_matrix.py::test_agent[[]no-fault[]] (5 skipped)"]
    )


def test_fault_runs_alone_fail_once_with_the_command_of_their_baseline(pytester: pytest.Pytester) -> None:
    project(pytester, test_matrix=MATRIX)
    result = run_pytest(pytester, "-rs", "-k", "http-429 or http-500")
    result.assert_outcomes(errors=1, skipped=1, deselected=4)
    result.stdout.fnmatch_lines(
        [
            "*[[]CASSETTE_NOT_FOUND[]] the fault matrix replays cassettes/test_matrix/test_agent.msgpack, which "
            "does not exist yet; its fault-free run records it: "
            "pytest 'test_matrix.py::test_agent[[]no-fault[]]' --tape-mode once",
            "SKIPPED [[]1[]] test_matrix.py:*: chunktape: cassettes/test_matrix/test_agent.msgpack does not exist; "
            "see test_matrix.py::test_agent[[]http-429[]]",
        ]
    )


SHARED = """
import pytest
from agent import ask


@pytest.mark.tape(name="shared")
async def test_first(tape):
    assert await ask(tape, "hello") == "echo: hello"


@pytest.mark.tape(name="shared")
async def test_second(tape):
    assert await ask(tape, "hello") == "echo: hello"


@pytest.mark.tape(name="shared")
def test_over_http(tape_server_url):
    pass


async def test_own(tape):
    assert await ask(tape, "own") == "echo: own"
"""


@pytest.mark.parametrize("workers", [None, "2"])
def test_tests_sharing_a_missing_cassette_fail_once_and_point_at_the_first(
    pytester: pytest.Pytester, workers: str | None
) -> None:
    project(pytester, test_shared=SHARED)
    # Under pytest-xdist the workers share who came first through the run's folder (loadfile: one worker, in order).
    result = run_pytest(pytester, "-rs", *(("-n", workers, "--dist", "loadfile") if workers else ()))
    result.assert_outcomes(failed=2, skipped=2)  # shared.msgpack once, test_own.msgpack once
    result.stdout.fnmatch_lines_random(
        [
            "*record it with: pytest 'test_shared.py::test_first' --tape-mode once",
            "*record it with: pytest 'test_shared.py::test_own' --tape-mode once",
            "SKIPPED [[]1[]] test_shared.py:10: chunktape: cassettes/test_shared/shared.msgpack does not exist; "
            "see test_shared.py::test_first",
            "SKIPPED [[]1[]] test_shared.py:15: chunktape: cassettes/test_shared/shared.msgpack does not exist; "
            "see test_shared.py::test_first",
        ]
    )
    if workers:
        return
    # The first to need it, in any order: tape_server_url's setup reports it when it comes first.
    alone = run_pytest(pytester, "-rs", "-k", "over_http or second")
    alone.assert_outcomes(passed=0, skipped=1, failed=1)
    assert "record it with: pytest 'test_shared.py::test_second' --tape-mode once" in alone.stdout.str()
    first_http = run_pytest(pytester, "-rs", "-k", "over_http")
    first_http.assert_outcomes(errors=1)
    assert "record it with: pytest 'test_shared.py::test_over_http' --tape-mode once" in first_http.stdout.str()


SHARING_TEST = """
import pytest
from agent import ask


@pytest.mark.tape(name={name!r})
async def test_{label}(tape):
    assert await ask(tape, "capital?") == "echo: capital?"
"""


def test_two_test_files_share_one_recording_through_a_name_with_a_path(pytester: pytest.Pytester) -> None:
    """``name="../capital"``: from each module's folder (``cassettes/<module>``) to ``cassettes/capital.msgpack``."""
    project(
        pytester,
        test_one=SHARING_TEST.format(name="../capital", label="one"),
        test_two=SHARING_TEST.format(name="../capital", label="two"),
    )
    run_pytest(pytester, "--tape-mode", "once", "test_one.py").assert_outcomes(passed=1)
    shared = pytester.path / "cassettes" / "capital.msgpack"
    assert questions(shared) == ["capital?"]
    assert not (pytester.path / "cassettes" / "test_one").exists()  # no empty module folder on the way
    result = run_pytest(pytester, "--tape-strict")
    result.assert_outcomes(passed=2)
    assert sorted(path.name for path in (pytester.path / "cassettes").iterdir()) == ["capital.msgpack"]


def test_tests_in_other_folders_share_one_recording_through_an_absolute_name(pytester: pytest.Pytester) -> None:
    """The recipe of docs/pytest.md for test files in different folders: an absolute path from ``__file__``."""
    project(pytester, test_placeholder="")
    body = """
import pytest
from pathlib import Path
from agent import ask

SHARED = Path(__file__).resolve().parents[{up}] / "recordings"


@pytest.mark.tape(name=str(SHARED / "capital"))
async def test_{label}(tape):
    assert await ask(tape, "capital?") == "echo: capital?"
"""
    for folder, up, label in [("unit", 1, "unit"), ("deep/integration", 2, "integration")]:
        (pytester.path / folder).mkdir(parents=True)
        (pytester.path / folder / f"test_{label}.py").write_text(body.format(up=up, label=label))
    run_pytest(pytester, "--tape-mode", "once", "unit").assert_outcomes(passed=1)
    cassette = load_cassette(pytester.path / "recordings" / "capital.msgpack")
    assert len(cassette.interactions) == 1
    run_pytest(pytester, "--tape-strict").assert_outcomes(passed=2)
