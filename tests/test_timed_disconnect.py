"""``Disconnect(after_s=...)`` is a declared silence like the other waits: over ``serve`` a virtual-time client's clock
jumps to the disconnect, so it sees the chunks recorded before it and the break at that loop time, as a client in
real time would (where the server's real timer would have let every chunk through first); in process the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import httpx2
import openai
import pytest

from chunktape import Cassette, LlmError, ReplayAdapter, Timing
from chunktape._virtual_time import VirtualTimeLoop
from chunktape.faults import Disconnect, Stall
from chunktape.http import ReplayServer
from helpers import interaction_of, options, text_stream

T = TypeVar("T")
PIECES = [f"w{n} " for n in range(10)]
"""One text delta a second (recorded timing): block-start at 1 s, the pieces at 2 s ... 11 s."""


def cassette() -> Cassette:
    return Cassette(interactions=[interaction_of(text_stream(*PIECES), gap_ns=1_000_000_000)])


def virtual(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    loop = VirtualTimeLoop()
    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(main())


async def read_sdk(base_url: str) -> tuple[list[tuple[str, float]], str, float]:
    """The pieces an openai client got (each with its loop time), how the stream ended, and when."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    got: list[tuple[str, float]] = []
    async with openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=60.0) as sdk:
        try:
            stream = await sdk.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "hello"}], stream=True
            )
            async for event in stream:
                for choice in event.choices:
                    if choice.delta.content:
                        got.append((choice.delta.content, round(loop.time() - start, 1)))
            ended = "completed"
        except (openai.APIError, httpx2.HTTPError) as error:
            ended = type(error).__name__
    return got, ended, round(loop.time() - start, 1)


@pytest.mark.parametrize(
    "fault", [Disconnect(after_s=4.5), Stall(after_chunks=2, seconds=30)], ids=["disconnect-after-4.5s", "stall-inside"]
)
def test_over_serve_a_timed_disconnect_breaks_at_its_time_on_the_clients_clock(fault: Any) -> None:
    faults: list[Any] = [Disconnect(after_s=4.5)]
    if isinstance(fault, Stall):
        faults.insert(0, fault)  # a stall inside the disconnect's time is cut at its deadline too
    with ReplayServer(cassette(), timing=Timing.recorded(), faults=faults) as server:
        got, ended, at = virtual(lambda: read_sdk(server.url + "/v1"))
    assert ended != "completed"
    if isinstance(fault, Stall):
        assert [piece for piece, _ in got] == PIECES[:1]  # the stall began after the second chunk (w0)
    else:
        assert got == [(piece, float(2 + n)) for n, piece in enumerate(PIECES[:3])]  # at 2, 3 and 4 s
    assert at == pytest.approx(4.5, abs=0.1)


def test_in_process_a_timed_disconnect_breaks_at_its_time() -> None:
    async def main() -> tuple[list[str], str, float]:
        loop = asyncio.get_running_loop()
        replay = ReplayAdapter(cassette(), timing=Timing.recorded(), faults=[Disconnect(after_s=4.5)])
        texts: list[str] = []
        try:
            async for chunk in replay.stream(options()):
                texts.append(getattr(chunk, "text", ""))
            ended = "completed"
        except LlmError as error:
            ended = error.code
        return [text for text in texts if text], ended, loop.time()

    texts, ended, at = virtual(main)
    assert (texts, ended) == (PIECES[:3], "STREAM_ABORTED")
    assert at == pytest.approx(4.5, abs=0.01)
