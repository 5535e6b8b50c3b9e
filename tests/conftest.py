"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chunktape import LlmAdapter


@pytest.fixture
def never_live() -> Callable[[], LlmAdapter]:
    """A live-adapter factory that fails the test if a session ever calls it."""

    def factory() -> LlmAdapter:
        pytest.fail("the live adapter factory was called")

    return factory
