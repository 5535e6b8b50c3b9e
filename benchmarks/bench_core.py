"""Core figures, measured side by side in one run and printed as ratios.

- instant replay vs a bare async generator yielding the same prebuilt chunks; and a fresh cassette file replayed
  once through (open, match, decode, yield) vs the same generator;
- recording overhead per chunk over consuming the inner adapter directly (journal and final save included), as a
  ratio to encoding each chunk twice plus a buffered append;
- opening a 200 x 500 cassette until the first request is matched, vs vcrpy's ``FilesystemPersister`` on the
  same stream content stored as SSE bodies in its YAML cassette, and vs cassetter's loader on the same bodies
  (cassetter installed at bench time by ``install_cassetter``);
- decoding every chunk vs vcrpy (and cassetter) load + SSE split + ``json.loads`` per data line;
- recorded-timing replay: per-gap error in real time.

Medians over repeated runs; nothing here is asserted (timing never belongs in tests). ``main()`` returns the
rows of the one table ``benchmarks/run.py`` prints; ``--quick`` shrinks every workload for a smoke run.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import _peers
import msgspec

from chunktape import (
    BlockEnd,
    BlockStart,
    Cassette,
    CassetteMeta,
    Completed,
    Event,
    Finish,
    FinishReason,
    GenerateOptions,
    Interaction,
    LlmAdapter,
    Message,
    RecordedRequest,
    RecordingAdapter,
    ReplayAdapter,
    StreamChunk,
    TextBlock,
    TextDelta,
    Timing,
    TokenUsage,
    UsageChunk,
    load_cassette,
    open_cassette,
    save_cassette,
)

INTERACTIONS = 200
CHUNKS = 500


@dataclass(frozen=True)
class Row:
    """One line of the table: a figure, its target, and whether it was met (None: not measured)."""

    name: str
    value: str
    target: str
    passed: bool | None
    detail: str = ""

    @property
    def verdict(self) -> str:
        return "pending" if self.passed is None else ("PASS" if self.passed else "MISS")


@dataclass(frozen=True)
class Size:
    """How big each workload is: the full run, or ``--quick``."""

    repeat: int
    replay_chunks: int
    record_streams: int
    record_chunks: int
    interactions: int
    chunks: int
    timing_gaps: int
    timing_runs: int
    million: int
    open_rounds: int


FULL = Size(
    repeat=7,
    replay_chunks=10_000,
    record_streams=20,
    record_chunks=5_000,
    interactions=INTERACTIONS,
    chunks=CHUNKS,
    timing_gaps=200,
    timing_runs=5,
    million=1_000_000,
    open_rounds=3,
)
QUICK = Size(
    repeat=2,
    replay_chunks=2_000,
    record_streams=2,
    record_chunks=2_000,
    interactions=20,
    chunks=CHUNKS,
    timing_gaps=40,
    timing_runs=1,
    million=50_000,
    open_rounds=1,
)


def median_times(runs: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Median seconds of each run, the runs interleaved (a, b, a, b, ...) so that a noisy moment on a shared
    machine hits every side of a ratio alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            gc.collect()
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def text_stream(pieces: Sequence[str], *, usage: int | None = None) -> list[StreamChunk]:
    """A valid text stream of ``pieces``: block-start, a delta each, block-end, a usage chunk when ``usage`` (input
    tokens) is given, finish."""
    usage_chunk = [] if usage is None else [UsageChunk(usage=TokenUsage(input_tokens=usage, output_tokens=len(pieces)))]
    return [
        BlockStart(index=0, block_type="text"),
        *(TextDelta(index=0, text=piece) for piece in pieces),
        BlockEnd(index=0, block=TextBlock(text="".join(pieces))),
        *usage_chunk,
        Finish(reason=FinishReason(kind="stop")),
    ]


def text_chunks(count: int, seed: int = 0) -> list[StreamChunk]:
    """A valid text stream of exactly ``count`` chunks (block-start, deltas, block-end, usage, finish)."""
    return text_stream([f"word{(seed * 31 + n) % 997} " for n in range(count - 4)], usage=100)


def recorded(
    options: GenerateOptions, chunks: Sequence[StreamChunk], *, step_ns: int = 1, start_ns: int = 0
) -> Interaction:
    """``chunks`` as a completed recording of ``options``: the n-th at ``start_ns + n * step_ns``, the end one step
    after the last."""
    return Interaction(
        request=RecordedRequest.from_options(options),
        events=[Event(t_ns=start_ns + n * step_ns, chunk=chunk) for n, chunk in enumerate(chunks)],
        outcome=Completed(t_ns=start_ns + len(chunks) * step_ns),
    )


def request(number: int) -> GenerateOptions:
    return GenerateOptions(
        model="deepseek-chat",
        messages=[
            Message(role="system", content="You are a helpful assistant."),
            Message(role="user", content=f"Question number {number}: tell me a long story."),
        ],
        temperature=0.7,
        max_tokens=2048,
    )


class InstantAdapter(LlmAdapter):
    """Yields prebuilt chunks without waiting: the fastest possible inner adapter."""

    def __init__(self, chunks: Sequence[StreamChunk]) -> None:
        self.chunks = chunks

    @property
    def name(self) -> str:
        return "instant"

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        for chunk in self.chunks:
            yield chunk


async def drain(stream: AsyncIterator[StreamChunk]) -> int:
    count = 0
    async for _ in stream:
        count += 1
    return count


# -- 1. instant replay ----------------------------------------------------------------------------


def bench_replay(repeat: int, count: int = 10_000) -> dict[str, float]:
    """20 streams of ``count`` chunks: a bare async generator (the limit) and steady-state instant replay, measured in
    turns."""
    chunks = text_chunks(count)
    options = request(0)
    interaction = recorded(options, chunks)
    replay = ReplayAdapter(Cassette(interactions=[interaction]), allow_repeats=True)

    async def bare() -> AsyncIterator[StreamChunk]:
        for chunk in chunks:
            yield chunk

    def twenty(stream: Callable[[], AsyncIterator[StreamChunk]]) -> Callable[[], None]:
        async def run() -> None:
            for _ in range(20):
                await drain(stream())

        return lambda: asyncio.run(run())

    medians = median_times({"bare": twenty(bare), "replay": twenty(lambda: replay.stream(options))}, repeat)
    total = 20 * len(chunks)
    return {
        "bare chunks/s": total / medians["bare"],
        "replay chunks/s": total / medians["replay"],
        "replay / bare speed": medians["bare"] / medians["replay"],
    }


def bench_fresh(repeat: int, folder: Path, count: int = INTERACTIONS, per: int = CHUNKS) -> dict[str, float]:
    """A ``count`` x ``per`` session saved as a msgpack cassette, replayed once through from the file (open, match
    each request, decode, yield) vs bare async generators yielding the same prebuilt chunks, in turns."""
    streams = [text_chunks(per, seed=number) for number in range(count)]
    requests = [request(number) for number in range(count)]
    path = folder / "fresh.msgpack"
    save_cassette(Cassette(interactions=[recorded(o, c) for o, c in zip(requests, streams, strict=True)]), path)

    async def bare_stream(chunks: list[StreamChunk]) -> AsyncIterator[StreamChunk]:
        for chunk in chunks:
            yield chunk

    async def bare() -> None:
        for chunks in streams:
            await drain(bare_stream(chunks))

    async def fresh() -> None:
        adapter = ReplayAdapter(open_cassette(path))
        for options in requests:
            await drain(adapter.stream(options))

    medians = median_times({"bare": lambda: asyncio.run(bare()), "fresh": lambda: asyncio.run(fresh())}, repeat)
    total = count * per
    return {
        "bare chunks/s": total / medians["bare"],
        "fresh chunks/s": total / medians["fresh"],
        "fresh / bare speed": medians["bare"] / medians["fresh"],
    }


# -- 2. recording overhead --------------------------------------------------------------------------


def bench_recording(repeat: int, folder: Path, streams: int = 20, per_stream: int = 5_000) -> dict[str, float]:
    chunks = text_chunks(per_stream)
    inner = InstantAdapter(chunks)
    total = per_stream * streams

    async def direct() -> None:
        for number in range(streams):
            await drain(inner.stream(request(number)))

    def record(validate: bool) -> Callable[[], None]:
        async def run() -> None:
            async with RecordingAdapter(inner, folder / "rec.msgpack", validate=validate) as recorder:
                for number in range(streams):
                    await drain(recorder.stream(request(number)))

        return lambda: asyncio.run(run())

    def limit() -> None:
        """The recording limit: each chunk msgspec-encoded twice (journal, cassette) plus a buffered append."""
        journal, cassette = msgspec.json.Encoder().encode, msgspec.msgpack.Encoder().encode
        buffer = bytearray()
        for _ in range(streams):
            for chunk in chunks:
                buffer += journal(chunk)
                cassette(chunk)

    medians = median_times(
        {
            "direct": lambda: asyncio.run(direct()),
            "record": record(True),
            "novalidate": record(False),
            "limit": limit,
        },
        repeat,
    )
    t_direct, t_record, t_record_novalidate = medians["direct"], medians["record"], medians["novalidate"]
    overhead = (t_record - t_direct) / total * 1e6
    limit_us = medians["limit"] / total * 1e6
    return {
        "direct µs/chunk": t_direct / total * 1e6,
        "recording µs/chunk (validate, journal, save)": t_record / total * 1e6,
        "overhead µs/chunk": overhead,
        "overhead µs/chunk without validation": (t_record_novalidate - t_direct) / total * 1e6,
        "limit µs/chunk (encode twice, append)": limit_us,
        "overhead / limit": overhead / limit_us,
    }


# -- 3 and 4. opening and decoding vs vcrpy ------------------------------------------------------------


def openai_chunk(chunk: StreamChunk, number: int) -> dict[str, Any] | None:
    """The OpenAI chat-completion chunk a provider would have sent for ``chunk`` (None: no SSE equivalent)."""
    base: dict[str, Any] = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion.chunk",
        "created": 1767225600,
        "model": "deepseek-chat",
        "system_fingerprint": "fp_bench",
    }
    if isinstance(chunk, TextDelta):
        return {
            **base,
            "choices": [{"index": 0, "delta": {"content": chunk.text}, "logprobs": None, "finish_reason": None}],
        }
    if isinstance(chunk, Finish):
        return {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]}
    if isinstance(chunk, UsageChunk):
        usage = chunk.usage
        return {
            **base,
            "choices": [],
            "usage": {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
            },
        }
    return None


URL = "https://api.deepseek.com/chat/completions"


class Exchange(NamedTuple):
    """One interaction of a session as each side stores it: our request and chunks, the provider's JSON request
    body and its SSE response body."""

    options: GenerateOptions
    chunks: list[StreamChunk]
    body: str
    sse: str


def session(count: int, per: int) -> Iterator[Exchange]:
    """``count`` chat-completion streams of ``per`` chunks each, the same content whichever side stores them."""
    for number in range(count):
        options = request(number)
        chunks = text_chunks(per, seed=number)
        body = {
            "model": options.model,
            "messages": [{"role": m.role, "content": m.content} for m in options.messages],
            "temperature": options.temperature,
            "max_tokens": options.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        lines = [openai_chunk(chunk, number) for chunk in chunks]
        sse = "".join(f"data: {json.dumps(line)}\n\n" for line in lines if line is not None) + "data: [DONE]\n\n"
        yield Exchange(options, chunks, json.dumps(body), sse)


def cassetter_write(path: Path, count: int, per: int) -> None:
    """Run in a process with cassetter (``_peers.env``): the session recorded and saved by cassetter itself."""
    peer: Any = importlib.import_module("cassetter")  # installed at bench time: no stubs for mypy
    cassette = peer.Cassette(path, record_mode=peer.RecordMode.ALL)
    cassette.load()
    for number, exchange in enumerate(session(count, per)):
        headers = {"content-type": ["text/event-stream"], "x-request-id": [f"req-{number}"]}
        request_headers = {"content-type": ["application/json"]}
        cassette.record("POST", URL, request_headers, exchange.body.encode(), 200, headers, exchange.sse.encode())
    cassette.save()


def build_files(
    folder: Path, count: int = INTERACTIONS, per: int = CHUNKS, *, vcrpy: bool = True, cassetter: bool = False
) -> tuple[Cassette, dict[str, Path]]:
    """The same session as a chunk cassette (msgpack, json), a vcrpy YAML cassette of OpenAI SSE bodies and (with
    ``cassetter``) a cassetter cassette of the same bodies, written by cassetter in a process of its own."""
    import vcr.serializers.yamlserializer as yamlserializer
    from vcr.persisters.filesystem import FilesystemPersister
    from vcr.request import Request

    stem = f"s{count}x{per}"
    paths = {"msgpack": folder / f"{stem}.msgpack", "json": folder / f"{stem}.json"}
    interactions = []
    vcr_requests, vcr_responses = [], []
    for number, exchange in enumerate(session(count, per)):
        interactions.append(recorded(exchange.options, exchange.chunks, step_ns=1_000_000, start_ns=1_000_000))
        vcr_requests.append(Request("POST", URL, exchange.body, {"content-type": "application/json"}))
        headers = {"content-type": ["text/event-stream"], "x-request-id": [f"req-{number}"]}
        body = {"string": exchange.sse}
        vcr_responses.append({"status": {"code": 200, "message": "OK"}, "headers": headers, "body": body})
    cassette = Cassette(meta=CassetteMeta(adapter="bench"), interactions=interactions)
    save_cassette(cassette, paths["msgpack"])
    save_cassette(cassette, paths["json"])
    if vcrpy:
        paths["vcrpy"] = folder / f"{stem}.yaml"
        FilesystemPersister.save_cassette(
            paths["vcrpy"], {"requests": vcr_requests, "responses": vcr_responses}, yamlserializer
        )
    if cassetter:
        paths["cassetter"] = folder / f"{stem}-cassetter.yaml"
        command = [sys.executable, __file__, "--cassetter-write", str(paths["cassetter"]), str(count), str(per)]
        subprocess.run(command, check=True, env=_peers.env(_peers.CASSETTER), capture_output=True)
    return cassette, paths


def vcr_load(path: Path) -> tuple[list[Any], list[Any]]:
    import vcr.serializers.yamlserializer as yamlserializer
    from vcr.persisters.filesystem import FilesystemPersister

    loaded = FilesystemPersister.load_cassette(path, serializer=yamlserializer)
    return loaded[0], loaded[1]


def sse_decode(bodies: Iterable[str | bytes]) -> int:
    """The SSE parse a peer's loader is given on top: split each body and ``json.loads`` every data line."""
    count = 0
    for body in bodies:
        text = body.decode() if isinstance(body, bytes) else body
        for event in text.split("\n\n"):
            if event.startswith("data: ") and event != "data: [DONE]":
                json.loads(event[6:])
                count += 1
    return count


def vcr_decode(path: Path) -> int:
    """vcrpy load, then the SSE parse."""
    _, responses = vcr_load(path)
    return sse_decode(response["body"]["string"] for response in responses)


def cassetter_load(path: Path) -> Any:
    """cassetter's loader, replay only, through its public API (in a process with ``_peers.env(CASSETTER)``)."""
    cassetter: Any = importlib.import_module("cassetter")
    loaded = cassetter.Cassette(path, record_mode=cassetter.RecordMode.NONE)
    loaded.load()
    return loaded


def cassetter_decode(path: Path) -> int:
    """cassetter load, then the same SSE parse."""
    return sse_decode(interaction.response.body.content for interaction in cassetter_load(path).interactions)


def ours_decode(path: Path) -> int:
    return sum(len(interaction.events) for interaction in load_cassette(path).interactions)


def open_child(what: str, kind: str, path: str, repeat: int) -> None:
    """Run in a fresh process: ``repeat`` times, open ``path`` (vcrpy, cassetter: their load; ours: open and match
    the first request) or, with ``what`` "decode", decode all of it into chunks (the peers: load + SSE parse);
    print every run's seconds as JSON, the first (cold) one first, and the chunks decoded."""
    first = RecordedRequest.from_options(request(0))
    if kind == "cassetter":
        importlib.import_module("cassetter")  # imported before the clock starts, as chunktape and vcrpy are
    else:
        import vcr.persisters.filesystem  # noqa: F401
    decoders: dict[str, Callable[[Path], int]] = {
        "vcrpy": vcr_decode,
        "cassetter": cassetter_decode,
        "msgpack": ours_decode,
        "json": ours_decode,
    }
    times, count = [], 0
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        if what == "decode":
            count = decoders[kind](Path(path))
        elif kind == "vcrpy":
            vcr_load(Path(path))
        elif kind == "cassetter":
            cassetter_load(Path(path))
        else:
            ReplayAdapter(open_cassette(path)).select(first)
        times.append(time.perf_counter() - start)
    print(json.dumps({"times": times, "chunks": count}))


def child_times(
    what: str, paths: dict[str, Path], repeat: int, rounds: int
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Per side, the seconds of every open (or decode), measured in fresh processes, the sides taking turns; and
    the chunks each side decoded.

    A fresh process per side keeps one side's allocations from slowing the other: after vcrpy frees its
    28 MB buffers, glibc serves the next large read from new pages, and on this VM faulting in 18 MB of new
    pages costs ~10 ms, which would be charged to whichever JSON open came next. Each peer's process has that
    peer alone on its path (``_peers.env``); ours has none.
    """
    times: dict[str, list[float]] = {key: [] for key in ("vcrpy", "msgpack", "json", "cassetter") if key in paths}
    chunks: dict[str, int] = {}
    for _ in range(rounds):
        for key in times:
            done = subprocess.run(
                [sys.executable, __file__, "--open-child", what, key, str(paths[key]), str(repeat)],
                capture_output=True,
                check=True,
                text=True,
                env=_peers.env(_peers.CASSETTER if key == "cassetter" else None),
            )
            figures = json.loads(done.stdout)
            times[key] += figures["times"]
            chunks[key] = figures["chunks"]
    return times, chunks


def bench_files(
    repeat: int,
    folder: Path,
    count: int = INTERACTIONS,
    per: int = CHUNKS,
    rounds: int = 3,
    *,
    vcrpy: bool = True,
    cassetter: bool = False,
) -> dict[str, float]:
    """Open and decode figures of ours vs vcrpy (with ``vcrpy``) and cassetter (with ``cassetter``, installed)."""
    _, paths = build_files(folder, count, per, vcrpy=vcrpy, cassetter=cassetter)
    runs, _ = child_times("open", paths, repeat, rounds)
    cold = {key: statistics.median(values[::repeat]) for key, values in runs.items()}
    opens = {key: statistics.median(values) for key, values in runs.items()}
    decode_runs, decoded = child_times("decode", paths, max(1, (repeat + 1) // 2), rounds)
    decodes = {key: statistics.median(values) for key, values in decode_runs.items()}
    figures: dict[str, float] = {}
    for key in paths:
        figures[f"{key} open ms"] = opens[key] * 1e3
        figures[f"{key} first open ms"] = cold[key] * 1e3
        figures[f"{key} decode chunks/s"] = decoded[key] / decodes[key]
        figures[f"size MB {key}"] = paths[key].stat().st_size / 1e6
    for peer in ("vcrpy", "cassetter"):
        if peer not in paths:
            continue
        for key in ("msgpack", "json"):
            figures[f"{key} open speedup vs {peer}"] = opens[peer] / opens[key]
            figures[f"{key} decode speedup vs {peer}"] = (
                figures[f"{key} decode chunks/s"] / figures[f"{peer} decode chunks/s"]
            )
    return figures


def file_rows(
    files: dict[str, float], peer: str, shape: str, targets: tuple[float, float], missing: str | None, note: str = ""
) -> list[Row]:
    """Open and decode of ours (msgpack, json) vs ``peer`` on one session ``shape``; ``targets``: open, decode;
    ``note`` ends each detail (what ``--quick`` measured instead)."""
    rows = []
    label = "vcrpy YAML" if peer == "vcrpy" else "cassetter YAML"
    for key in ("msgpack", "json"):
        open_name = f"open-to-first-match, {key} vs {label} ({shape})"
        decode_name = f"full decode to chunks, {key} vs {peer} + SSE + json.loads ({shape})"
        open_target, decode_target = f">= {targets[0]:g}x", f">= {targets[1]:g}x"
        if missing is not None:
            rows.append(Row(open_name, "peer unavailable", open_target, None, missing + note))
            rows.append(Row(decode_name, "peer unavailable", decode_target, None, missing + note))
            continue
        speedup = files[f"{key} open speedup vs {peer}"]
        rows.append(
            Row(
                open_name,
                _x(speedup),
                open_target,
                speedup >= targets[0],
                f"{files[f'{key} open ms']:.2f} ms vs {files[f'{peer} open ms']:.1f} ms "
                f"({files[f'size MB {key}']:.1f} MB vs {files[f'size MB {peer}']:.1f} MB); first open in a "
                f"fresh process {files[f'{key} first open ms']:.1f} ms vs {files[f'{peer} first open ms']:.1f} ms"
                + note,
            )
        )
        speedup = files[f"{key} decode speedup vs {peer}"]
        rows.append(
            Row(
                decode_name,
                _x(speedup),
                decode_target,
                speedup >= targets[1],
                f"{files[f'{key} decode chunks/s'] / 1e6:.2f} M chunks/s vs "
                f"{files[f'{peer} decode chunks/s'] / 1e6:.2f} M{note}",
            )
        )
    return rows


# -- 5. recorded-timing accuracy ------------------------------------------------------------------------


def bench_timing(gaps: int = 200, runs: int = 3, busy: bool = False) -> dict[str, float]:
    """Per-gap error of a ``Timing.recorded()`` replay in real time; with ``busy``, while another process keeps one
    of the cores busy (a CPU-bound loop), as a test run beside a build or another suite would be."""
    gap_ns = 5_000_000
    chunks = text_chunks(gaps + 4)
    interaction = recorded(request(0), chunks, step_ns=gap_ns, start_ns=gap_ns)
    replay = ReplayAdapter(Cassette(interactions=[interaction]), timing=Timing.recorded(), allow_repeats=True)

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        return [loop.time() - start async for _ in replay.stream(request(0))]

    medians: list[float] = []
    p99s: list[float] = []
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        if spinner is not None:
            time.sleep(0.2)  # it is spinning before the first gap
        for _ in range(runs):
            arrivals = asyncio.run(run())
            errors = sorted(abs(arrivals[n] - (n + 1) * gap_ns / 1e9) * 1e3 for n in range(len(arrivals)))
            medians.append(statistics.median(errors))
            p99s.append(errors[min(len(errors) - 1, int(len(errors) * 0.99))])
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    return {
        "median per-chunk error ms": statistics.median(medians),
        "p99 per-chunk error ms": statistics.median(p99s),
    }


# -- 6. a 1,000,000-chunk cassette, peak memory ---------------------------------------------------------


class CountingAdapter(LlmAdapter):
    """Makes each chunk as it streams, so the adapter itself holds no memory."""

    def __init__(self, count: int) -> None:
        self.count = count

    @property
    def name(self) -> str:
        return "counting"

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        yield BlockStart(index=0, block_type="text")
        pieces = [f"w{n % 9973} " for n in range(self.count - 4)]
        for piece in pieces:
            yield TextDelta(index=0, text=piece)
        yield BlockEnd(index=0, block=TextBlock(text="".join(pieces)))
        yield UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=len(pieces)))
        yield Finish(reason=FinishReason(kind="stop"))


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def memory_child(folder: str, total: int) -> None:
    """Run in a fresh process: record, save, load and replay ``total`` chunks; print the figures as JSON."""
    path = Path(folder) / "million.msgpack"
    streams, per_stream = 10, total // 10
    gc.collect()
    baseline = _rss_mb()

    async def record() -> None:
        async with RecordingAdapter(CountingAdapter(per_stream), path) as recorder:
            for number in range(streams):
                await drain(recorder.stream(request(number)))

    asyncio.run(record())
    gc.collect()
    before_load = _rss_mb()
    cassette = load_cassette(path)
    gc.collect()
    decoded = _rss_mb() - before_load

    async def replay() -> int:
        adapter = ReplayAdapter(cassette)
        return sum([await drain(adapter.stream(request(number))) for number in range(streams)])

    replayed = asyncio.run(replay())
    print(json.dumps({"chunks": replayed, "decoded": decoded, "peak": _peak_mb() - baseline}))


def bench_memory(total: int = 1_000_000) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, __file__, "--memory-child", folder, str(total)], capture_output=True, check=True, text=True
        )
    figures = json.loads(done.stdout)
    return {
        "chunks recorded, saved, loaded, replayed": figures["chunks"],
        "decoded cassette MB": figures["decoded"],
        "peak memory over baseline MB": figures["peak"],
        "peak / decoded": figures["peak"] / figures["decoded"],
    }


def _x(value: float) -> str:
    return f"{value:,.1f}x" if value < 1000 else f"{value:,.0f}x"


SHORT_STREAMS = 1_000
SHORT_CHUNKS = 24
"""The second session of the cassetter rows: 1,000 short chat-completion streams (20 text pieces each)."""


def main(quick: bool = False) -> list[Row]:
    """Measure everything in this file (one run, side by side) and return the rows of the table."""
    size = QUICK if quick else FULL
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        replay = bench_replay(size.repeat, size.replay_chunks)
        ratio = replay["replay / bare speed"]
        rows.append(
            Row(
                "instant replay speed / bare async generator",
                f"{ratio:.2f}",
                ">= 0.33",
                ratio >= 1 / 3,
                f"20 x {size.replay_chunks:,} chunks: bare {replay['bare chunks/s'] / 1e6:.1f} M chunks/s, replay "
                f"{replay['replay chunks/s'] / 1e6:.1f} M",
            )
        )
        fresh = bench_fresh(size.repeat, folder, size.interactions, size.chunks)
        ratio = fresh["fresh / bare speed"]
        rows.append(
            Row(
                f"fresh cassette replayed once (open, match, decode, yield; {size.interactions} x {size.chunks}) / "
                "bare async generator",
                f"{ratio:.2f}",
                ">= 0.5",
                ratio >= 1 / 2,
                f"msgpack: bare {fresh['bare chunks/s'] / 1e6:.1f} M chunks/s, fresh replay "
                f"{fresh['fresh chunks/s'] / 1e6:.1f} M",
            )
        )
        recording = bench_recording(size.repeat, folder, size.record_streams, size.record_chunks)
        times = recording["overhead / limit"]
        rows.append(
            Row(
                "recording overhead per chunk / limit (encode twice + append)",
                f"{times:.2f}x",
                "<= 3x",
                times <= 3,
                f"overhead {recording['overhead µs/chunk']:.2f} µs/chunk (without validation "
                f"{recording['overhead µs/chunk without validation']:.2f} µs), limit "
                f"{recording['limit µs/chunk (encode twice, append)']:.2f} µs, direct "
                f"{recording['direct µs/chunk']:.2f} µs",
            )
        )
        missing = _peers.ensure(_peers.CASSETTER, install=not quick)
        # The rows keep the full run's names; --quick says what it measured instead.
        note = f"; --quick: {size.interactions} x {size.chunks}" if quick else ""
        shape = f"{INTERACTIONS} x {CHUNKS}"
        files = bench_files(
            size.repeat, folder, size.interactions, size.chunks, size.open_rounds, cassetter=missing is None
        )
        rows += file_rows(files, "vcrpy", shape, (50, 5), None, note)
        rows += file_rows(files, "cassetter", shape, (30, 8), missing, note)
        streams = SHORT_STREAMS if not quick else 50
        note = f"; --quick: {streams} x {SHORT_CHUNKS}" if quick else ""
        short = bench_files(
            size.repeat, folder, streams, SHORT_CHUNKS, size.open_rounds, vcrpy=False, cassetter=missing is None
        )
        rows += file_rows(short, "cassetter", f"{SHORT_STREAMS:,} x {SHORT_CHUNKS}", (30, 8), missing, note)
    for busy in (False, True):
        timing = bench_timing(size.timing_gaps, size.timing_runs, busy)
        where = "one busy CPU-bound process beside it" if busy else "idle"
        gaps = f"{size.timing_gaps} gaps of 5 ms in real time; median of {size.timing_runs} runs"
        median, p99 = timing["median per-chunk error ms"], timing["p99 per-chunk error ms"]
        name = f"recorded-timing replay, {where}"
        rows.append(Row(f"{name}: median error per gap", f"{median:.3f} ms", "< 1 ms", median < 1, gaps))
        rows.append(Row(f"{name}: p99 error per gap", f"{p99:.3f} ms", "< 5 ms", p99 < 5, gaps))
    memory = bench_memory(size.million)
    ratio = memory["peak / decoded"]
    rows.append(
        Row(
            f"{size.million:,}-chunk session: peak RSS / decoded size",
            f"{ratio:.2f}x",
            "< 4x",
            ratio < 4,
            f"record, save, load, replay in a fresh process: peak {memory['peak memory over baseline MB']:.0f} MB "
            f"over baseline, decoded cassette {memory['decoded cassette MB']:.0f} MB",
        )
    )
    return rows


def print_table(rows: Sequence[Row]) -> None:
    """The table ``make bench`` prints: figure, measured, target, verdict; details underneath each row."""
    name_width = max(len(row.name) for row in rows)
    value_width = max(len(row.value) for row in rows)
    target_width = max(len(row.target) for row in rows)
    header = f"{'figure':<{name_width}}  {'measured':>{value_width}}  {'target':<{target_width}}  verdict"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row.name:<{name_width}}  {row.value:>{value_width}}  {row.target:<{target_width}}  {row.verdict}")
        if row.detail:
            print(f"    {row.detail}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--memory-child"]:
        memory_child(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["--open-child"]:
        open_child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    elif sys.argv[1:2] == ["--cassetter-write"]:
        cassetter_write(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        print_table(main(quick="--quick" in sys.argv))
