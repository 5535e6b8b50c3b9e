"""Shared test configuration."""

from __future__ import annotations

import asyncio

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # looptime's and pytest-asyncio's hooks call ``policy.get_event_loop()``, which creates (and leaks) a
    # fresh loop when none was ever set; the leaked loop's ResourceWarning then fails a random later test
    # under ``filterwarnings = error``. Marking "no current loop" makes them get a RuntimeError instead.
    asyncio.set_event_loop(None)
