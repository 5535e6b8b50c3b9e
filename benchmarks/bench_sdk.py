"""SDK replay in process: 1,000 short streams through the openai SDK, ``ReplayTransport`` vs cassetter.

Both sides replay the same streams to a sync ``openai.OpenAI`` on an ``httpx2.Client``, no socket: chunktape
with ``ReplayTransport`` on the client, cassetter with its ``use_cassette`` (record mode ``none``, matched on
method, URI and body) intercepting httpx2. cassetter's cassette is recorded from the same chunk cassette, served
by chunktape's replay server on 127.0.0.1, so both hold the same content. Each request is distinct, so every
call matches one recording.

cassetter (PyPI) is installed at bench time into ``benchmarks/.work/cassetter`` (ignored by git; never in CI,
never a dependency, and never in the virtualenv, where its pytest plugin would load into the suite).
Without it, or with ``--quick``/``--smoke`` (no network), the row says "peer unavailable".
"""

from __future__ import annotations

import gc
import importlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
from bench_core import CASSETTER, Row, install_cassetter, print_table, recorded, text_stream

from chunktape import Cassette, GenerateOptions, Message
from chunktape.http import ReplayServer, ReplayTransport

NAME = "SDK replay in process: 1,000 short streams through openai, ReplayTransport vs cassetter"
PEER = CASSETTER
_TEXT = ["Hello", ", ", "wor", "ld", "!"]


def cassette(streams: int) -> Cassette:
    """``streams`` distinct requests, each answered with a short text stream."""
    interactions = []
    for n in range(streams):
        options = GenerateOptions(model="m", messages=[Message(role="user", content=f"question {n}")])
        interactions.append(recorded(options, text_stream(_TEXT), step_ns=1000))
    return Cassette(interactions=interactions)


def _drive(client: openai.OpenAI, streams: int) -> float:
    """Seconds to stream every question once, reading each stream to its end."""
    started = time.perf_counter()
    for n in range(streams):
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"question {n}"}], stream=True
        )
        text = "".join(part.choices[0].delta.content or "" for part in stream if part.choices)
        assert text == "Hello, world!", text
    return time.perf_counter() - started


def _sdk(transport: httpx2.BaseTransport | None = None) -> openai.OpenAI:
    http = httpx2.Client(transport=transport) if transport is not None else httpx2.Client()
    return openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test", max_retries=0, http_client=http)


def _best(run: Callable[[], float], repeat: int) -> float:
    return min(run() for _ in range(repeat))


def measure(quick: bool = False) -> tuple[dict[str, float], str | None]:
    streams = 100 if quick else 1000
    repeat = 1 if quick else 3
    source = cassette(streams)
    # What earlier benchmarks of this process left on the heap is no part of either side: a full collection
    # scanning it adds the same time to both, which only pulls the ratio towards 1.
    gc.collect()
    gc.freeze()
    try:
        return _measure(source, streams, repeat, quick)
    finally:
        gc.unfreeze()


def _measure(source: Cassette, streams: int, repeat: int, quick: bool) -> tuple[dict[str, float], str | None]:
    figures: dict[str, float] = {}

    def ours() -> float:
        with _sdk(ReplayTransport(source)) as client:
            return _drive(client, streams)

    missing = "not measured with --quick (no network)" if quick else install_cassetter()
    if missing is not None:
        figures["chunktape_streams_per_s"] = streams / _best(ours, repeat)
        return figures, missing
    cassetter: Any = importlib.import_module(PEER)  # installed at bench time: no stubs for mypy

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "peer.yaml"
        with ReplayServer(source, allow_repeats=True) as server:
            http = httpx2.Client()
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="test", max_retries=0, http_client=http)
            with cassetter.use_cassette(path, record_mode="all", match_on=["method", "uri", "body"]), client:
                _drive(client, streams)

        def peer() -> float:
            with cassetter.use_cassette(path, record_mode="none", match_on=["method", "uri", "body"]):
                replay = openai.OpenAI(base_url=server.url + "/v1", api_key="test", max_retries=0)
                with replay:
                    return _drive(replay, streams)

        ours_s, peer_s = [], []
        for _ in range(repeat):  # in turns, so a change of machine load falls on both sides
            ours_s.append(ours())
            peer_s.append(peer())
        figures["chunktape_streams_per_s"] = streams / min(ours_s)
        figures["peer_streams_per_s"] = streams / min(peer_s)
    return figures, None


def main(quick: bool = False) -> list[Row]:
    figures, missing = measure(quick)
    ours = figures["chunktape_streams_per_s"]
    if missing is not None:
        return [Row(NAME, "peer unavailable", ">= 1.2x", None, f"chunktape {ours:,.0f} streams/s; {missing}")]
    ratio = ours / figures["peer_streams_per_s"]
    detail = f"chunktape {ours:,.0f} streams/s, cassetter {figures['peer_streams_per_s']:,.0f}"
    return [Row(NAME, f"{ratio:.2f}x", ">= 1.2x", ratio >= 1.2, detail)]


if __name__ == "__main__":
    print_table(main(quick="--quick" in sys.argv))
