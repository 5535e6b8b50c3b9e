"""The pytest plugin never loses a recording: xdist writers of one cassette, secret hits, cassette names.

Driven through ``pytester`` subprocesses on small projects, reusing the project of ``test_pytest_plugin``.
"""

from __future__ import annotations

import stat

import pytest

from helpers import run_pytest
from test_pytest_plugin import project, questions

KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"

# Each test waits until both have started, so both sessions decide to record before either saves: the race
# `once` used to lose. With two tests and two workers, xdist hands one test to each worker.
SHARED = """
import time
from pathlib import Path

import pytest
from agent import ask


def meet(n):
    Path(f"started-{n}").touch()
    deadline = time.monotonic() + 60
    while not (Path("started-0").exists() and Path("started-1").exists()):
        assert time.monotonic() < deadline, "the other worker never started"
        time.sleep(0.01)


@pytest.mark.parametrize("n", range(2))
@pytest.mark.tape(name="shared")
async def test_shared(tape, n, request):
    prefix = Path("prefix.txt").read_text()
    if hasattr(request.config, "workerinput") and tape.mode != "none":  # an xdist worker, recording
        meet(n)
    assert await ask(tape, f"{prefix}{n}") == f"echo: {prefix}{n}"
"""


def _started(pytester: pytest.Pytester) -> None:
    for n in range(2):
        (pytester.path / f"started-{n}").unlink(missing_ok=True)


def test_once_under_xdist_keeps_both_workers_recordings_of_a_shared_cassette(pytester: pytest.Pytester) -> None:
    project(pytester, test_shared=SHARED)
    (pytester.path / "prefix.txt").write_text("s")
    result = run_pytest(pytester, "-n", "2", "--tape-mode", "once")
    result.assert_outcomes(passed=2)
    cassette = pytester.path / "cassettes" / "test_shared" / "shared.msgpack"
    assert sorted(map(str, questions(cassette))) == ["s0", "s1"]
    result.stdout.fnmatch_lines(["chunktape: wrote 1 cassette(s), 2 interaction(s):"])
    run_pytest(pytester, "--tape-mode", "none").assert_outcomes(passed=2)


def test_all_under_xdist_rewrites_a_shared_cassette_with_the_runs_union(pytester: pytest.Pytester) -> None:
    project(pytester, test_shared=SHARED)
    cassette = pytester.path / "cassettes" / "test_shared" / "shared.msgpack"
    (pytester.path / "prefix.txt").write_text("old")
    run_pytest(pytester, "-p", "no:xdist", "--tape-mode", "all").assert_outcomes(passed=2)
    assert questions(cassette) == ["old0", "old1"]  # one process: the second test adds to the first's

    _started(pytester)
    (pytester.path / "prefix.txt").write_text("new")
    run_pytest(pytester, "-n", "2", "--tape-mode", "all").assert_outcomes(passed=2)
    assert sorted(map(str, questions(cassette))) == ["new0", "new1"]  # the old run's went, none of this run's
    run_pytest(pytester, "--tape-mode", "none").assert_outcomes(passed=2)


SECRET = f"""
import pytest
from agent import ask


async def test_leaks(tape):
    assert await ask(tape, "{KEY}") == "echo: {KEY}"


@pytest.mark.tape(allow_secrets=["{KEY}"])
async def test_allowed(tape):
    assert await ask(tape, "{KEY}") == "echo: {KEY}"
"""


def test_a_secret_hit_keeps_the_recording_redacted_and_the_marker_accepts_it(pytester: pytest.Pytester) -> None:
    project(pytester, test_secret=SECRET)
    result = run_pytest(pytester, "--tape-mode", "once")
    result.assert_outcomes(passed=2, errors=1)
    folder = pytester.path / "cassettes" / "test_secret"
    failed = folder / "test_leaks.failed.msgpack"
    assert not (folder / "test_leaks.msgpack").exists()
    assert not (folder / "test_leaks.msgpack.journal").exists()
    assert stat.S_IMODE(failed.stat().st_mode) == 0o600
    assert KEY.encode() not in failed.read_bytes()
    assert questions(failed) == ["[REDACTED]"]
    output = result.stdout.str()
    assert KEY not in output
    result.stdout.fnmatch_lines(
        [
            "*[[]SECRET_DETECTED[]] *the recording was kept in "
            f"{failed} with every credential replaced by [[]REDACTED[]] (mode 0600); if it is not a real credential, "
            "list its value in @pytest.mark.tape(allow_secrets=[[]...[]]) and record again*",
            "  cassettes/test_secret/test_leaks.failed.msgpack (1 interaction(s)) from test_secret.py::test_leaks",
        ]
    )
    assert questions(folder / "test_allowed.msgpack") == [KEY]


NAMES = """
import pytest
from agent import ask


@pytest.mark.parametrize(
    "name", ["..", ".", "..msgpack", ".msgpack", "", "a//b", "a/", "a/../b", "x/..", "./x", "a\\\\b", "x\\ny"]
)
def test_bad_name(request, name):
    request.applymarker(pytest.mark.tape(name=name))
    request.getfixturevalue("tape")


@pytest.mark.parametrize("q", ["a/b", "a_b", ".x", "x", "%2Fx"], ids=str)
async def test_ids(tape, q):
    assert await ask(tape, q) == f"echo: {q}"
"""


def test_names_that_cannot_name_a_file_fail_their_test_and_distinct_ids_never_share_one(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, test_names=NAMES)
    result = run_pytest(pytester, "--tape-mode", "once")
    result.assert_outcomes(passed=5, failed=12)
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.tape: name='..' is only dots; give a file name such as name='shared' (a file in tape_dir), "
            "or a path with / such as name='../shared' (from tape_dir)",
            "@pytest.mark.tape: name='' is empty*",
            "@pytest.mark.tape: name='a//b' holds an empty or '.' folder*",
            "@pytest.mark.tape: name='a/' ends in an empty file name*",
            "@pytest.mark.tape: name='a/../b' holds '..' after a folder name*",
            "@pytest.mark.tape: name='x/..' ends in a file name that is only dots*",
            "@pytest.mark.tape: name='./x' holds an empty or '.' folder*",
            "@pytest.mark.tape: name='a\\\\b' holds a backslash or a control character*",
        ]
    )
    folder = pytester.path / "cassettes" / "test_names"
    files = sorted(path.name for path in folder.iterdir())
    assert len(files) == 5
    assert "cassette.msgpack" not in files
    assert all(not name.startswith(".") for name in files)
    for path in folder.iterdir():
        assert len(questions(path)) == 1
    assert sorted(str(questions(path)[0]) for path in folder.iterdir()) == sorted(["a/b", "a_b", ".x", "x", "%2Fx"])
    run_pytest(pytester, "--tape-strict", "-k", "test_ids").assert_outcomes(passed=5, deselected=12)
