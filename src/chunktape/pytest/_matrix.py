"""The pytest fault matrix, apart from the plugin's hooks: its runs, their virtual time, their order under xdist.

- ``matrix_runs`` reads ``@pytest.mark.tape_fault_matrix(faults=..., calls=None)``: one run per fault, the fault
  as the test sees it (``tape.fault``, whose ``transient`` says what to expect) and as the replay injects it.
  The rule of ``chunktape.faults._specs`` applies unchanged: a transient fault fires once, a permanent fault on
  every call; ``calls=`` (1-based numbers over every call, retries included, as ``Targeted`` counts them) moves
  the fault off the first call.
- ``wants_virtual_time`` says which tests run on chunktape's virtual clock (``chunktape._virtual_time``, given
  by ``chunktape.pytest._clock``): every run of a fault matrix (the stalls, the recorded timing and the agent's
  own retry back-offs then cost no wall time) and a ``tape`` test with recorded timing or any fault (a 429's
  Retry-After and the SDK's own back-off then cost none either).
  ``virtual_time=False`` (marker, ``tape_config``) or the ini ``tape_virtual_time = false`` turns it off.
  ``mark_items``: under pytest-xdist's ``loadgroup`` the runs of one test share an ``xdist_group``;
  ``note_baselines``: which fault runs' ``[no-fault]`` run is in the session.
- ``BaselineGate``: under pytest-xdist, a fault run whose cassette the ``[no-fault]`` run is about to record
  waits until that run is over (it runs first on its own worker: items keep their order per worker).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

from chunktape._errors import ErrorCode, LlmError
from chunktape._replayer.timing import Timing
from chunktape.faults import (
    STANDARD_FAULTS,
    Fault,
    Targeted,
    fault_id,
    parse_fault,
    parse_faults,
)
from chunktape.faults._plan import FaultPlan

__all__ = [
    "BASELINE_ID",
    "BASELINE_SELECTED",
    "BadMatrix",
    "BaselineGate",
    "MatrixRun",
    "baseline_nodeid",
    "mark_items",
    "matrix_runs",
    "note_baselines",
    "uses_time",
    "wants_virtual_time",
]

BASELINE_ID = "no-fault"
"""The test id of the fault matrix's fault-free run, the one that records the shared cassette."""

MATRIX_SIGNATURE = "tape_fault_matrix(faults=STANDARD_FAULTS, calls=None)"
_WAIT_S = 600.0
_POLL_S = 0.05


class MatrixRun(NamedTuple):
    """One run of a fault matrix: its test id, the fault as listed (``tape.fault``) and as injected."""

    ident: str
    fault: Fault
    injected: Fault


class BadMatrix:
    """A ``tape_fault_matrix`` marker that cannot be used; the test fails with ``problem`` at setup."""

    def __init__(self, problem: str) -> None:
        self.problem = problem


def _calls(value: object) -> list[int] | None:
    if value is None:
        return None
    numbers = [value] if isinstance(value, int) else value
    if (
        isinstance(numbers, str | bytes)
        or not isinstance(numbers, Iterable)
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in numbers)
    ):
        raise LlmError(
            f"tape_fault_matrix(calls=...) takes a call number (1-based) or a list of them, got {value!r}",
            ErrorCode.INVALID_CONFIG,
        )
    return list(numbers)


def _listed(value: object) -> list[tuple[str, Fault]]:
    if isinstance(value, Mapping):
        return [(str(key), parse_fault(fault)) for key, fault in value.items()]
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return [(fault_id(fault), fault) for fault in parse_faults(value)]
    raise LlmError("tape_fault_matrix(faults=...) takes a mapping or a sequence of faults", ErrorCode.INVALID_CONFIG)


def matrix_runs(marker: pytest.Mark) -> list[MatrixRun]:
    """The runs a ``tape_fault_matrix`` marker asks for; ``INVALID_CONFIG`` names what is wrong with it."""
    unknown = set(marker.kwargs) - {"faults", "calls"}
    if len(marker.args) > 1 or unknown:
        raise LlmError(f"the marker's signature is {MATRIX_SIGNATURE}", ErrorCode.INVALID_CONFIG)
    value = marker.args[0] if marker.args else marker.kwargs.get("faults", STANDARD_FAULTS)
    calls = _calls(marker.kwargs.get("calls"))
    items = _listed(value)
    ids = [ident for ident, _ in items]
    duplicates = sorted({ident for ident in ids if ids.count(ident) > 1} | ({BASELINE_ID} & set(ids)))
    if duplicates:
        raise LlmError(f"tape_fault_matrix: duplicate test ids {duplicates}", ErrorCode.INVALID_CONFIG)
    return [MatrixRun(ident, fault, _target(fault, calls)) for ident, fault in items]


def _target(fault: Fault, calls: list[int] | None) -> Fault:
    if calls is None:
        return fault
    if isinstance(fault, Targeted):
        raise LlmError(
            f"tape_fault_matrix(calls=...): {fault_id(fault)} already targets its calls", ErrorCode.INVALID_CONFIG
        )
    return Targeted(fault=fault, calls=calls, id=fault_id(fault))


def uses_time(faults: Sequence[Fault], timing: Timing) -> bool:
    """Whether a replay's run waits on the loop's clock: recorded or fixed timing, or any fault (a stall, latency, a
    timed disconnect wait themselves; an error's Retry-After and every failure's retry back-off are waited by the
    code under test, the SDK's own retry included)."""
    return not timing.is_instant or bool(FaultPlan(faults))


def baseline_nodeid(nodeid: str, ident: str) -> str:
    """The node id of the ``[no-fault]`` run of the fault run ``nodeid`` (test id ``ident``)."""
    return nodeid.replace(f"[{ident}]", f"[{BASELINE_ID}]").replace(f"-{ident}]", f"-{BASELINE_ID}]")


def wants_virtual_time(*, in_matrix: bool, faults: Sequence[Fault], timing: Timing) -> bool:
    """Whether a ``tape`` test whose settings allow virtual time gets it: every run of a fault matrix, and a test
    whose replay waits on the clock (recorded or fixed timing, any fault). A recording made on that clock stays
    true: while a socket is waited on, the clock runs at the real pace."""
    return in_matrix or uses_time(faults, timing)


BASELINE_SELECTED = pytest.StashKey[bool]()
"""On a fault run's item: whether its ``[no-fault]`` run is part of this session (so it is worth waiting for)."""


def mark_items(items: Sequence[pytest.Item]) -> None:
    """Add the ``xdist_group`` markers the matrix runs need (before pytest-xdist's ``loadgroup`` reads them)."""
    if not items or not items[0].config.pluginmanager.has_plugin("xdist"):
        return
    for item in items:
        if "tape" in getattr(item, "fixturenames", ()) and item.get_closest_marker("tape_fault_matrix") is not None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("[", 1)[0]))


def note_baselines(items: Sequence[pytest.Item]) -> None:
    """Note on each fault run whether its ``[no-fault]`` run will run: ``items`` are the session's, once ``-k``,
    ``-m`` and ``--deselect`` have left out what they leave out."""
    baselines: set[str] = set()
    fault_runs: list[tuple[pytest.Item, MatrixRun]] = []
    for item in items:
        if "tape" not in getattr(item, "fixturenames", ()) or item.get_closest_marker("tape_fault_matrix") is None:
            continue
        callspec = getattr(item, "callspec", None)
        param = None if callspec is None else callspec.params.get("_tape_fault", BASELINE_ID)
        if param is None:
            baselines.add(item.nodeid)
        if isinstance(param, MatrixRun):
            fault_runs.append((item, param))
    for item, run in fault_runs:
        item.stash[BASELINE_SELECTED] = baseline_nodeid(item.nodeid, run.ident) in baselines


class BaselineGate:
    """Lets a fault run wait, across pytest-xdist workers, until its ``[no-fault]`` run is over.

    The baseline leaves a mark in ``folder`` (shared by the workers of one run) once its teardown saved (or
    kept aside) its recording; the fault run waits for the mark, or for the cassette when it is only missing.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _mark(self, cassette: Path) -> Path:
        return self.folder / hashlib.sha256(str(cassette.resolve()).encode()).hexdigest()[:24]

    def done(self, cassette: Path) -> None:
        """Called by the baseline at teardown, whatever its outcome."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._mark(cassette).touch()

    def wait(self, cassette: Path) -> bool:
        """Wait (in real time: another process writes) until the baseline is over; False if it never ended."""
        deadline = time.monotonic() + _WAIT_S
        mark = self._mark(cassette)
        while not mark.exists():
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        return True
