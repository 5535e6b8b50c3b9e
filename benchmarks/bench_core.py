"""Core figures (DESIGN §13), measured side by side in one run and printed as ratios.

- instant replay vs a bare async generator yielding the same prebuilt chunks;
- recording overhead per chunk over consuming the inner adapter directly (journal and final save included);
- opening a 200 x 500 cassette until the first request is matched, vs vcrpy's ``FilesystemPersister`` on the
  same stream content stored as SSE bodies in its YAML cassette;
- decoding every chunk vs vcrpy load + SSE split + ``json.loads`` per data line;
- recorded-timing replay: per-gap error in real time.

Medians over repeated runs; nothing here is asserted (timing never belongs in tests).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

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


def median_time(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def text_chunks(count: int, seed: int = 0) -> list[StreamChunk]:
    """A valid text stream of exactly ``count`` chunks (block-start, deltas, block-end, usage, finish)."""
    pieces = [f"word{(seed * 31 + n) % 997} " for n in range(count - 4)]
    return [
        BlockStart(index=0, block_type="text"),
        *(TextDelta(index=0, text=piece) for piece in pieces),
        BlockEnd(index=0, block=TextBlock(text="".join(pieces))),
        UsageChunk(usage=TokenUsage(input_tokens=100, output_tokens=len(pieces))),
        Finish(reason=FinishReason(kind="stop")),
    ]


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

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        for chunk in self.chunks:
            yield chunk


async def drain(stream: AsyncIterator[StreamChunk]) -> int:
    count = 0
    async for _ in stream:
        count += 1
    return count


# -- 1. instant replay ----------------------------------------------------------------------------


def bench_replay(repeat: int) -> dict[str, float]:
    chunks = text_chunks(10_000)
    options = request(0)
    interaction = Interaction(
        request=RecordedRequest.from_options(options),
        events=[Event(t_ns=n, chunk=chunk) for n, chunk in enumerate(chunks)],
        outcome=Completed(t_ns=len(chunks)),
    )
    replay = ReplayAdapter(Cassette(interactions=[interaction]), allow_repeats=True)

    async def bare() -> AsyncIterator[StreamChunk]:
        for chunk in chunks:
            yield chunk

    async def run_bare() -> None:
        for _ in range(20):
            await drain(bare())

    async def run_replay() -> None:
        for _ in range(20):
            await drain(replay.stream(options))

    total = 20 * len(chunks)
    t_bare = median_time(lambda: asyncio.run(run_bare()), repeat)
    t_replay = median_time(lambda: asyncio.run(run_replay()), repeat)
    return {
        "bare chunks/s": total / t_bare,
        "replay chunks/s": total / t_replay,
        "replay / bare speed": t_bare / t_replay,
    }


# -- 2. recording overhead --------------------------------------------------------------------------


def bench_recording(repeat: int, folder: Path) -> dict[str, float]:
    per_stream = 5_000
    streams = 20
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

    t_direct = median_time(lambda: asyncio.run(direct()), repeat)
    t_record = median_time(record(True), repeat)
    t_record_novalidate = median_time(record(False), repeat)
    return {
        "direct µs/chunk": t_direct / total * 1e6,
        "recording µs/chunk (validate, journal, save)": t_record / total * 1e6,
        "overhead µs/chunk": (t_record - t_direct) / total * 1e6,
        "overhead µs/chunk without validation": (t_record_novalidate - t_direct) / total * 1e6,
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


def build_files(folder: Path) -> tuple[Cassette, dict[str, Path]]:
    import vcr.serializers.yamlserializer as yamlserializer
    from vcr.persisters.filesystem import FilesystemPersister
    from vcr.request import Request

    interactions = []
    vcr_requests, vcr_responses = [], []
    for number in range(INTERACTIONS):
        options = request(number)
        chunks = text_chunks(CHUNKS, seed=number)
        interactions.append(
            Interaction(
                request=RecordedRequest.from_options(options),
                events=[Event(t_ns=1_000_000 * (n + 1), chunk=chunk) for n, chunk in enumerate(chunks)],
                outcome=Completed(t_ns=1_000_000 * (len(chunks) + 1)),
            )
        )
        body = {
            "model": options.model,
            "messages": [{"role": m.role, "content": m.content} for m in options.messages],
            "temperature": options.temperature,
            "max_tokens": options.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        vcr_requests.append(
            Request(
                "POST",
                "https://api.deepseek.com/chat/completions",
                json.dumps(body),
                {"content-type": "application/json"},
            )
        )
        lines = [openai_chunk(chunk, number) for chunk in chunks]
        sse = "".join(f"data: {json.dumps(line)}\n\n" for line in lines if line is not None) + "data: [DONE]\n\n"
        vcr_responses.append(
            {
                "status": {"code": 200, "message": "OK"},
                "headers": {"content-type": ["text/event-stream"], "x-request-id": [f"req-{number}"]},
                "body": {"string": sse},
            }
        )
    cassette = Cassette(meta=CassetteMeta(adapter="bench"), interactions=interactions)
    paths = {"msgpack": folder / "big.msgpack", "json": folder / "big.json", "vcrpy": folder / "big.yaml"}
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


def vcr_decode(path: Path) -> int:
    """vcrpy load, then split each SSE body and ``json.loads`` every data line."""
    _, responses = vcr_load(path)
    count = 0
    for response in responses:
        body = response["body"]["string"]
        text = body.decode() if isinstance(body, bytes) else body
        for event in text.split("\n\n"):
            if event.startswith("data: ") and event != "data: [DONE]":
                json.loads(event[6:])
                count += 1
    return count


def bench_files(repeat: int, folder: Path) -> dict[str, float]:
    cassette, paths = build_files(folder)
    first = cassette.interactions[0].request.to_options()

    def open_and_match(path: Path) -> Callable[[], None]:
        def run() -> None:
            replay = ReplayAdapter(open_cassette(path))
            replay.select(RecordedRequest.from_options(first))

        return run

    vcr_repeat = max(1, repeat // 2)
    t_vcr_open = median_time(lambda: vcr_load(paths["vcrpy"]), vcr_repeat)
    t_vcr_decode = median_time(lambda: vcr_decode(paths["vcrpy"]), vcr_repeat)
    lines = vcr_decode(paths["vcrpy"])
    total_chunks = INTERACTIONS * CHUNKS
    figures: dict[str, float] = {
        "vcrpy open s": t_vcr_open,
        "vcrpy decode chunks/s": lines / t_vcr_decode,
    }
    sizes = [paths[key].stat().st_size / 1e6 for key in ("msgpack", "json", "vcrpy")]
    for key in ("msgpack", "json"):
        t_open = median_time(open_and_match(paths[key]), repeat)
        t_decode = median_time(lambda key=key: load_cassette(paths[key]), repeat)  # type: ignore[misc]
        figures[f"{key} open-to-first-match ms"] = t_open * 1e3
        figures[f"{key} open speedup vs vcrpy"] = t_vcr_open / t_open
        figures[f"{key} decode chunks/s"] = total_chunks / t_decode
        figures[f"{key} decode speedup vs vcrpy"] = (total_chunks / t_decode) / (lines / t_vcr_decode)
    figures["size MB msgpack"], figures["size MB json"], figures["size MB vcrpy yaml"] = sizes
    return figures


# -- 5. recorded-timing accuracy ------------------------------------------------------------------------


def bench_timing() -> dict[str, float]:
    gap_ns = 5_000_000
    chunks = text_chunks(204)
    interaction = Interaction(
        request=RecordedRequest.from_options(request(0)),
        events=[Event(t_ns=gap_ns * (n + 1), chunk=chunk) for n, chunk in enumerate(chunks)],
        outcome=Completed(t_ns=gap_ns * (len(chunks) + 1)),
    )
    replay = ReplayAdapter(Cassette(interactions=[interaction]), timing=Timing.recorded())

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        return [loop.time() - start async for _ in replay.stream(request(0))]

    arrivals = asyncio.run(run())
    errors = sorted(abs(arrivals[n] - (n + 1) * gap_ns / 1e9) * 1e3 for n in range(len(arrivals)))
    return {
        "median per-chunk error ms": statistics.median(errors),
        "p99 per-chunk error ms": errors[int(len(errors) * 0.99) - 1],
    }


# -- 6. a 1,000,000-chunk cassette, peak memory ---------------------------------------------------------


class CountingAdapter(LlmAdapter):
    """Makes each chunk as it streams, so the adapter itself holds no memory."""

    def __init__(self, count: int) -> None:
        self.count = count

    @property
    def name(self) -> str:
        return "counting"

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
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


def memory_child(folder: str) -> None:
    """Run in a fresh process: record, save, load and replay 1,000,000 chunks; print the figures as JSON."""
    path = Path(folder) / "million.msgpack"
    streams, per_stream = 10, 100_000
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


def bench_memory() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, __file__, "--memory-child", folder], capture_output=True, check=True, text=True
        )
    figures = json.loads(done.stdout)
    return {
        "chunks recorded, saved, loaded, replayed": figures["chunks"],
        "decoded cassette MB": figures["decoded"],
        "peak memory over baseline MB": figures["peak"],
        "peak / decoded": figures["peak"] / figures["decoded"],
    }


def report(title: str, figures: dict[str, float]) -> None:
    print(f"\n{title}")
    for key, value in figures.items():
        text = f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
        print(f"  {key:<48} {text:>16}")


def main(repeat: int = 5) -> None:
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        report("instant replay vs bare async generator (target: replay/bare >= 0.33)", bench_replay(repeat))
        report("recording overhead (target: <= 3 µs/chunk)", bench_recording(repeat, folder))
        report(
            f"{INTERACTIONS} x {CHUNKS} cassette vs vcrpy YAML (targets: open >= 50x, decode >= 5x)",
            bench_files(repeat, folder),
        )
        report("recorded timing, real time, 5 ms gaps (targets: median < 1 ms, p99 < 5 ms)", bench_timing())
    report("1,000,000 chunks: record, save, load, replay (target: peak < 4x decoded size)", bench_memory())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--memory-child"]:
        memory_child(sys.argv[2])
    else:
        main()
