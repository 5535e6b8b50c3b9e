"""Shared fixtures. ``fake_provider``: a loopback OpenAI-compatible server (see ``tests/fake_provider.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fake_provider import FakeProvider


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
