"""chunktape's virtual clock: it jumps over what only time can end, and waits in real time for what the outside
brings (a socket's reply, an executor job), unless the server on the other end declared its silence."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest

from chunktape import _virtual_time
from chunktape._virtual_time import VirtualTimeLoop, replay_loop, silent_for

T = TypeVar("T")
Reply = Callable[[tuple[str, int]], Awaitable[None]]
"""What the server thread does before it answers a client (its peer address)."""


@asynccontextmanager
async def line_server(before_reply: Reply) -> AsyncIterator[int]:
    """A server on its own thread and real-time loop: reads a line, runs ``before_reply``, answers ``hello``."""
    ready = threading.Event()
    port: list[int] = []
    stop: list[Callable[[], object]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readline()
            peer = writer.get_extra_info("peername")
            await before_reply((peer[0], peer[1]))
            writer.write(b"hello\n")
            await writer.drain()
        except ConnectionError:
            pass  # the client gave up
        finally:
            writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.append(server.sockets[0].getsockname()[1])
        done = asyncio.get_running_loop().create_future()
        stop.append(lambda: done.get_loop().call_soon_threadsafe(done.set_result, None))
        ready.set()
        await done
        server.close()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield port[0]
    finally:
        stop[0]()
        thread.join(10)


async def ask(port: int, patience: float) -> tuple[str, float]:
    """The client: send a line, wait for the answer under ``patience`` seconds; what came and the loop time it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hi\n")
    await writer.drain()
    try:
        async with asyncio.timeout(patience):
            answer = (await reader.readline()).decode().strip()
    except TimeoutError:
        answer = "timeout"
    writer.close()
    return answer, loop.time() - start


def run(main: Callable[[], Coroutine[Any, Any, T]], loop: VirtualTimeLoop | None = None) -> T:
    made = loop or replay_loop()
    with asyncio.Runner(loop_factory=lambda: made) as runner:
        return runner.run(main())


def test_timers_alone_are_jumped_over_in_order() -> None:
    async def main() -> tuple[float, bool]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(30)
        try:
            async with asyncio.timeout(5):
                await asyncio.sleep(10)
        except TimeoutError:
            return loop.time(), True
        return loop.time(), False

    assert run(main) == (35.0, True)


def test_an_executor_job_holds_the_clock_until_it_ends() -> None:
    async def main() -> str:
        try:
            async with asyncio.timeout(60):
                await asyncio.to_thread(time.sleep, 0.05)
                return "done"
        except TimeoutError:
            return "timed out"

    assert run(main) == "done"


def test_a_reply_on_its_way_over_a_socket_is_waited_for_in_real_time() -> None:
    """A server that takes a moment (real I/O) does not make the client's timeout fire: the clock waits."""

    async def main() -> tuple[str, float]:
        async with line_server(lambda peer: asyncio.sleep(0.05)) as port:
            return await ask(port, patience=5)

    answer, took = run(main)
    assert answer == "hello"
    assert took < 5


def test_a_declared_silence_lets_the_client_timeout_fire_at_its_time() -> None:
    async def main() -> tuple[str, float]:
        async with line_server(lambda peer: silent_for(30, peer)) as port:
            return await ask(port, patience=5)

    answer, took = run(main)
    assert answer == "timeout"
    assert took == pytest.approx(5, abs=0.5)


def test_a_declared_silence_ends_on_the_client_clock_and_the_reply_follows() -> None:
    async def main() -> tuple[str, float]:
        async with line_server(lambda peer: silent_for(30, peer)) as port:
            return await ask(port, patience=60)

    answer, took = run(main)
    assert answer == "hello"
    assert took == pytest.approx(30, abs=0.5)


def test_the_end_cancels_what_still_runs_and_says_so() -> None:
    loop = replay_loop(end=100)

    async def main() -> None:
        await asyncio.Event().wait()  # never set: only the end can stop it
        await asyncio.sleep(1_000)

    async def hang() -> None:
        await asyncio.gather(main(), asyncio.sleep(500))

    with pytest.raises(asyncio.CancelledError):
        run(hang, loop)
    assert loop.deadline_reached
    assert loop.time() == 100


def test_a_silence_left_from_an_earlier_connection_on_the_same_port_holds_nothing() -> None:
    """A server still silent towards a client that left (its stall outlives the connection) must not make a new
    connection from the same port (the kernel reuses loopback ports) look silent: its reply is waited for."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = ("127.0.0.1", port)
    declared = threading.Event()

    async def stale() -> None:
        task = asyncio.ensure_future(silent_for(30, address))
        await asyncio.sleep(0)  # its first step declares the silence
        assert address in _virtual_time._SILENCES
        declared.set()
        await task

    thread = threading.Thread(target=asyncio.run, args=(stale(),), daemon=True)
    thread.start()
    assert declared.wait(10)

    async def main() -> tuple[str, float]:
        async with line_server(lambda peer: asyncio.sleep(0.05)) as server_port:
            loop = asyncio.get_running_loop()
            start = loop.time()
            reader, writer = await asyncio.open_connection("127.0.0.1", server_port, local_addr=address)
            writer.write(b"hi\n")
            await writer.drain()
            try:
                async with asyncio.timeout(5):
                    answer = (await reader.readline()).decode().strip()
            except TimeoutError:
                answer = "timeout"
            writer.close()
            return answer, loop.time() - start

    try:
        answer, took = run(main)
    finally:
        _virtual_time._SILENCES[address].end()
        thread.join(10)
    assert answer == "hello"
    assert took < 5  # the real pace of the reply, not a jump to the client's timeout


def test_what_a_server_wrote_before_its_silence_is_read_before_the_clock_jumps() -> None:
    """The server writes a chunk, then declares the silence before the next: a client loop that finds the silence
    reads the chunk first (its clock stays), instead of jumping over the silence and reading it late."""
    loop = replay_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server_side, _ = listener.accept()
        try:
            client.setblocking(False)
            loop.add_reader(client.fileno(), lambda: None)
            server_side.sendall(b"w0")
            address = client.getsockname()
            silence = _virtual_time.Silence((address[0], address[1]), 1.0, lambda: None)
            with _virtual_time._LOCK:
                _virtual_time._SILENCES[silence.client] = silence
            try:
                ready = loop._idle(loop._watch._inner, 10.0)  # the selector found nothing ready a moment before
            finally:
                with _virtual_time._LOCK:
                    del _virtual_time._SILENCES[silence.client]
            assert [key.fd for key, _ in ready] == [client.fileno()]
            assert loop.time() == 0.0
            assert not silence.ended
        finally:
            loop.remove_reader(client.fileno())
            client.close()
            server_side.close()
            loop.close()
