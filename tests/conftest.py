"""Shared fixtures. ``fake_provider``: a loopback OpenAI-compatible server (see ``tests/fake_provider.py``)."""

from __future__ import annotations

import asyncio
import gc
import importlib
import ipaddress
import signal
import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from chunktape import LlmAdapter
    from fake_provider import FakeProvider

# Imported before any test, so before any in-process pytester run: pytester drops the modules a run imported when it
# ends, and a module imported again gets new exception classes, which httpx/httpx2 (that map httpcore's exceptions
# through a table filled once) and the SDKs would then no longer recognise. Our plugin (registered only by the runs,
# never here: ``-p no:chunktape``) is kept too, so each run does not import it again. Imported by a fixture, not
# here: an xdist controller, which runs no test, then starts its workers without importing them first.
PRELOADED = ("httpcore", "httpcore2", "httpx", "httpx2", "openai", "chunktape.pytest._plugin")


@pytest.fixture(scope="session", autouse=True)
def _preloaded() -> None:
    for name in PRELOADED:
        importlib.import_module(name)
    _share_default_tls()


def _share_default_tls() -> None:
    """One default TLS context per test process, whoever builds the client (a test, an SDK, chunktape).

    Every test speaks plain HTTP to 127.0.0.1, yet each httpx or httpx2 client or transport built with the default
    ``verify=True`` reads the whole CA bundle (~25 ms of CPU; a few hundred per worker). The clients and transports
    the libraries build get the context chunktape's own already share (``_httpx.default_tls``); any other
    ``verify``, a client certificate or ``trust_env=False`` is built as asked.
    """
    import httpx._transports.default as httpx_transports
    import httpx2._transports.default as httpx2_transports

    _share_in(httpx_transports, "httpx")
    _share_in(httpx2_transports, "httpx2")


def _share_in(module: Any, library: Literal["httpx", "httpx2"]) -> None:
    from chunktape._httpx import default_tls

    build: Callable[..., ssl.SSLContext] = module.create_ssl_context

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is True and cert is None and trust_env:
            return default_tls(library)
        return build(verify=verify, cert=cert, trust_env=trust_env)

    module.create_ssl_context = create_ssl_context


# Hypothesis' per-example deadline (200 ms) and its too-slow check measure wall time: on a shared, loaded machine
# they fail a correct test. A test that is about how long something takes says so itself, in virtual time.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


# -- the cyclic GC and the SDKs' heaps ---------------------------------------------------------------------------
# An SDK import leaves hundreds of thousands of long-lived objects (litellm alone ~250k), and every full collection
# of the cyclic GC walks them all again: about 15% of a worker's CPU went to that. What is alive once the tests are
# collected, and again after a test imported a big library, is frozen (``gc.freeze``): kept out of later
# collections. A young collection first, so the garbage of that test is not frozen with it.
_BIG_IMPORT = 100  # new modules since the last freeze
_frozen_at = [0]
# The young generation is collected every 20,000 net allocations instead of 700, and each older one after 20 of
# the younger: the suite's tests allocate in bursts (SDK clients, hypothesis examples, parsed streams) that mostly
# die young by reference count. Measured over whole runs, the workers' GC time went from 5.1-5.3 s to 2.9-3.0 s.
gc.set_threshold(20_000, 20, 20)


def _freeze() -> None:
    gc.collect(1)
    gc.freeze()
    _frozen_at[0] = len(sys.modules)


def pytest_collection_finish(session: pytest.Session) -> None:
    _freeze()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if len(sys.modules) - _frozen_at[0] >= _BIG_IMPORT:
        _freeze()


# -- xdist groups on pytest 9.2 -------------------------------------------------------------------------------------
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Make ``--dist loadgroup`` group again: pytest-xdist 3.8 tags a grouped test by rewriting ``item._nodeid``,
    which pytest 9.2 no longer reads (pytest-xdist#1386, fix pending in #1388), so every ``xdist_group`` is ignored
    and each worker imports every slow SDK. Here the tag goes where pytest 9.2 keeps the id; a no-op where xdist's
    own tag took (older pytest, a fixed xdist) or outside an xdist worker."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # a pytest before 9.2: xdist's own tag works
        return
    for item in items:
        marks = item.iter_markers("xdist_group")
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default")) for mark in marks})
        tag = f"@{'_'.join(groups)}"
        if groups and not item.nodeid.endswith(tag):
            item._id = coerce_node_id(item.nodeid + tag)


def _is_loopback(host: object) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False  # a name other than localhost: it would be resolved, maybe to the outside


@pytest.fixture(scope="session", autouse=True)
def _loopback_only() -> Iterator[None]:
    """No test reaches a host but loopback: an IP socket connecting elsewhere fails the call loudly (this
    process and in-process pytester runs; a test's subprocesses are out of its reach)."""
    original = socket.socket.connect, socket.socket.connect_ex

    def guarded(method: Callable[..., Any]) -> Callable[..., Any]:
        def connect(self: socket.socket, address: Any) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
                raise AssertionError(f"a test tried to connect to {address!r}: only loopback hosts are allowed")
            return method(self, address)

        return connect

    socket.socket.connect, socket.socket.connect_ex = guarded(original[0]), guarded(original[1])  # type: ignore[method-assign]
    yield
    socket.socket.connect, socket.socket.connect_ex = original  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def _interruptible_children() -> None:
    """The processes the tests start take SIGINT as from a terminal's Ctrl-C, however the suite was started.

    A run started in the background by a non-interactive shell (``make test &`` in a script, ``nohup``) inherits
    SIGINT ignored, and so does every process it starts: ``chunktape record`` then keeps recording through the
    Ctrl-C a test sends it, as asyncio leaves an ignored SIGINT ignored. With Python's own handler here, a started
    process begins with the default disposition again.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
    from fake_provider import FakeProvider

    server = FakeProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake_provider(fake_provider_server: FakeProvider) -> FakeProvider:
    """The loopback provider with an empty response queue and request log; ``.url`` is its base URL."""
    fake_provider_server.reset()
    return fake_provider_server
