"""Regenerate the example cassettes in ``cassettes/`` from the ScriptedAdapter, deterministically.

Recording runs on a looptime event loop (virtual time), so the recorded timing is exactly the scripted
pacing, and wall-clock stamps are pinned; running this twice gives byte-identical files.

    .venv/bin/python scripts/make_example_cassettes.py [output folder]
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import looptime
import msgspec

from chunktape import (
    BlockEnd,
    GenerateOptions,
    LlmError,
    Message,
    RecordingAdapter,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    load_cassette,
    save_cassette,
)
from chunktape.providers import ScriptedAdapter, ScriptedError, ScriptedToolCall, ScriptedTurn
from chunktape.providers._demo import DEMO_PROMPT, DEMO_TOOL_RESULTS, DEMO_TOOLS, DEMO_TURNS, demo_adapter

PINNED = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parent.parent


def _request(messages: list[Message]) -> GenerateOptions:
    return GenerateOptions(model="deepseek-reasoner", messages=messages, tools=list(DEMO_TOOLS), max_tokens=1024)


async def _demo_session(recorder: RecordingAdapter) -> None:
    """The three demo turns, each request carrying the previous turns and tool results."""
    messages = [Message(role="user", content=DEMO_PROMPT)]
    for turn in DEMO_TURNS:
        calls = [
            chunk.block
            async for chunk in recorder.stream(_request(messages))
            if isinstance(chunk, BlockEnd) and isinstance(chunk.block, ToolCallBlock)
        ]
        messages = [
            *messages,
            Message(
                role="assistant",
                content=turn.text or None,
                tool_calls=calls,
                reasoning_content=turn.reasoning or None,
            ),
            *(Message(role="tool", tool_call_id=call.id, content=DEMO_TOOL_RESULTS[call.id]) for call in calls),
        ]


async def _retry(recorder: RecordingAdapter) -> None:
    """A 429 with Retry-After, then the retry succeeds: two interactions for one request."""
    request = _request([Message(role="user", content="Say hello.")])
    with contextlib.suppress(LlmError):
        async for _ in recorder.stream(request):
            pass
    async for _ in recorder.stream(request):
        pass


async def _cut_mid_tool_call(recorder: RecordingAdapter) -> None:
    """The consumer stops reading halfway through a tool call's arguments: a recording cut short."""
    request = _request([Message(role="user", content="Read the entry point.")])
    async with contextlib.aclosing(recorder.stream(request)) as stream:  # type: ignore[type-var]
        seen_arguments = 0
        async for chunk in stream:
            if isinstance(chunk, ToolCallDelta):
                seen_arguments += 1
                if seen_arguments == 3:
                    break


EXAMPLES: dict[str, tuple[Callable[[], ScriptedAdapter], Callable[[RecordingAdapter], Awaitable[None]]]] = {
    "demo-session": (
        demo_adapter,
        _demo_session,
    ),
    "retry-429": (
        lambda: ScriptedAdapter(
            [
                ScriptedTurn(
                    error=ScriptedError(status=429, retry_after=2.0, message="rate limit reached for deepseek-reasoner")
                ),
                ScriptedTurn(text="Hello! How can I help?", usage=TokenUsage(input_tokens=9, output_tokens=6)),
            ],
            first_chunk_s=0.25,
            between_s=0.02,
        ),
        _retry,
    ),
    "cut-mid-tool-call": (
        lambda: ScriptedAdapter(
            [
                ScriptedTurn(
                    reasoning="The entry point is main.py.",
                    tool_calls=[
                        ScriptedToolCall(id="call_read_9", name="read_file", arguments={"path": "src/app/main.py"})
                    ],
                )
            ],
            first_chunk_s=0.3,
            between_s=0.025,
            args_piece=5,
        ),
        _cut_mid_tool_call,
    ),
}


def _pin(path: Path) -> None:
    """Replace wall-clock stamps so the files are reproducible."""
    cassette = load_cassette(path)
    meta = msgspec.structs.replace(cassette.meta, created_at=PINNED, tags={"example": path.stem})
    interactions = [msgspec.structs.replace(item, started_at=PINNED) for item in cassette.interactions]
    save_cassette(msgspec.structs.replace(cassette, meta=meta, interactions=interactions), path)


async def _record(adapter: ScriptedAdapter, path: Path, session: Callable[[RecordingAdapter], Awaitable[None]]) -> None:
    async with RecordingAdapter(adapter, path, redact=False) as recorder:
        await session(recorder)


def build(folder: Path) -> list[Path]:
    """Record every example into ``folder`` as ``.msgpack`` and ``.json``; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (make_adapter, session) in EXAMPLES.items():
        json_path = folder / f"{name}.json"

        loop = looptime.new_event_loop(start=0.0)
        try:
            loop.run_until_complete(_record(make_adapter(), json_path, session))
        finally:
            loop.close()
        _pin(json_path)
        msgpack_path = folder / f"{name}.msgpack"
        save_cassette(load_cassette(json_path), msgpack_path)
        written += [json_path, msgpack_path]
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "cassettes"
    for path in build(target):
        print(path.relative_to(target.parent) if path.is_relative_to(target.parent) else path)
