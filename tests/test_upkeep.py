"""Keeping a cassette folder healthy from pytest: ``--tape-mode rewrite``, the drift printed for each re-recorded
cassette, ``tape_max_age`` (ini, marker, tape_config), ``--tape-prune`` and ``--tape-report``, through pytester."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from chunktape import load_cassette, save_cassette
from helpers import cassette_of, interaction_of, run_pytest, text_stream
from test_pytest_plugin import AGENT, INI

# The live adapter answers "<WORD>: <question>" (WORD from the environment), so a re-recording can drift.
CONFTEST = """
import os

import pytest

from chunktape.providers._scripted import ScriptedAdapter, ScriptedTurn


@pytest.fixture
def tape_live_adapter():
    word = os.environ.get("ECHO_WORD", "echo")
    return lambda: ScriptedAdapter(lambda options, n: ScriptedTurn(text=f"{word}: {options.messages[-1].content}"))
"""

TESTS = """
import pytest

from agent import ask


async def test_hi(tape):
    assert (await ask(tape, "hi")).endswith(": hi")


async def test_no_call(tape):
    pass


@pytest.mark.skip(reason="not today")
async def test_skipped(tape):
    await ask(tape, "never")
"""


def _project(pytester: pytest.Pytester, ini: str = "", **files: str) -> Path:
    pytester.makefile(".ini", pytest=INI.format(asyncio_mode="auto", extra=ini))
    pytester.makepyfile(agent=AGENT, conftest=CONFTEST)
    pytester.makepyfile(**{name: textwrap.dedent(text) for name, text in (files or {"test_x": TESTS}).items()})
    return pytester.path / "cassettes" / "test_x"


def _age(path: Path, days: int) -> None:
    """Make the cassette at ``path`` look recorded ``days`` days ago."""
    cassette = load_cassette(path)
    meta = msgspec.structs.replace(cassette.meta, created_at=datetime.now(UTC) - timedelta(days=days, hours=1))
    save_cassette(msgspec.structs.replace(cassette, meta=meta), path)


def _text(path: Path) -> str:
    return "".join(getattr(chunk, "text", "") for chunk in load_cassette(path).interactions[0].chunks)


# -- rewrite and drift -----------------------------------------------------------------------------


def test_rewrite_rerecords_the_tests_that_run_and_prints_what_changed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _project(pytester)
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=2, skipped=1)
    assert _text(folder / "test_hi.msgpack") == "echo: hi"
    monkeypatch.setenv("ECHO_WORD", "hello")
    result = run_pytest(pytester, "--tape-mode", "rewrite", "-k", "test_hi")
    result.assert_outcomes(passed=1, deselected=2)
    assert _text(folder / "test_hi.msgpack") == "hello: hi"
    result.stdout.fnmatch_lines(
        [
            "chunktape: re-recorded 1 cassette(s); what changed:",
            # A live re-recording's timing is this machine's: on a busy one its shift is printed too ("; timing ...").
            "  cassettes/test_x/test_hi.msgpack (--tape-mode rewrite): text changed in #0: 'echo: hi' -> 'hello: hi'*",
        ]
    )
    # --tape-mode all is a re-recording too: its drift is printed the same way (here: none in content)
    again = run_pytest(pytester, "--tape-mode", "all", "-k", "test_hi")
    again.stdout.fnmatch_lines(["  cassettes/test_x/test_hi.msgpack (--tape-mode all): *"])
    assert "text changed" not in again.stdout.str()


def test_rewrite_removes_the_cassette_of_a_passing_test_that_made_no_call(pytester: pytest.Pytester) -> None:
    folder = _project(pytester)
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=2, skipped=1)
    stale_copy = folder / "test_no_call.msgpack"
    save_cassette(load_cassette(folder / "test_hi.msgpack"), stale_copy)  # a call this test no longer makes
    result = run_pytest(pytester, "--tape-mode", "rewrite")
    result.assert_outcomes(passed=2, skipped=1)
    assert not stale_copy.exists()
    assert (folder / "test_hi.msgpack").exists()
    result.stdout.fnmatch_lines(
        [
            "chunktape: removed 1 cassette(s) whose passing test made no call (--tape-mode rewrite):",
            "  cassettes/test_x/test_no_call.msgpack",
        ]
    )


def test_a_failing_test_never_loses_its_cassette_to_rewrite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _project(
        pytester,
        test_x="""
        import os

        from agent import ask


        async def test_hi(tape):
            await ask(tape, "hi")
            assert os.environ.get("ECHO_WORD") != "broken"


        async def test_no_call(tape):
            assert os.environ.get("ECHO_WORD") != "broken"
        """,
    )
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=2)
    save_cassette(load_cassette(folder / "test_hi.msgpack"), folder / "test_no_call.msgpack")
    monkeypatch.setenv("ECHO_WORD", "broken")
    run_pytest(pytester, "--tape-mode", "rewrite").assert_outcomes(failed=2)
    assert _text(folder / "test_hi.msgpack") == "echo: hi"  # the old recording stays; the new one is kept aside
    assert _text(folder / "test_hi.failed.msgpack") == "broken: hi"
    assert (folder / "test_no_call.msgpack").exists()


# -- staleness -------------------------------------------------------------------------------------


def test_a_stale_cassette_fails_in_none_with_its_age_and_the_command(pytester: pytest.Pytester) -> None:
    folder = _project(pytester, ini="tape_max_age = 30d")
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=2, skipped=1)
    _age(folder / "test_hi.msgpack", 40)
    result = run_pytest(pytester)
    result.assert_outcomes(passed=1, skipped=1, errors=1)
    created = (datetime.now(UTC) - timedelta(days=40, hours=1)).strftime("%Y-%m-%d")
    result.stdout.fnmatch_lines(
        [
            f"[[]CASSETTE_STALE] cassettes/test_x/test_hi.msgpack was recorded 40 days ago ({created}), longer ago "
            "than the maximum age of 30 days (the tape_max_age ini option); re-record it: "
            "pytest 'test_x.py::test_hi' --tape-mode rewrite"
        ]
    )


def test_a_stale_cassette_is_rerecorded_in_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _project(pytester, ini="tape_max_age = 30d")
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=2, skipped=1)
    _age(folder / "test_hi.msgpack", 40)
    monkeypatch.setenv("ECHO_WORD", "fresh")
    result = run_pytest(pytester, "--tape-mode", "once")
    result.assert_outcomes(passed=2, skipped=1)
    assert _text(folder / "test_hi.msgpack") == "fresh: hi"
    assert datetime.now(UTC) - load_cassette(folder / "test_hi.msgpack").meta.created_at < timedelta(hours=1)
    result.stdout.fnmatch_lines(
        [
            "  cassettes/test_x/test_hi.msgpack (stale: recorded 40 days ago (*), longer ago than the maximum age of "
            "30 days): text changed in #0: 'echo: hi' -> 'fresh: hi'*"  # and the timing's shift, on a busy machine
        ]
    )


def test_the_marker_and_tape_config_set_the_max_age_over_the_ini(pytester: pytest.Pytester) -> None:
    folder = _project(
        pytester,
        ini="tape_max_age = 1d",
        test_x="""
        import pytest

        from agent import ask


        @pytest.fixture
        def tape_config():
            return {"max_age": "10d"}


        @pytest.mark.tape(max_age="60d")
        async def test_marker(tape):
            await ask(tape, "hi")


        async def test_config(tape):
            await ask(tape, "hi")


        @pytest.mark.tape(max_age="ten days")
        async def test_bad(tape):
            await ask(tape, "hi")
        """,
    )
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=3)
    for name in ("test_marker", "test_config", "test_bad"):
        _age(folder / f"{name}.msgpack", 20)
    result = run_pytest(pytester)
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_config.msgpack was recorded 20 days ago *maximum age of 10 days (tape_config)*",
            "*@pytest.mark.tape: max_age='ten days' is not an age; give a number and a unit (s, m, h, d, w) such as "
            "'30d'*",
        ]
    )


def test_a_bad_ini_max_age_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester, ini="tape_max_age = soon")
    result = run_pytest(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option tape_max_age='soon' is not an age*"])


# -- prune -----------------------------------------------------------------------------------------


def _orphaned(pytester: pytest.Pytester) -> tuple[Path, list[Path]]:
    """A recorded project, plus two cassettes no test uses, a recording kept aside and a skipped test's cassette."""
    folder = _project(pytester)
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=2, skipped=1)
    recorded = load_cassette(folder / "test_hi.msgpack")
    gone = [folder / "test_renamed.msgpack", pytester.path / "cassettes" / "test_removed_module" / "test_a.json"]
    for path in [*gone, folder / "test_skipped.msgpack", folder / "test_hi.failed.msgpack"]:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_cassette(recorded, path)
    (folder / "notes.json").write_text('{"not": "a cassette"}')
    return folder, gone


def test_prune_lists_the_cassettes_no_collected_test_used(pytester: pytest.Pytester) -> None:
    _, gone = _orphaned(pytester)
    result = run_pytest(pytester, "--tape-prune")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "chunktape: 2 cassette(s) under cassettes no collected test used:",
            "  cassettes/test_removed_module/test_a.json",
            "  cassettes/test_x/test_renamed.msgpack",
            "chunktape: remove them with --tape-prune=delete (after a full run)",
        ]
    )
    assert all(path.exists() for path in gone)


def test_prune_delete_removes_them_after_a_full_run_and_keeps_the_rest(pytester: pytest.Pytester) -> None:
    folder, gone = _orphaned(pytester)
    result = run_pytest(pytester, "--tape-prune=delete")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["chunktape: 2 cassette(s) under cassettes deleted:"])
    assert not any(path.exists() for path in gone)
    kept = ["notes.json", "test_hi.failed.msgpack", "test_hi.msgpack", "test_skipped.msgpack"]
    assert sorted(path.name for path in folder.iterdir()) == kept


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["-k", "test_hi"], "-k given"),
        (["-m", "slow"], "-m given"),
        (["test_x.py"], "selected test_x.py"),
        (["test_x.py::test_hi"], "selected test_x.py::test_hi"),
        (["--deselect", "test_x.py::test_hi"], "--deselect given"),
    ],
)
def test_prune_delete_refuses_a_partial_selection(pytester: pytest.Pytester, args: list[str], why: str) -> None:
    _, gone = _orphaned(pytester)
    result = run_pytest(pytester, "--tape-prune=delete", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--tape-prune=delete refuses a partial run ({why})*"])
    assert all(path.exists() for path in gone)


def test_prune_delete_refuses_after_a_collection_error_or_an_early_stop(pytester: pytest.Pytester) -> None:
    _, gone = _orphaned(pytester)
    pytester.makepyfile(test_broken="import no_such_module_here")
    result = run_pytest(pytester, "--tape-prune=delete")
    result.stdout.fnmatch_lines(["chunktape: the run was partial (1 collection error(s)): deleted nothing*"])
    (pytester.path / "test_broken.py").unlink()
    pytester.makepyfile(test_first="def test_fails():\n    assert False\n")
    stopped = run_pytest(pytester, "--tape-prune=delete", "-x")
    stopped.stdout.fnmatch_lines(["chunktape: the run was partial (the run stopped early: *): deleted nothing*"])
    assert all(path.exists() for path in gone)


def test_prune_under_two_workers_sees_every_workers_tests(pytester: pytest.Pytester) -> None:
    _, gone = _orphaned(pytester)
    result = run_pytest(pytester, "--tape-prune=delete", "-n", "2")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["chunktape: 2 cassette(s) under cassettes deleted:"])
    assert not any(path.exists() for path in gone)


# -- the run's report ------------------------------------------------------------------------------


def test_tape_report_writes_the_runs_cassettes_as_one_page(pytester: pytest.Pytester) -> None:
    _project(pytester)
    result = run_pytest(pytester, "--tape-mode", "once", "--tape-report", "out/report.html")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["chunktape: wrote the report out/report.html (1 cassette(s), 1 interaction(s))"])
    page = (pytester.path / "out" / "report.html").read_text(encoding="utf-8")
    assert "cassettes/test_x/test_hi.msgpack" in page
    assert "used by test_x.py::test_hi" in page
    assert page.count('<svg class="timeline"') == 1


# -- chunktape check --max-age ---------------------------------------------------------------------


def test_check_max_age_fails_the_cassettes_older_than_it(tmp_path: Path) -> None:
    fresh, old = tmp_path / "fresh.msgpack", tmp_path / "old.json"
    save_cassette(cassette_of(interaction_of(text_stream("hi"))), fresh)
    save_cassette(cassette_of(interaction_of(text_stream("hi"))), old)
    _age(old, 45)

    def check(*args: str) -> subprocess.CompletedProcess[str]:
        script = Path(sys.executable).parent / "chunktape"
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        return subprocess.run([str(script), "check", *args], capture_output=True, text=True, env=env, timeout=60)

    done = check("--max-age", "30d", str(tmp_path))
    assert done.returncode == 1
    created = (datetime.now(UTC) - timedelta(days=45, hours=1)).strftime("%Y-%m-%d")
    assert done.stdout.splitlines() == [
        f"{old}: file: stale: recorded 45 days ago ({created}), longer ago than the maximum age of 30 days"
    ]
    assert check("--max-age", "8w", str(tmp_path)).returncode == 0
    assert check(str(tmp_path)).returncode == 0  # no --max-age: age is no problem
    bad = check("--max-age", "a month", str(tmp_path))
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "chunktape: error: --max-age 'a month' is not an age; give a number and a unit (s, m, h, d, w) such as '30d'"
    )


def test_tape_report_masks_credentials_a_cassette_was_allowed_to_keep(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-reportmask-0123456789abcdefghijkl"
    monkeypatch.setenv("REPORT_TEST_API_KEY", secret)
    _project(
        pytester,
        test_x=f"""
        import pytest

        from agent import ask


        @pytest.mark.tape(allow_secrets=[{secret!r}])
        async def test_hi(tape):
            await ask(tape, "my key is {secret}")  # the prompt is on the page: the filters search it
        """,
    )
    run_pytest(pytester, "--tape-mode", "once", "--tape-report", "report.html").assert_outcomes(passed=1)
    assert secret in (pytester.path / "cassettes" / "test_x" / "test_hi.msgpack").read_bytes().decode(errors="replace")
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert "cassettes/test_x/test_hi.msgpack" in page
    assert secret not in page
