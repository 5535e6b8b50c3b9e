"""``@pytest.mark.tape_fault_search``: the pytest face of the fault search (``chunktape.faults.search``).

The plugin hands a marked test here instead of calling it. Its async body runs once on the ``tape`` fixture, in
virtual time (which records the cassette when the record mode says so), then once per drawn fault schedule with
``tape`` replaced by a replaying adapter over that cassette (the ``@pytest.mark.tape`` faults, matchers and
allowed secrets still apply). A failing schedule fails the test with the shrunk schedule as a
``@pytest.mark.tape(faults=[...])`` line and a scenario entry. Other fixtures are shared by every run, as under
hypothesis's ``@given``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from chunktape.errors import LlmError
from chunktape.faults.search import DEFAULT_DEADLINE_S, run_virtual, search_faults
from chunktape.protocol import LlmAdapter
from chunktape.pytest_plugin import _show
from chunktape.session import CassetteSession

__all__ = ["MARKER", "run_fault_search"]

MARKER = "tape_fault_search"
_OPTIONS = tuple(
    name
    for name in inspect.signature(search_faults).parameters
    if name not in ("agent", "cassette", "key", "replay_options")
)
_REPLAY_OPTIONS = ("faults", "match_on", "allow_secrets")
"""What ``@pytest.mark.tape`` sets that every replay of the search keeps."""


def _fail(item: pytest.Function, problem: str) -> BaseException:
    return pytest.fail.Exception(f"{item.nodeid}: @pytest.mark.{MARKER}: {problem}", pytrace=False)


def _coroutine_function(obj: object) -> Callable[..., Coroutine[Any, Any, object]] | None:
    """The async test function behind ``obj``, also when an asyncio plugin wrapped it to run synchronously."""
    while not inspect.iscoroutinefunction(obj):
        obj = getattr(obj, "__wrapped__", None)
        if obj is None:
            return None
    return obj


def run_fault_search(item: pytest.Function) -> None:
    """Run the marked test under the fault search; fail it with the shrunk schedule when one breaks it."""
    marker = item.get_closest_marker(MARKER)
    assert marker is not None
    unknown = sorted(set(marker.kwargs) - set(_OPTIONS))
    if marker.args or unknown:
        raise _fail(item, f"takes keyword arguments only, of {', '.join(_OPTIONS)}; got {unknown or marker.args}")
    test = _coroutine_function(item.obj)
    if test is None:
        raise _fail(item, "the test must be an async function (each run gets its own virtual-time event loop)")
    session = item.funcargs.get("tape")
    if not isinstance(session, CassetteSession):
        raise _fail(item, "the test must use the tape fixture")
    arguments = {name: item.funcargs[name] for name in inspect.signature(test).parameters if name in item.funcargs}

    async def body(adapter: LlmAdapter) -> None:
        await test(**{**arguments, "tape": adapter})

    options = dict(marker.kwargs)
    try:
        # The fault-free run, on the fixture itself: it records when the mode says so, and plays what
        # --tape-strict checks. Its failure is the test's own, raised as it is.
        error = run_virtual(body, session, options.get("deadline_s", DEFAULT_DEADLINE_S))
    except LlmError as invalid:
        raise _fail(item, str(invalid)) from None
    if error is not None:
        raise error
    tape_marker = item.get_closest_marker("tape")
    replay = {key: tape_marker.kwargs[key] for key in _REPLAY_OPTIONS if tape_marker and key in tape_marker.kwargs}
    try:
        result = search_faults(body, session.cassette, key=item.nodeid, replay_options=replay, **options)
    except LlmError as invalid:
        raise _fail(item, str(invalid)) from None
    if result.failure is None:
        return
    report = result.report(name=item.name, cassette=_show(item.config, session.path))
    raise pytest.fail.Exception(f"{item.nodeid}: {MARKER}: {report}", pytrace=False)
