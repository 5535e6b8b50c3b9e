"""The fault matrix under pytest-xdist: recording a new matrix test works with ``-n 2``, whatever the dist mode.

Fault runs never start before their ``[no-fault]`` run has written the cassette, and never record.
"""

from __future__ import annotations

import pytest

from chunktape import load_cassette
from chunktape.faults import STANDARD_FAULTS
from helpers import run_pytest
from matrix_project import make_project


@pytest.mark.parametrize("dist", ["load", "loadgroup"])
def test_recording_a_new_matrix_test_under_two_workers(pytester: pytest.Pytester, dist: str) -> None:
    make_project(pytester)
    # xdist's controller in this interpreter (as in test_plugin_safety): the two workers are fresh processes.
    result = run_pytest(pytester, "--tape-mode", "once", "-n", "2", "--dist", dist)
    result.assert_outcomes(passed=len(STANDARD_FAULTS) + 1)
    cassette = load_cassette(pytester.path / "cassettes" / "test_agent" / "test_agent.msgpack")
    assert len(cassette.interactions) == 2  # the baseline's two calls; no fault run recorded anything
    assert not list(pytester.path.glob("cassettes/**/*.failed.msgpack"))
