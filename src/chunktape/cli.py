"""The ``chunktape`` command line (a thin face over the library)."""

from __future__ import annotations

import asyncio
import sys

from chunktape.protocol import GenerateOptions, Message
from chunktape.providers.demo import demo_adapter
from chunktape.validation import StreamValidator


async def _demo() -> None:
    adapter = demo_adapter()
    messages = [Message(role="user", content="What is in src/?")]
    for turn in range(adapter.turn_count):
        validator = StreamValidator()
        print(f"--- turn {turn + 1}")
        async for chunk in adapter.stream(GenerateOptions(model="scripted-1", messages=messages)):
            validator.feed(chunk)
            print(f"  {type(chunk).__name__:<15} {chunk}")
        validator.close()
        print("  valid: all StreamChunk rules hold")


def main() -> None:
    if sys.argv[1:2] != ["demo"]:
        print("usage: chunktape demo", file=sys.stderr)
        raise SystemExit(2)
    asyncio.run(_demo())
