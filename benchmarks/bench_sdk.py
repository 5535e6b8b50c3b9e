"""In-process HTTP replay, ``ReplayTransport`` vs cassetter: through the openai SDK, and with a raw httpx2 client.

Three rows, each side replaying the same content from its own file, every round starting from that file (what a
test pays): chunktape builds ``ReplayTransport(path)`` over the msgpack cassette and hands it to the client;
cassetter enters its ``use_cassette(path, record_mode="none", match_on=["method", "uri", "body"])``, which
intercepts httpx2's transport, around a plain client. Both sides build their clients the same way, once per round
(one ``httpx2.Client``, and for the SDK rows one ``openai.OpenAI(http_client=...)`` on it):

- SDK: 1,000 short streams (5 text pieces) through ``openai.OpenAI``, each read to its end;
- raw: the same 1,000 streams through a bare ``httpx2.Client``, each body read to its end (the SDK's own cost no
  longer hides ours);
- raw, 200 x 500: the open/decode rows' session (200 streams of 500 chunks), each body read to its end; the detail
  also gives the same 200 requests played again through one transport (``allow_repeats``), whose instant,
  fault-free bodies were rendered once (``chunktape.http._rendered``).

Each request is distinct, so every call matches one recording. cassetter's cassettes are recorded by cassetter
itself from chunktape's replay server on 127.0.0.1, so both hold the same content. The whole measurement runs in
one child process whose path holds cassetter's folder alone (``_peers.env``); the sides take turns, median of the
rounds. Without cassetter (not installed, or ``--quick`` with nothing there) the rows say "peer unavailable" and
chunktape's side is measured alone.
"""

from __future__ import annotations

import gc
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _peers
import httpx2
import openai
from bench_core import URL, Row, print_table, recorded, request, session, text_stream

from chunktape import Cassette, GenerateOptions, Message, save_cassette
from chunktape.http import ReplayServer, ReplayTransport, render_sse

_TEXT = ["Hello", ", ", "wor", "ld", "!"]
_HEADERS = {"content-type": "application/json"}
ROWS = {
    "sdk": ("SDK replay in process: 1,000 short streams through openai, ReplayTransport vs cassetter", 1.5),
    "raw": ("raw httpx2 client in process: 1,000 short streams, ReplayTransport vs cassetter", 3.0),
    "raw-long": ("raw httpx2 client in process: 200 x 500 session, ReplayTransport vs cassetter", 3.0),
}


def short_cassette(streams: int) -> Cassette:
    """``streams`` distinct requests, each answered with a short text stream."""
    interactions = []
    for n in range(streams):
        options = GenerateOptions(model="m", messages=[Message(role="user", content=f"question {n}")])
        interactions.append(recorded(options, text_stream(_TEXT), step_ns=1000))
    return Cassette(interactions=interactions)


def short_bodies(streams: int) -> list[bytes]:
    return [
        json.dumps({"model": "m", "messages": [{"role": "user", "content": f"question {n}"}], "stream": True}).encode()
        for n in range(streams)
    ]


def long_cassette(count: int, per: int) -> tuple[Cassette, list[bytes]]:
    """The open/decode rows' session (``bench_core.session``) and the request body that asks each stream."""
    cassette, bodies = [], []
    for number, exchange in enumerate(session(count, per)):
        cassette.append(recorded(request(number), exchange.chunks, step_ns=1000))
        bodies.append(exchange.body.encode())
    return Cassette(interactions=cassette), bodies


def _sdk_drive(client: openai.OpenAI, streams: int) -> None:
    for n in range(streams):
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"question {n}"}], stream=True
        )
        text = "".join(part.choices[0].delta.content or "" for part in stream if part.choices)
        assert text == "Hello, world!", text


def _raw_drive(client: httpx2.Client, url: str, bodies: Sequence[bytes]) -> int:
    size = 0
    for body in bodies:
        with client.stream("POST", url, content=body, headers=_HEADERS) as reply:
            reply.raise_for_status()
            for piece in reply.iter_bytes():
                size += len(piece)
    return size


def _sdk(http: httpx2.Client, base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="test", max_retries=0, http_client=http)


def _seconds(run: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def child(quick: bool, with_peer: bool) -> None:
    """Run in a process of its own (with cassetter's folder on its path when ``with_peer``): print the figures."""
    streams, rounds = (100, 1) if quick else (1000, 5)
    count, per = (20, 500) if quick else (200, 500)
    folder = Path(tempfile.mkdtemp())
    short, long_ = folder / "short.msgpack", folder / "long.msgpack"
    short_source = short_cassette(streams)
    long_source, long_bodies = long_cassette(count, per)
    save_cassette(short_source, short)
    save_cassette(long_source, long_)
    bodies = short_bodies(streams)
    base = "http://127.0.0.1:9/v1"

    def ours_sdk() -> None:
        with httpx2.Client(transport=ReplayTransport(short)) as http, _sdk(http, base) as client:
            _sdk_drive(client, streams)

    def ours_raw(path: Path, requests: Sequence[bytes], url: str) -> Callable[[], object]:
        def run() -> object:
            with httpx2.Client(transport=ReplayTransport(path)) as http:
                return _raw_drive(http, url, requests)

        return run

    prebuilt = {id(short_source): [render_sse(interaction) for interaction in short_source.interactions]}
    prebuilt[id(long_source)] = [render_sse(interaction) for interaction in long_source.interactions]

    def mocked(source: Cassette) -> httpx2.MockTransport:
        """The floor: every request answered with its body, built before the clock starts (no cassette, no
        matching, no rendering)."""
        rendered = prebuilt[id(source)]
        turn = iter(range(1 << 62))

        def answer(request: httpx2.Request) -> httpx2.Response:
            body = rendered[next(turn) % len(rendered)]
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

        return httpx2.MockTransport(answer)

    def floor_sdk() -> None:
        with httpx2.Client(transport=mocked(short_source)) as http, _sdk(http, base) as client:
            _sdk_drive(client, streams)

    def floor_raw(source: Cassette, requests: Sequence[bytes], url: str) -> Callable[[], object]:
        def run() -> object:
            with httpx2.Client(transport=mocked(source)) as http:
                return _raw_drive(http, url, requests)

        return run

    sides: dict[str, dict[str, Callable[[], object]]] = {
        "sdk": {"chunktape": ours_sdk, "floor": floor_sdk},
        "raw": {
            "chunktape": ours_raw(short, bodies, base + "/chat/completions"),
            "floor": floor_raw(short_source, bodies, base + "/chat/completions"),
        },
        "raw-long": {"chunktape": ours_raw(long_, long_bodies, URL), "floor": floor_raw(long_source, long_bodies, URL)},
    }
    figures: dict[str, Any] = {}
    if with_peer:
        cassetter: Any = importlib.import_module("cassetter")  # installed at bench time: no stubs for mypy
        match = ["method", "uri", "body"]
        peer_short, peer_raw_short, peer_long = folder / "short.yaml", folder / "raw.yaml", folder / "long.yaml"
        with ReplayServer(short_source, allow_repeats=True) as server:
            short_url = server.url  # the recordings hold it; nothing listens there once they replay
            recording = cassetter.use_cassette(peer_short, record_mode="all", match_on=match)
            with recording, httpx2.Client() as http, _sdk(http, server.url + "/v1") as client:
                _sdk_drive(client, streams)
            recording = cassetter.use_cassette(peer_raw_short, record_mode="all", match_on=match)
            with recording, httpx2.Client() as http:  # the raw client's bodies are not the SDK's bytes
                _raw_drive(http, server.url + "/v1/chat/completions", bodies)
        with ReplayServer(long_source, allow_repeats=True) as server:
            long_url = server.url
            recording = cassetter.use_cassette(peer_long, record_mode="all", match_on=match)
            with recording, httpx2.Client() as http:
                _raw_drive(http, long_url + "/chat/completions", long_bodies)

        def peer_sdk() -> None:
            replaying = cassetter.use_cassette(peer_short, record_mode="none", match_on=match)
            with replaying, httpx2.Client() as http, _sdk(http, short_url + "/v1") as client:
                _sdk_drive(client, streams)

        def peer_raw(path: Path, requests: Sequence[bytes], url: str) -> Callable[[], object]:
            def run() -> object:
                with cassetter.use_cassette(path, record_mode="none", match_on=match), httpx2.Client() as http:
                    return _raw_drive(http, url, requests)

            return run

        sides["sdk"]["cassetter"] = peer_sdk
        sides["raw"]["cassetter"] = peer_raw(peer_raw_short, bodies, short_url + "/v1/chat/completions")
        sides["raw-long"]["cassetter"] = peer_raw(peer_long, long_bodies, long_url + "/chat/completions")
        figures["sizes"] = {
            "chunktape": sides["raw-long"]["chunktape"](),
            "cassetter": sides["raw-long"]["cassetter"](),
        }
    # What the setup left on the heap (both sessions, built in memory) is no part of either side: a full collection
    # scanning it would add the same time to both, which only pulls a ratio towards 1.
    gc.collect()
    gc.freeze()
    for runs in sides.values():  # warm both sides up once
        for run in runs.values():
            run()
    times: dict[str, dict[str, list[float]]] = {row: {side: [] for side in runs} for row, runs in sides.items()}
    for _ in range(rounds):  # in turns, so a change of machine load falls on both sides
        for row, runs in sides.items():
            for side, run in runs.items():
                times[row][side].append(_seconds(run))
    # The long session played again through one transport: its bodies were rendered on the first play.
    with httpx2.Client(transport=ReplayTransport(long_, allow_repeats=True)) as http:
        _raw_drive(http, URL, long_bodies)
        again = [_seconds(lambda: _raw_drive(http, URL, long_bodies)) for _ in range(rounds)]
    figures["medians"] = {
        row: {side: statistics.median(t) for side, t in sides_.items()} for row, sides_ in times.items()
    }
    figures["again"] = statistics.median(again)
    figures["counts"] = {"sdk": streams, "raw": streams, "raw-long": count}
    print(json.dumps(figures))


def measure(quick: bool = False) -> tuple[dict[str, Any], str | None]:
    missing = _peers.ensure(_peers.CASSETTER, install=not quick)
    peer = _peers.CASSETTER if missing is None else None
    command = [sys.executable, __file__, "--child", "quick" if quick else "full", "peer" if peer else "alone"]
    done = subprocess.run(command, capture_output=True, text=True, env=_peers.env(peer))
    if done.returncode != 0:
        raise RuntimeError(f"bench_sdk's child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout), missing


def main(quick: bool = False) -> list[Row]:
    figures, missing = measure(quick)
    medians, counts = figures["medians"], figures["counts"]
    rows = []
    for key, (name, target) in ROWS.items():
        ours = counts[key] / medians[key]["chunktape"]
        floor = counts[key] / medians[key]["floor"]
        detail = f"chunktape {ours:,.0f} streams/s"
        if key == "raw-long":
            detail += f" ({counts[key] / figures['again']:,.0f} when played again through one transport)"
        floor_text = f"; prebuilt bodies on a MockTransport (the floor): {floor:,.0f}"
        if missing is not None:
            rows.append(Row(name, "peer unavailable", f">= {target:g}x", None, f"{detail}{floor_text}; {missing}"))
            continue
        peer = counts[key] / medians[key]["cassetter"]
        ratio = ours / peer
        # What each side adds to a stream over the floor, the client's own cost both pay.
        over = [(medians[key][side] - medians[key]["floor"]) / counts[key] * 1e6 for side in ("chunktape", "cassetter")]
        detail += f", cassetter {peer:,.0f}{floor_text}; over it, µs per stream: chunktape {over[0]:,.0f}, "
        detail += f"cassetter {over[1]:,.0f}"
        rows.append(Row(name, f"{ratio:.2f}x", f">= {target:g}x", ratio >= target, detail))
    return rows


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2] == "quick", sys.argv[3] == "peer")
    else:
        print_table(main(quick="--quick" in sys.argv))
