"""HTTP replay throughput: OpenAICompatAdapter vs the openai SDK, both consuming the loopback replay server.

Same cassette for both (one interaction of ~500 chunks, replayed ``calls`` times with instant timing); the
figure is recorded chunks delivered per second of wall time, client and server in one process.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import openai

from chunktape import (
    Cassette,
    GenerateOptions,
    Message,
)
from chunktape._replayer import Timing
from chunktape.http import ReplayServer
from chunktape.providers import OpenAICompatAdapter
from chunktape.wire._openai_chat import options_to_openai_request

sys.path.insert(0, str(Path(__file__).parent))
from bench_core import Row, print_table, recorded, text_stream

OPTIONS = GenerateOptions(model="bench-model", messages=[Message(role="user", content="stream a lot")])


def cassette(chunks: int) -> Cassette:
    stream = text_stream([f"tok{n} " for n in range(chunks - 4)], usage=3)
    return Cassette(interactions=[recorded(OPTIONS, stream)])


async def _adapter(url: str, calls: int) -> int:
    adapter = OpenAICompatAdapter(url, api_key="bench")
    count = 0
    try:
        for _ in range(calls):
            async for _chunk in adapter.stream(OPTIONS):
                count += 1
    finally:
        await adapter.aclose()
    return count


async def _sdk(url: str, calls: int) -> int:
    body: dict[str, Any] = options_to_openai_request(OPTIONS)
    count = 0
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="bench", max_retries=0) as client:
        for _ in range(calls):
            stream = await client.chat.completions.create(**body)
            async for _chunk in stream:
                count += 1
    return count


def measure(quick: bool = False) -> dict[str, float]:
    """Chunks/s for each client (recorded chunks delivered), and the adapter/SDK ratio."""
    calls, chunks = (10, 500) if quick else (50, 500)
    source = cassette(chunks)
    total = calls * len(source.interactions[0].events)
    figures: dict[str, float] = {}
    with ReplayServer(source, timing=Timing.instant(), allow_repeats=True) as server:
        asyncio.run(_adapter(server.url, 1))  # warm up both paths
        asyncio.run(_sdk(server.url, 1))
        for name, client in (("adapter", _adapter), ("openai_sdk", _sdk)):
            start = time.perf_counter()
            asyncio.run(client(server.url, calls))
            figures[f"{name}_chunks_per_s"] = total / (time.perf_counter() - start)
    figures["adapter_vs_sdk"] = figures["adapter_chunks_per_s"] / figures["openai_sdk_chunks_per_s"]
    return figures


NAME = "HTTP path: chunks/s, OpenAICompatAdapter vs openai SDK (loopback server)"


def main(quick: bool = False) -> list[Row]:
    figures = measure(quick)
    ratio = figures["adapter_vs_sdk"]
    detail = f"adapter {figures['adapter_chunks_per_s']:,.0f} chunks/s, SDK {figures['openai_sdk_chunks_per_s']:,.0f}"
    return [Row(NAME, f"{ratio:.2f}x", ">= 1x", ratio >= 1, detail)]


if __name__ == "__main__":
    print_table(main(quick="--quick" in sys.argv))
