"""``StoppableServer``: the uvicorn server the replay server, the recording proxy and the tests' stand-ins run, one
that stops as soon as it is asked; ``quiet_server`` builds one under ``ServerLimits``.

uvicorn 0.54 looks at ``should_exit`` on a 0.1 s tick, and its shutdown sleeps a fixed 0.1 s for connections to
close before it waits for them (polling every 0.1 s). So each stop took 0.1-0.3 s, even with nothing open: a
``with ReplayServer(...)`` per test, in a suite of hundreds, spent whole seconds waiting on nobody. Here ``exit()``
wakes the loop at once and the shutdown polls every 5 ms; what it waits for (connections asked to close, tasks,
the graceful timeout, the lifespan) is uvicorn's own sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any, Literal

import uvicorn

from chunktape.http._server.deadlines import DeadlineProtocol
from chunktape.http._server.limits import ServerLimits

__all__ = ["StoppableServer", "quiet_server", "uvicorn_settings"]

_POLL_S = 0.005
_logger = logging.getLogger("uvicorn.error")


class StoppableServer(uvicorn.Server):
    """A ``uvicorn.Server`` whose ``exit()`` (safe from any thread) stops it without a tick's delay.

    ``grace``: how long a stop waits for open streams before it cancels them, in seconds (default: the config's
    ``timeout_graceful_shutdown``, which uvicorn types as whole seconds).
    """

    def __init__(self, config: uvicorn.Config, *, grace: float | None = None) -> None:
        super().__init__(config)
        self.grace = config.timeout_graceful_shutdown if grace is None else grace
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    def exit(self) -> None:
        """Ask the server to stop, and wake its loop if it is running (``should_exit = True`` waits for a tick)."""
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed: the server has stopped
                loop.call_soon_threadsafe(wake.set)

    async def main_loop(self) -> None:
        # uvicorn's loop (the per-second Date header, the request limit, should_exit), woken early by exit().
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's shutdown, polled every 5 ms instead of a fixed 0.1 s sleep and 0.1 s polls.
        _logger.info("Shutting down")
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            await asyncio.wait_for(self._drained(), timeout=self.grace)
        except TimeoutError:
            _logger.error("Cancel %s running task(s), timeout graceful shutdown exceeded", len(self.server_state.tasks))
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _drained(self) -> None:
        # uvicorn's server state has no event to wait on: polled, as uvicorn does.
        while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:  # noqa: ASYNC110
            await asyncio.sleep(_POLL_S)
        for server in self.servers:
            await server.wait_closed()


def uvicorn_settings(limits: ServerLimits) -> dict[str, Any]:
    """The ``uvicorn.Config`` keywords that enforce ``limits``."""
    return {
        "http": DeadlineProtocol.bound(limits),
        "h11_max_incomplete_event_size": limits.max_head,
        "timeout_keep_alive": limits.keep_alive,
    }


def quiet_server(
    app: Any, limits: ServerLimits, *, lifespan: Literal["on", "off"] = "off", own_headers: bool = True
) -> StoppableServer:
    """A quiet uvicorn server for ``app`` under ``limits``, as the replay server and the recording proxy run one: no
    log config or access log of its own, no websockets, a 1 s graceful shutdown, a prompt stop. ``own_headers=False``
    leaves out uvicorn's ``server`` and ``date`` headers (a proxy passes on the upstream's)."""
    config = uvicorn.Config(
        app,
        log_config=None,
        log_level="warning",
        access_log=False,
        lifespan=lifespan,
        ws="none",
        server_header=own_headers,
        date_header=own_headers,
        **uvicorn_settings(limits),
    )
    config.timeout_graceful_shutdown = 1
    return StoppableServer(config)
