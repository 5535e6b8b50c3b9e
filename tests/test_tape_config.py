"""``tape_config``: per-module and per-folder defaults for every ``tape``, overridable in ``conftest.py`` as
pytest-recording's ``vcr_config`` is; precedence: ``--tape-mode`` > marker > ``tape_config`` > ini > defaults."""

from __future__ import annotations

import textwrap

import pytest

from helpers import run_pytest
from test_pytest_plugin import project

RECORD_THEN_CHECK = """
import asyncio

import pytest

from agent import ask


async def test_records():
    pass


async def test_default(tape):
    assert await ask(tape, "hi") == "echo: hi"
    assert tape.replay_options.match_on == {match_on!r}
    assert tape.mode.value == {mode!r}
"""


def test_a_conftest_tape_config_reaches_every_tape_below_it(pytester: pytest.Pytester) -> None:
    project(pytester, test_one=RECORD_THEN_CHECK.format(match_on=("model",), mode="once"))
    pytester.makeconftest(
        pytester.path.joinpath("conftest.py").read_text()
        + textwrap.dedent(
            """
            @pytest.fixture
            def tape_config():
                return {"match_on": ["model"], "mode": "once"}
            """
        )
    )
    run_pytest(pytester).assert_outcomes(passed=2)
    assert (pytester.path / "cassettes" / "test_one" / "test_default.msgpack").exists()


def test_the_marker_wins_over_tape_config_and_tape_config_over_the_ini(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        ini="tape_match_on = model,messages\ntape_mode = none",
        test_order=textwrap.dedent(
            """
            import pytest

            from agent import ask


            @pytest.fixture
            def tape_config():
                return {"match_on": "model", "mode": "once", "allow_repeats": True}


            async def test_config_over_ini(tape):
                assert await ask(tape, "hi") == "echo: hi"
                assert tape.replay_options.match_on == ("model",)
                assert tape.mode.value == "once"
                assert tape.replay_options.allow_repeats


            @pytest.mark.tape(match_on="model,last_message", mode="all")
            async def test_marker_over_config(tape):
                assert tape.replay_options.match_on == ("model", "last_message")
                assert tape.mode.value == "all"
                assert tape.replay_options.allow_repeats  # what the marker does not say still comes from tape_config
            """
        ),
    )
    run_pytest(pytester).assert_outcomes(passed=2)
    run_pytest(pytester, "--tape-mode", "none", "-k", "config_over_ini").assert_outcomes(failed=1)


def test_a_folder_conftest_overrides_the_root_one(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        test_fast=textwrap.dedent(
            """
            import asyncio

            from chunktape import Timing


            async def test_instant(tape):
                assert tape.replay_options.timing == Timing.instant()
                assert not asyncio.get_running_loop().virtual
            """
        ),
    )
    root = pytester.path.joinpath("conftest.py").read_text()
    pytester.makeconftest(
        root + '\n\n@pytest.fixture\ndef tape_config():\n    return {"match_on": "model", "mode": "once"}\n'
    )
    sub = pytester.mkpydir("slow")
    (sub / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture\ndef tape_config(tape_config):\n"
        '    return {**tape_config, "timing": __import__("chunktape").Timing.recorded()}\n'
    )
    (sub / "test_slow.py").write_text(
        textwrap.dedent(
            """
            import asyncio

            from chunktape import Timing


            async def test_timed(tape):
                assert tape.replay_options.timing == Timing.recorded()
                assert tape.replay_options.match_on == ("model",)
                assert asyncio.get_running_loop().virtual  # a time-using setting from tape_config: virtual time
            """
        )
    )
    run_pytest(pytester).assert_outcomes(passed=2)


def test_tape_config_can_turn_virtual_time_off_for_a_module(pytester: pytest.Pytester) -> None:
    project(
        pytester,
        test_real=textwrap.dedent(
            """
            import asyncio

            import pytest


            @pytest.fixture
            def tape_config():
                return {"faults": ["stall-30s"], "virtual_time": False}


            async def test_stays_real(tape):
                assert not asyncio.get_running_loop().virtual
            """
        ),
    )
    run_pytest(pytester).assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('{"nmae": "x"}', "tape_config: unknown ['nmae']; valid: mode, faults, timing"),
        ('{"faults": ["http-4290"]}', "tape_config: "),
        ('{"mode": "sometimes"}', "tape_config: mode=: unknown record mode 'sometimes'"),
        ('["mode"]', "tape_config must return a dict (TapeConfig), got list"),
    ],
)
def test_a_bad_tape_config_fails_the_test_in_one_line_naming_it(
    pytester: pytest.Pytester, config: str, message: str
) -> None:
    project(
        pytester,
        test_bad=f"import pytest\n\n\n@pytest.fixture\ndef tape_config():\n    return {config}\n\n\n"
        "async def test_it(tape):\n    pass\n",
    )
    result = run_pytest(pytester)
    result.assert_outcomes(errors=1)
    assert any(message in line for line in result.outlines), result.outlines
