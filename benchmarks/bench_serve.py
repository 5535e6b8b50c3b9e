"""Replay server throughput: ``chunktape serve`` vs aimock (Node), the same stream, 1, 10 and 100 clients.

Both servers run as their own process on 127.0.0.1 and serve one chat-completions stream of ``PIECES`` text
pieces of 20 characters (aimock's ``--chunk-size 20`` cuts its fixture into the same pieces), so both send the
same number of SSE events per stream (role, pieces, finish, ``[DONE]``). The clients are httpx2 ``AsyncClient``s in
one asyncio process (this one), ``clients`` of them at once, each on its own kept-alive connection reading streams
in a loop to their end; the figure is SSE events (chunks) received per second of wall time, the sides measured in
turns, median of the rounds. Beside it, the events each server sent per CPU second of its own process (user +
system time of all its threads, from ``/proc``): the server-to-server figure, which the client's share of the two
cores does not blur. A last row reads short streams one after another over one keep-alive httpx connection: the
case a missing ``TCP_NODELAY`` slows to ~25 streams/s.

aimock (``@copilotkit/aimock`` on npm, pinned) is installed at bench time into ``benchmarks/.work/aimock`` (ignored
by git; ``_peers.ensure_aimock``). Without npm, or with ``--quick`` and nothing installed, its rows say "peer
unavailable", never a pass.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import _peers
import httpx
import httpx2

from chunktape import (
    Cassette,
    GenerateOptions,
    Interaction,
    Message,
    save_cassette,
)

sys.path.insert(0, str(Path(__file__).parent))
from bench_core import Row, print_table, recorded, text_stream

WORK = _peers.WORK
PIECE = 20
PIECES = 497
PROMPT = "stream a lot"
SHORT_PROMPT = "say hi"
SHORT_PIECES = 3
OPTIONS = GenerateOptions(model="bench-model", messages=[Message(role="user", content=PROMPT)])
CLIENTS = (1, 10, 100)


def pieces(count: int) -> list[str]:
    return [f"tok{n:06d} ".ljust(PIECE, "x") for n in range(count)]


def _interaction(prompt: str, count: int) -> Interaction:
    options = GenerateOptions(model=OPTIONS.model, messages=[Message(role="user", content=prompt)])
    return recorded(options, text_stream(pieces(count)))


def cassette(count: int) -> Cassette:
    """The long stream, and the short one (``SHORT_PIECES``)."""
    return Cassette(interactions=[_interaction(PROMPT, count), _interaction(SHORT_PROMPT, SHORT_PIECES)])


def _short_streams(port: int, streams: int) -> float:
    """Short streams per second read one after another over one keep-alive httpx connection: what a delayed ACK
    (no TCP_NODELAY on the server) costs every response (~40 ms)."""
    body = {"model": OPTIONS.model, "stream": True, "messages": [{"role": "user", "content": SHORT_PROMPT}]}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"authorization": "Bearer bench"}) as client:
        client.post("/v1/chat/completions", json=body).raise_for_status()
        start = time.perf_counter()
        for _ in range(streams):
            with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                for _line in reply.iter_lines():
                    pass
        return streams / (time.perf_counter() - start)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process ``pid`` (all its threads) has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _one_stream(client: httpx2.AsyncClient, body: dict[str, object]) -> int:
    """One streamed request read to its end; the SSE events it held."""
    events, tail = 0, b""
    async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"the server answered {reply.status_code}: {(await reply.aread())[:200]!r}")
        async for piece in reply.aiter_bytes():
            joined = tail + piece  # an event's "data: " may be split across two reads
            events += joined.count(b"data: ") - tail.count(b"data: ")
            tail = joined[-5:]
    return events


async def _drive(port: int, clients: int, streams: int, pid: int) -> tuple[float, int, float]:
    """Events/s with ``clients`` concurrent httpx2 clients (one connection each, kept alive) reading ``streams``
    streams each; events per stream; and events per CPU second of the server process ``pid``."""
    body: dict[str, object] = {
        "model": OPTIONS.model,
        "stream": True,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    headers = {"authorization": "Bearer bench"}
    pool = [httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers) for _ in range(clients)]
    try:
        per_stream = await _one_stream(pool[0], body)  # warm up, and check the server answers

        async def client(http: httpx2.AsyncClient) -> int:
            return sum([await _one_stream(http, body) for _ in range(streams)])

        cpu = _cpu_seconds(pid)
        start = time.perf_counter()
        counts = await asyncio.gather(*(client(http) for http in pool))
        wall = time.perf_counter() - start
        cpu = _cpu_seconds(pid) - cpu
    finally:
        await asyncio.gather(*(http.aclose() for http in pool))
    return sum(counts) / wall, per_stream, sum(counts) / max(cpu, 1e-9)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {deadline_s} s")


@contextmanager
def _process(command: list[str], port: int) -> Iterator[tuple[int, int]]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_listening(port, process)
        yield port, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def chunktape_server(path: Path) -> AbstractContextManager[tuple[int, int]]:
    port = _free_port()
    command = [sys.executable, "-m", "chunktape", "serve", str(path), "--port", str(port), "--instant", "--repeat"]
    return _process(command, port)


def peer_server(fixture: Path) -> AbstractContextManager[tuple[int, int]]:
    port = _free_port()
    command = ["node", str(_peers.AIMOCK_CLI), "-p", str(port), "-h", "127.0.0.1", "-f", str(fixture)]
    return _process([*command, "-c", str(PIECE), "--log-level", "silent"], port)


def measure(quick: bool = False) -> tuple[dict[int, dict[str, float]], str | None]:
    """Per client count: events/s of each side (and events per stream); and why the peer is missing, if it is."""
    count, rounds, events_per_run, short_streams = (60, 1, 600, 20) if quick else (PIECES, 3, 200_000, 300)
    missing = _peers.ensure_aimock(install=not quick)
    WORK.mkdir(exist_ok=True)
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(dir=WORK) as folder:
        path = Path(folder) / "serve.msgpack"
        save_cassette(cassette(count), path)
        fixture = Path(folder) / "fixture.json"
        fixtures = [
            {"match": {"userMessage": prompt}, "response": {"content": "".join(pieces(n))}}
            for prompt, n in ((PROMPT, count), (SHORT_PROMPT, SHORT_PIECES))
        ]
        fixture.write_text(json.dumps({"fixtures": fixtures}))
        sides: dict[str, Callable[[], AbstractContextManager[tuple[int, int]]]] = {
            "chunktape": lambda: chunktape_server(path)
        }
        if missing is None:
            sides["aimock"] = lambda: peer_server(fixture)
        runs: dict[tuple[str, int], list[float]] = {}
        cpu_runs: dict[tuple[str, int], list[float]] = {}
        for _ in range(rounds):
            for name, start in sides.items():
                with start() as (port, pid):
                    for n in CLIENTS:
                        streams = max(1, events_per_run // (count + 3) // n)
                        rate, per_stream, per_cpu = asyncio.run(_drive(port, n, streams, pid))
                        runs.setdefault((name, n), []).append(rate)
                        cpu_runs.setdefault((name, n), []).append(per_cpu)
                        results.setdefault(n, {})[f"{name}_events_per_stream"] = per_stream
                    runs.setdefault((name, SHORT), []).append(_short_streams(port, short_streams))
                    results.setdefault(SHORT, {})
        for (name, n), rates in runs.items():
            results[n][name] = statistics.median(rates)
        for (name, n), rates in cpu_runs.items():
            results[n][f"{name}_per_cpu_s"] = statistics.median(rates)
    return results, missing


NAME = "replay server: chunks/s, chunktape serve vs aimock, {n} httpx2 client(s)"
SHORT = 0
"""The key of the short-stream figure in ``measure``'s results."""
SHORT_NAME = "replay server: short streams/s, one keep-alive httpx client, vs aimock"
TARGET = 3.0


def main(quick: bool = False) -> list[Row]:
    results, missing = measure(quick)
    rows: list[Row] = []
    for n, figures in results.items():
        ours = figures["chunktape"]
        short = n == SHORT
        name, unit, target = (SHORT_NAME, "streams/s", 1.0) if short else (NAME.format(n=n), "chunks/s", TARGET)
        detail = f"chunktape {ours:,.0f} {unit}"
        if not short:
            detail += f", {figures['chunktape_per_cpu_s']:,.0f} per server CPU-second"
        if missing is not None:
            rows.append(Row(name, "peer unavailable", f">= {target:g}x", None, f"{detail}; {missing}"))
            continue
        peer = figures["aimock"]
        detail = f"{detail}; aimock {peer:,.0f}"
        if not short:
            per_cpu = figures["chunktape_per_cpu_s"] / figures["aimock_per_cpu_s"]
            detail += (
                f", {figures['aimock_per_cpu_s']:,.0f} per server CPU-second (chunktape/aimock {per_cpu:.2f}x); "
                f"{figures['chunktape_events_per_stream']:.0f} vs {figures['aimock_events_per_stream']:.0f} events "
                "per stream"
            )
        rows.append(Row(name, f"{ours / peer:.2f}x", f">= {target:g}x", ours >= target * peer, detail))
    return rows


if __name__ == "__main__":
    print_table(main(quick="--quick" in sys.argv))
