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
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def pip_peer(package: str, module: str, folder: Path, install: bool = True) -> str | None:
    """Puts a peer library installed at bench time in ``folder`` on ``sys.path``, pip-installing it there first if
    ``install`` (no dependencies: they are ours already); returns why it is unavailable, or None. ``folder`` is under
    ``benchmarks/.work`` (ignored by git), never the virtualenv, where a peer's pytest plugin would load into the
    suite."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    if importlib.util.find_spec(module) is not None:
        return None
    if not install:
        return f"{package} not installed in {folder} (--quick installs nothing)"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(folder), package],
        capture_output=True,
        text=True,
        timeout=600,
    )
    importlib.invalidate_caches()
    if done.returncode != 0 or importlib.util.find_spec(module) is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"pip install {package} failed: {last}"
    return None


CASSETTER = "cassetter"
CASSETTER_DIR = Path(__file__).parent / ".work" / CASSETTER
"""Where cassetter, the peer of the cassette and SDK rows, is installed at bench time (``pip --target``)."""


def install_cassetter(install: bool = True) -> str | None:
    """Installs cassetter into ``CASSETTER_DIR`` once (``install=False``: only finds it there) and puts it on
    ``sys.path``; returns why it is unavailable, or None."""
    return pip_peer(CASSETTER, CASSETTER, CASSETTER_DIR, install)


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


def bench_replay(repeat: int, folder: Path, count: int = 10_000) -> dict[str, float]:
    """20 streams of ``count`` chunks: a bare async generator (the limit), steady-state instant replay, and a fresh
    cassette file replayed once through (open, match, decode, yield), the three measured in turns."""
    chunks = text_chunks(count)
    options = request(0)
    interaction = recorded(options, chunks)
    replay = ReplayAdapter(Cassette(interactions=[interaction]), allow_repeats=True)
    path = folder / "fresh.msgpack"
    save_cassette(Cassette(interactions=[interaction]), path)

    async def bare() -> AsyncIterator[StreamChunk]:
        for chunk in chunks:
            yield chunk

    def twenty(stream: Callable[[], AsyncIterator[StreamChunk]]) -> Callable[[], None]:
        async def run() -> None:
            for _ in range(20):
                await drain(stream())

        return lambda: asyncio.run(run())

    medians = median_times(
        {
            "bare": twenty(bare),
            "replay": twenty(lambda: replay.stream(options)),
            "fresh": twenty(lambda: ReplayAdapter(open_cassette(path)).stream(options)),
        },
        repeat,
    )
    total = 20 * len(chunks)
    return {
        "bare chunks/s": total / medians["bare"],
        "replay chunks/s": total / medians["replay"],
        "replay / bare speed": medians["bare"] / medians["replay"],
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


def build_files(
    folder: Path, count: int = INTERACTIONS, per: int = CHUNKS, cassetter: bool = False
) -> tuple[Cassette, dict[str, Path]]:
    """The same session as a chunk cassette (msgpack, json), a vcrpy YAML cassette of OpenAI SSE bodies and (with
    ``cassetter``, importable) a cassetter cassette of the same bodies."""
    import vcr.serializers.yamlserializer as yamlserializer
    from vcr.persisters.filesystem import FilesystemPersister
    from vcr.request import Request

    interactions = []
    vcr_requests, vcr_responses = [], []
    paths = {"msgpack": folder / "big.msgpack", "json": folder / "big.json", "vcrpy": folder / "big.yaml"}
    peer = None
    if cassetter:
        peer_module: Any = importlib.import_module("cassetter")  # installed at bench time: no stubs for mypy
        paths["cassetter"] = folder / "big-cassetter.yaml"
        peer = peer_module.Cassette(paths["cassetter"], record_mode=peer_module.RecordMode.ALL)
        peer.load()
    for number in range(count):
        options = request(number)
        chunks = text_chunks(per, seed=number)
        interactions.append(recorded(options, chunks, step_ns=1_000_000, start_ns=1_000_000))
        body = {
            "model": options.model,
            "messages": [{"role": m.role, "content": m.content} for m in options.messages],
            "temperature": options.temperature,
            "max_tokens": options.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        vcr_requests.append(Request("POST", URL, json.dumps(body), {"content-type": "application/json"}))
        lines = [openai_chunk(chunk, number) for chunk in chunks]
        sse = "".join(f"data: {json.dumps(line)}\n\n" for line in lines if line is not None) + "data: [DONE]\n\n"
        headers = {"content-type": ["text/event-stream"], "x-request-id": [f"req-{number}"]}
        vcr_responses.append({"status": {"code": 200, "message": "OK"}, "headers": headers, "body": {"string": sse}})
        if peer is not None:
            request_headers = {"content-type": ["application/json"]}
            peer.record("POST", URL, request_headers, json.dumps(body).encode(), 200, headers, sse.encode())
    cassette = Cassette(meta=CassetteMeta(adapter="bench"), interactions=interactions)
    if peer is not None:
        peer.save()
    save_cassette(cassette, paths["msgpack"])
    save_cassette(cassette, paths["json"])
    FilesystemPersister.save_cassette(
        paths["vcrpy"], {"requests": vcr_requests, "responses": vcr_responses}, yamlserializer
    )
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
    """cassetter's loader, replay only (the module comes from ``install_cassetter``)."""
    cassetter: Any = importlib.import_module("cassetter")
    loaded = cassetter.Cassette(path, record_mode=cassetter.RecordMode.NONE)
    loaded.load()
    return loaded


def cassetter_decode(path: Path) -> int:
    """cassetter load, then the same SSE parse."""
    return sse_decode(interaction.response.body.content for interaction in cassetter_load(path).interactions)


def open_child(kind: str, path: str, repeat: int) -> None:
    """Run in a fresh process: open ``path`` ``repeat`` times (vcrpy: load; ours: open and match the first
    request); print every run's seconds as JSON, the first (cold) one first."""
    first = RecordedRequest.from_options(request(0))
    if kind == "cassetter":
        importlib.import_module("cassetter")  # imported before the clock starts, as chunktape and vcrpy are
    else:
        import vcr.persisters.filesystem  # noqa: F401
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        if kind == "vcrpy":
            vcr_load(Path(path))
        elif kind == "cassetter":
            cassetter_load(Path(path))
        else:
            ReplayAdapter(open_cassette(path)).select(first)
        times.append(time.perf_counter() - start)
    print(json.dumps(times))


def open_times(
    paths: dict[str, Path], repeat: int, rounds: int, peer_dir: Path | None = None
) -> dict[str, list[float]]:
    """Per side, the seconds of every open, measured in fresh processes, the sides taking turns.

    A fresh process per side keeps one side's allocations from slowing the other: after vcrpy frees its
    28 MB buffers, glibc serves the next large read from new pages, and on this VM faulting in 18 MB of new
    pages costs ~10 ms, which would be charged to whichever JSON open came next.
    """
    times: dict[str, list[float]] = {key: [] for key in ("vcrpy", "msgpack", "json", "cassetter") if key in paths}
    for _ in range(rounds):
        for key in times:
            env = dict(os.environ)
            if key == "cassetter" and peer_dir is not None:
                env["PYTHONPATH"] = str(peer_dir)  # where ``install_cassetter`` put it
            done = subprocess.run(
                [sys.executable, __file__, "--open-child", key, str(paths[key]), str(repeat)],
                capture_output=True,
                check=True,
                text=True,
                env=env,
            )
            times[key] += json.loads(done.stdout)
    return times


def bench_files(
    repeat: int,
    folder: Path,
    count: int = INTERACTIONS,
    per: int = CHUNKS,
    rounds: int = 3,
    peer_dir: Path | None = None,
) -> dict[str, float]:
    """Open and decode figures vs vcrpy and (given where cassetter is installed, on ``sys.path``) cassetter."""
    cassetter = peer_dir is not None
    _, paths = build_files(folder, count, per, cassetter)
    runs = open_times(paths, repeat, rounds, peer_dir)
    cold = {key: statistics.median(values[::repeat]) for key, values in runs.items()}
    opens = {key: statistics.median(values) for key, values in runs.items()}
    decoders: dict[str, Callable[[], object]] = {
        "vcrpy": lambda: vcr_decode(paths["vcrpy"]),
        "msgpack": lambda: load_cassette(paths["msgpack"]),
        "json": lambda: load_cassette(paths["json"]),
    }
    if cassetter:
        decoders["cassetter"] = lambda: cassetter_decode(paths["cassetter"])
    decodes = median_times(decoders, max(1, (repeat + 1) // 2))
    t_vcr_open, t_vcr_decode = opens["vcrpy"], decodes["vcrpy"]
    lines = vcr_decode(paths["vcrpy"])
    total_chunks = count * per
    figures: dict[str, float] = {
        "vcrpy open s": t_vcr_open,
        "vcrpy first open s": cold["vcrpy"],
        "vcrpy decode chunks/s": lines / t_vcr_decode,
    }
    sizes = [paths[key].stat().st_size / 1e6 for key in ("msgpack", "json", "vcrpy")]
    for key in ("msgpack", "json"):
        t_open, t_decode = opens[key], decodes[key]
        figures[f"{key} open-to-first-match ms"] = t_open * 1e3
        figures[f"{key} first open ms"] = cold[key] * 1e3
        figures[f"{key} open speedup vs vcrpy"] = t_vcr_open / t_open
        figures[f"{key} decode chunks/s"] = total_chunks / t_decode
        figures[f"{key} decode speedup vs vcrpy"] = (total_chunks / t_decode) / (lines / t_vcr_decode)
    figures["size MB msgpack"], figures["size MB json"], figures["size MB vcrpy yaml"] = sizes
    if cassetter:
        peer_lines = cassetter_decode(paths["cassetter"])
        figures["cassetter open s"], figures["cassetter first open s"] = opens["cassetter"], cold["cassetter"]
        figures["cassetter decode chunks/s"] = peer_lines / decodes["cassetter"]
        figures["size MB cassetter yaml"] = paths["cassetter"].stat().st_size / 1e6
        for key in ("msgpack", "json"):
            figures[f"{key} open speedup vs cassetter"] = opens["cassetter"] / opens[key]
            figures[f"{key} decode speedup vs cassetter"] = figures[f"{key} decode chunks/s"] / (
                peer_lines / decodes["cassetter"]
            )
    return figures


# -- 5. recorded-timing accuracy ------------------------------------------------------------------------


def bench_timing(gaps: int = 200, runs: int = 3) -> dict[str, float]:
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
    for _ in range(runs):
        arrivals = asyncio.run(run())
        errors = sorted(abs(arrivals[n] - (n + 1) * gap_ns / 1e9) * 1e3 for n in range(len(arrivals)))
        medians.append(statistics.median(errors))
        p99s.append(errors[min(len(errors) - 1, int(len(errors) * 0.99))])
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


def cassetter_rows(files: dict[str, float], shape: str, missing: str | None) -> list[Row]:
    """Open and decode vs cassetter (targets: open at least 3x, decode at least 1x its load + the SSE parse)."""
    rows = []
    for key in ("msgpack", "json"):
        open_name = f"open-to-first-match, {key} vs cassetter YAML ({shape})"
        decode_name = f"full decode to chunks, {key} vs cassetter + SSE + json.loads"
        if missing is not None:
            rows.append(Row(open_name, "peer unavailable", ">= 3x", None, missing))
            rows.append(Row(decode_name, "peer unavailable", ">= 1x", None, missing))
            continue
        speedup = files[f"{key} open speedup vs cassetter"]
        rows.append(
            Row(
                open_name,
                _x(speedup),
                ">= 3x",
                speedup >= 3,
                f"{files[f'{key} open-to-first-match ms']:.2f} ms vs {files['cassetter open s'] * 1e3:.1f} ms "
                f"({files[f'size MB {key}']:.1f} MB vs {files['size MB cassetter yaml']:.1f} MB); first open in a "
                f"fresh process {files[f'{key} first open ms']:.1f} ms "
                f"vs {files['cassetter first open s'] * 1e3:.1f} ms",
            )
        )
        speedup = files[f"{key} decode speedup vs cassetter"]
        rows.append(
            Row(
                decode_name,
                _x(speedup),
                ">= 1x",
                speedup >= 1,
                f"{files[f'{key} decode chunks/s'] / 1e6:.2f} M chunks/s vs "
                f"{files['cassetter decode chunks/s'] / 1e6:.2f} M",
            )
        )
    return rows


def _x(value: float) -> str:
    return f"{value:,.1f}x" if value < 1000 else f"{value:,.0f}x"


def main(quick: bool = False) -> list[Row]:
    """Measure everything in this file (one run, side by side) and return the rows of the table."""
    size = QUICK if quick else FULL
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        replay = bench_replay(size.repeat, folder, size.replay_chunks)
        ratio = replay["replay / bare speed"]
        rows.append(
            Row(
                "instant replay speed / bare async generator",
                f"{ratio:.2f}",
                ">= 0.33",
                ratio >= 1 / 3,
                f"bare {replay['bare chunks/s'] / 1e6:.1f} M chunks/s, replay {replay['replay chunks/s'] / 1e6:.1f} M",
            )
        )
        ratio = replay["fresh / bare speed"]
        rows.append(
            Row(
                "fresh cassette replayed once (open, match, decode, yield) / bare async generator",
                f"{ratio:.2f}",
                ">= 0.5",
                ratio >= 1 / 2,
                f"msgpack, 20 x {size.replay_chunks:,} chunks: bare {replay['bare chunks/s'] / 1e6:.1f} M chunks/s, "
                f"fresh replay {replay['fresh chunks/s'] / 1e6:.1f} M",
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
        peer_missing = install_cassetter(install=not quick)
        peer_dir = CASSETTER_DIR if peer_missing is None else None
        files = bench_files(size.repeat, folder, size.interactions, size.chunks, size.open_rounds, peer_dir)
        shape = f"{size.interactions} x {size.chunks}"
        for key in ("msgpack", "json"):
            speedup = files[f"{key} open speedup vs vcrpy"]
            rows.append(
                Row(
                    f"open-to-first-match, {key} vs vcrpy YAML ({shape})",
                    _x(speedup),
                    ">= 50x",
                    speedup >= 50,
                    f"{files[f'{key} open-to-first-match ms']:.2f} ms vs {files['vcrpy open s'] * 1e3:.0f} ms "
                    f"({files[f'size MB {key}']:.1f} MB vs {files['size MB vcrpy yaml']:.1f} MB); first open in a "
                    f"fresh process {files[f'{key} first open ms']:.1f} ms "
                    f"vs {files['vcrpy first open s'] * 1e3:.0f} ms",
                )
            )
        for key in ("msgpack", "json"):
            speedup = files[f"{key} decode speedup vs vcrpy"]
            rows.append(
                Row(
                    f"full decode to chunks, {key} vs vcrpy + SSE + json.loads",
                    _x(speedup),
                    ">= 5x",
                    speedup >= 5,
                    f"{files[f'{key} decode chunks/s'] / 1e6:.2f} M chunks/s vs "
                    f"{files['vcrpy decode chunks/s'] / 1e6:.2f} M",
                )
            )
        rows += cassetter_rows(files, shape, peer_missing)
    timing = bench_timing(size.timing_gaps, size.timing_runs)
    gaps = f"{size.timing_gaps} gaps of 5 ms in real time; median of {size.timing_runs} runs"
    median, p99 = timing["median per-chunk error ms"], timing["p99 per-chunk error ms"]
    rows.append(Row("recorded-timing replay: median error per gap", f"{median:.3f} ms", "< 1 ms", median < 1, gaps))
    rows.append(Row("recorded-timing replay: p99 error per gap", f"{p99:.3f} ms", "< 5 ms", p99 < 5, gaps))
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
        open_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        print_table(main(quick="--quick" in sys.argv))
