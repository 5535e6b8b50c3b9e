"""Faults that behave like a real provider: transient ones fire once, permanent ones on every call; fault runs
of the pytest matrix run in virtual time. The matrix is driven through ``pytester`` in-process, as a user runs it.
"""

from __future__ import annotations

import pytest

from chunktape._protocol import GenerateOptions, Message
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
from chunktape.faults._plan import FaultPlan
from helpers import run_pytest
from matrix_project import make_project

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


def test_the_default_matrix_over_a_two_call_agent_records_then_passes_in_virtual_time(
    pytester: pytest.Pytester,
) -> None:
    make_project(pytester)
    result = run_pytest(pytester, "--tape-mode", "once")
    result.assert_outcomes(passed=len(STANDARD_FAULTS) + 1)
    # Replayed offline afterwards: the same, with no live adapter needed.
    result = run_pytest(pytester)
    result.assert_outcomes(passed=len(STANDARD_FAULTS) + 1)


def test_calls_moves_the_fault_to_the_second_call(pytester: pytest.Pytester) -> None:
    make_project(pytester, matrix_args='(faults=["http-503", "http-401", "stall-30s"], calls=2)')
    result = run_pytest(pytester, "--tape-mode", "once")
    result.assert_outcomes(passed=4)


def test_virtual_time_can_be_turned_off_by_ini_and_by_marker(pytester: pytest.Pytester) -> None:
    quick = "RetryPolicy(retry_delay=0.01)"  # the retry after the 500 waits in real time here
    make_project(
        pytester, ini="tape_virtual_time = false", matrix_args='(faults=["http-500"])', virtual="False", policy=quick
    )
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=2)
    make_project(
        pytester,
        matrix_args='(faults=["http-500"])\n@pytest.mark.tape(virtual_time=False)',
        virtual="False",
        policy=quick,
    )
    run_pytest(pytester).assert_outcomes(passed=2)


def test_a_bad_calls_argument_fails_that_test_only(pytester: pytest.Pytester) -> None:
    make_project(pytester, matrix_args="(calls=0)")
    result = run_pytest(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*tape_fault_matrix(calls=...) takes a call number (1-based)*"])
