"""Shared fixtures. ``fake_provider``: a loopback OpenAI-compatible server (see ``tests/fake_provider.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from fake_provider import FakeProvider


def pytest_sessionstart(session: pytest.Session) -> None:
    # looptime's plugin calls policy.get_event_loop() around sync tests too; on Python 3.11 that silently
    # creates a loop nobody closes (a ResourceWarning, i.e. an error here). Declaring "no loop" up front makes
    # it raise instead, which looptime expects; pytest-asyncio sets its own loops for async tests.
    asyncio.set_event_loop(None)


@pytest.fixture(scope="session")
def fake_provider_server() -> Iterator[FakeProvider]:
    """One loopback server per test session (per xdist worker), shut down cleanly at the end."""
    server = FakeProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake_provider(fake_provider_server: FakeProvider) -> FakeProvider:
    """The loopback provider with an empty response queue and request log; ``.url`` is its base URL."""
    fake_provider_server.reset()
    return fake_provider_server
