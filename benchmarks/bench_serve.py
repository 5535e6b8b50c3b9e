"""Replay server throughput: ``chunktape serve`` vs aimock (Node), the same stream, 1, 10 and 100 clients.

Both servers run as their own process on 127.0.0.1 and serve one chat-completions stream of ``PIECES`` text
pieces of 20 characters (aimock's ``--chunk-size 20`` cuts its fixture into the same pieces), so both send the
same number of SSE events per stream (role, pieces, finish, ``[DONE]``). One asyncio client process opens
``clients`` concurrent connections, each reading streams in a loop (raw sockets, ``Connection: close``, so the
client costs both sides the same and little; a stream ends with its chunked body); the figure is SSE events
received per second of wall time, the sides measured in turns, median of the rounds. A last row reads short
streams one after another over one keep-alive httpx connection: the case a missing ``TCP_NODELAY`` slows to
~25 streams/s.

aimock (``@copilotkit/aimock`` on npm) is installed at bench time into ``benchmarks/.work/aimock`` (ignored by
git). Without npm, or with ``--quick``, its rows say "peer unavailable"/"not measured", never a pass.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import httpx

from chunktape import (
    Cassette,
    GenerateOptions,
    Interaction,
    Message,
    save_cassette,
)

sys.path.insert(0, str(Path(__file__).parent))
from bench_core import Row, print_table, recorded, text_stream

WORK = Path(__file__).parent / ".work"
PEER_DIR = WORK / "aimock"
PEER_PACKAGE = "@copilotkit/aimock"
PEER_CLI = PEER_DIR / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"
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


def _request(port: int) -> bytes:
    body = json.dumps(
        {"model": OPTIONS.model, "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer bench\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _one_stream(port: int, request: bytes) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    received = bytearray()
    # Read to the end of the chunked body: aimock keeps the connection open despite ``Connection: close``.
    while not received.endswith(b"\r\n0\r\n\r\n") and (piece := await reader.read(1 << 16)):
        received += piece
    writer.close()
    await writer.wait_closed()
    if not received.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"the server answered {bytes(received[:200])!r}")
    return received.count(b"data: ")


async def _drive(port: int, clients: int, streams: int) -> tuple[float, int]:
    """Events/s with ``clients`` concurrent clients reading ``streams`` streams each; and events per stream."""
    request = _request(port)
    per_stream = await _one_stream(port, request)  # warm up, and check the server answers

    async def client() -> int:
        return sum([await _one_stream(port, request) for _ in range(streams)])

    start = time.perf_counter()
    counts = await asyncio.gather(*(client() for _ in range(clients)))
    return sum(counts) / (time.perf_counter() - start), per_stream


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
def _process(command: list[str], port: int) -> Iterator[int]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_listening(port, process)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def chunktape_server(path: Path) -> AbstractContextManager[int]:
    port = _free_port()
    command = [sys.executable, "-m", "chunktape", "serve", str(path), "--port", str(port), "--instant", "--repeat"]
    return _process(command, port)


def install_peer() -> str | None:
    """Installs aimock into ``benchmarks/.work/aimock`` once; returns why it is unavailable, or None."""
    if PEER_CLI.is_file():
        return None
    if shutil.which("npm") is None or shutil.which("node") is None:
        return "node/npm not found"
    PEER_DIR.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(PEER_DIR), PEER_PACKAGE],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0 or not PEER_CLI.is_file():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return f"npm install {PEER_PACKAGE} failed: {last[0]}"
    return None


def peer_server(fixture: Path) -> AbstractContextManager[int]:
    port = _free_port()
    command = ["node", str(PEER_CLI), "-p", str(port), "-h", "127.0.0.1", "-f", str(fixture)]
    return _process([*command, "-c", str(PIECE), "--log-level", "silent"], port)


def measure(quick: bool = False) -> tuple[dict[int, dict[str, float]], str | None]:
    """Per client count: events/s of each side (and events per stream); and why the peer is missing, if it is."""
    count, rounds, events_per_client, short_streams = (60, 1, 600, 20) if quick else (PIECES, 3, 20_000, 300)
    missing = "not measured in --quick" if quick else install_peer()
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
        sides: dict[str, Callable[[], AbstractContextManager[int]]] = {"chunktape": lambda: chunktape_server(path)}
        if missing is None:
            sides["aimock"] = lambda: peer_server(fixture)
        runs: dict[tuple[str, int], list[float]] = {}
        for _ in range(rounds):
            for name, start in sides.items():
                with start() as port:
                    for n in CLIENTS:
                        streams = max(1, events_per_client // (count + 3) // n)
                        rate, per_stream = asyncio.run(_drive(port, n, streams))
                        runs.setdefault((name, n), []).append(rate)
                        results.setdefault(n, {})[f"{name}_events_per_stream"] = per_stream
                    runs.setdefault((name, SHORT), []).append(_short_streams(port, short_streams))
                    results.setdefault(SHORT, {})
        for (name, n), rates in runs.items():
            results[n][name] = statistics.median(rates)
    return results, missing


NAME = "replay server: SSE events/s, chunktape serve vs aimock, {n} client(s)"
SHORT = 0
"""The key of the short-stream figure in ``measure``'s results."""
SHORT_NAME = "replay server: short streams/s, one keep-alive httpx client, vs aimock"


def main(quick: bool = False) -> list[Row]:
    results, missing = measure(quick)
    rows: list[Row] = []
    for n, figures in results.items():
        ours = figures["chunktape"]
        name, unit = (SHORT_NAME, "streams/s") if n == SHORT else (NAME.format(n=n), "events/s")
        if missing is not None:
            rows.append(Row(name, "peer unavailable", ">= 1x", None, f"chunktape {ours:,.0f} {unit}; {missing}"))
            continue
        peer = figures["aimock"]
        detail = f"chunktape {ours:,.0f} {unit}, aimock {peer:,.0f}"
        if n != SHORT:
            events = f"{figures['chunktape_events_per_stream']:.0f} vs {figures['aimock_events_per_stream']:.0f}"
            detail += f" ({events} events per stream)"
        rows.append(Row(name, f"{ours / peer:.2f}x", ">= 1x", ours >= peer, detail))
    return rows


if __name__ == "__main__":
    print_table(main(quick="--quick" in sys.argv))
