"""``StoppableServer`` stops when asked, not on uvicorn's next tick, and still runs uvicorn's shutdown."""

from __future__ import annotations

import asyncio
import socket
import threading

import httpx2
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from chunktape.http._server.running import StoppableServer


async def _hello(request: object) -> PlainTextResponse:
    return PlainTextResponse("hello")


def _config() -> uvicorn.Config:
    app = Starlette(routes=[Route("/", _hello)])
    return uvicorn.Config(app, log_config=None, log_level="critical", access_log=False, lifespan="off", ws="none")


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


async def _stop_delay(server: uvicorn.Server, stop: object) -> float:
    """Virtual seconds from the stop request to the end of ``serve()``, for a server that served a while."""
    loop = asyncio.get_running_loop()
    serving = asyncio.create_task(server.serve(sockets=[_listening()]))
    await asyncio.sleep(1.05)  # past a few of uvicorn's ticks, between two of them
    asked = loop.time()
    stop()  # type: ignore[operator]
    await serving
    return loop.time() - asked


@pytest.mark.looptime
async def test_exit_stops_the_server_without_waiting_for_a_tick() -> None:
    server = StoppableServer(_config())
    assert await _stop_delay(server, server.exit) < 0.01


@pytest.mark.looptime
async def test_uvicorns_own_server_waits_a_tick_and_a_fixed_sleep() -> None:
    """The delay StoppableServer removes (this pins uvicorn's behaviour; if it changes, so can StoppableServer)."""
    server = uvicorn.Server(_config())

    def stop() -> None:
        server.should_exit = True

    assert await _stop_delay(server, stop) >= 0.1


@pytest.mark.looptime
async def test_exit_before_serving_serves_nothing() -> None:
    server = StoppableServer(_config())
    server.exit()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await server.serve(sockets=[_listening()])
    assert loop.time() - started < 0.01


def test_exit_from_another_thread_stops_a_server_with_an_open_keep_alive_connection() -> None:
    sock = _listening()
    server = StoppableServer(_config())
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    with httpx2.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
        assert client.get("/").text == "hello"  # the connection stays open in the client's pool
        server.exit()
        thread.join(timeout=10)
        assert not thread.is_alive()
        with pytest.raises(httpx2.TransportError):  # the server closed it and listens no more
            client.get("/")
