"""Shared fixtures. ``fake_provider``: a loopback OpenAI-compatible server (see ``tests/fake_provider.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import httpcore
import httpcore2
import httpx
import httpx2
import openai
import pytest

import chunktape.pytest_plugin
from chunktape import LlmAdapter
from fake_provider import FakeProvider

# Imported here, before any in-process pytester run: pytester drops the modules a run imported when it ends, and a
# module imported again gets new exception classes, which httpx/httpx2 (that map httpcore's exceptions through a
# table filled once) and the SDKs would then no longer recognise. Our plugin (registered only by the runs, never
# here: ``-p no:chunktape``) is kept too, so each run does not import it again.
PRELOADED = (httpcore, httpcore2, httpx, httpx2, openai, chunktape.pytest_plugin)


@pytest.fixture(scope="session", autouse=True)
def _owned_default_loop() -> Iterator[None]:
    """Own the thread's default event loop and close it at the end.

    pytest-asyncio's and looptime's hooks call ``asyncio.get_event_loop()``, which creates a loop nobody
    closes when none is set (pytest-asyncio #724); with ``filterwarnings = error`` that leak fails a random
    later test. Setting one we own makes the saved-and-restored loop ours to close.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def never_live() -> Callable[[], LlmAdapter]:
    """A live-adapter factory that fails the test if a session ever calls it."""

    def factory() -> LlmAdapter:
        pytest.fail("the live adapter factory was called")

    return factory


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
