"""Shared fixtures."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator

import pytest

from chunktape import LlmAdapter


@pytest.fixture
def never_live() -> Callable[[], LlmAdapter]:
    """A live-adapter factory that fails the test if a session ever calls it."""

    def factory() -> LlmAdapter:
        pytest.fail("the live adapter factory was called")

    return factory


@pytest.fixture(autouse=True)
def _event_loop_for_sync_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Give sync tests a loop that is closed afterwards.

    looptime's plugin asks the event loop policy for a loop even in sync tests; with none set, the policy
    creates one that nobody closes, and its ResourceWarning fails a later test under ``filterwarnings=error``.
    """
    if inspect.iscoroutinefunction(request.function):
        yield
        return
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()
