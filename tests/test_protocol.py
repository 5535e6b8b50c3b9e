"""The wire form is the protocol's own, and the adapter plumbing behaves like the web API it mirrors.

Virtual-time tests set ``noop_cycles=0``: looptime's 42 idle loop passes before each jump of the clock are there
for outside I/O, and these tests do none (with no handle ready no coroutine can run, so they change nothing).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings

from chunktape import (
    AbortController,
    AbortSignal,
    BlockEnd,
    BlockStart,
    CallId,
    ErrorCode,
    Finish,
    FinishReason,
    LlmError,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    attribution_headers,
    validate,
)
from chunktape._abort import sleep as abortable_sleep
from strategies import valid_streams

# The seed's exampleChunks(), transcribed object for object.
SEED_WIRE: list[dict[str, Any]] = [
    {"type": "block-start", "index": 0, "blockType": "text"},
    {"type": "text-delta", "index": 0, "text": "ejemplo"},
    {"type": "text-delta", "index": 0, "text": " tutorial"},
    {"type": "block-end", "index": 0, "block": {"type": "text", "text": "ejemplo tutorial"}},
    {"type": "block-start", "index": 1, "blockType": "tool-call"},
    {
        "type": "tool-call-delta",
        "index": 1,
        "id": "call-123",
        "name": "bash",
        "argumentsDelta": '{"command":"echo ejemplo"}',
    },
    {
        "type": "block-end",
        "index": 1,
        "block": {"type": "tool-call", "id": "call-123", "name": "bash", "arguments": '{"command":"echo ejemplo"}'},
    },
    {"type": "usage", "usage": {"inputTokens": 100, "outputTokens": 50}},
    {"type": "finish", "reason": {"kind": "stop"}},
]

SEED_CHUNKS: list[StreamChunk] = [
    BlockStart(index=0, block_type="text"),
    TextDelta(index=0, text="ejemplo"),
    TextDelta(index=0, text=" tutorial"),
    BlockEnd(index=0, block=TextBlock(text="ejemplo tutorial")),
    BlockStart(index=1, block_type="tool-call"),
    ToolCallDelta(index=1, id=CallId("call-123"), name="bash", arguments_delta='{"command":"echo ejemplo"}'),
    BlockEnd(index=1, block=ToolCallBlock(id=CallId("call-123"), name="bash", arguments='{"command":"echo ejemplo"}')),
    UsageChunk(usage=TokenUsage(input_tokens=100, output_tokens=50)),
    Finish(reason=FinishReason(kind="stop")),
]


def test_seed_example_encodes_to_the_seeds_exact_wire_form() -> None:
    assert msgspec.json.decode(msgspec.json.encode(SEED_CHUNKS)) == SEED_WIRE


def test_seed_wire_form_decodes_to_the_structs() -> None:
    decoded = msgspec.json.decode(msgspec.json.encode(SEED_WIRE), type=list[StreamChunk])
    assert decoded == SEED_CHUNKS
    validate(decoded)


def test_wire_names_are_camel_case_and_optional_fields_are_omitted() -> None:
    usage = TokenUsage(input_tokens=1, output_tokens=2, cached_input_tokens=3, reasoning_tokens=4)
    assert msgspec.json.decode(msgspec.json.encode(usage)) == {
        "inputTokens": 1,
        "outputTokens": 2,
        "cachedInputTokens": 3,
        "reasoningTokens": 4,
    }
    assert msgspec.json.encode(FinishReason(kind="error", detail="boom")) == b'{"kind":"error","detail":"boom"}'


def test_chunks_are_frozen_and_hashable() -> None:
    chunk = TextDelta(index=0, text="a")
    with pytest.raises(AttributeError):
        chunk.text = "b"  # type: ignore[misc]
    assert hash(chunk) == hash(TextDelta(index=0, text="a"))


def test_decoding_rejects_an_unknown_chunk_type() -> None:
    with pytest.raises(msgspec.ValidationError, match="Invalid value 'text-chunk'"):
        msgspec.json.decode(b'{"type":"text-chunk","index":0}', type=StreamChunk)


@settings(max_examples=200)
@given(valid_streams())
def test_any_valid_stream_round_trips_through_json_and_msgpack(chunks: list[StreamChunk]) -> None:
    assert msgspec.json.decode(msgspec.json.encode(chunks), type=list[StreamChunk]) == chunks
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(chunks), type=list[StreamChunk]) == chunks


def test_attribution_headers_name_chunktape_and_its_version() -> None:
    from chunktape import __version__

    headers = attribution_headers()
    assert headers["User-Agent"] == f"chunktape/{__version__}"
    assert headers is not attribution_headers()  # callers may mutate their copy


def test_abort_controller_runs_listeners_once_and_late_listeners_immediately() -> None:
    controller = AbortController()
    seen: list[object] = []
    remove = controller.signal.add_listener(seen.append)
    removed: list[object] = []
    controller.signal.add_listener(removed.append)()
    controller.abort("stop")
    controller.abort("again")
    assert seen == ["stop"]
    assert removed == []
    assert controller.signal.aborted
    assert controller.signal.reason == "stop"
    controller.signal.add_listener(seen.append)
    assert seen == ["stop", "stop"]
    remove()  # removing after the fact is harmless
    with pytest.raises(LlmError) as raised:
        controller.signal.throw_if_aborted()
    assert raised.value.code is ErrorCode.CANCELLED


@pytest.mark.looptime(noop_cycles=0)
async def test_abortable_sleep_ends_promptly_when_the_signal_aborts() -> None:
    loop = asyncio.get_running_loop()
    controller = AbortController()
    loop.call_later(2.0, controller.abort)
    start = loop.time()
    with pytest.raises(LlmError) as raised:
        await abortable_sleep(60.0, controller.signal)
    assert raised.value.code is ErrorCode.CANCELLED
    assert loop.time() - start == pytest.approx(2.0)


@pytest.mark.looptime(noop_cycles=0)
async def test_timeout_signal_aborts_after_loop_time() -> None:
    loop = asyncio.get_running_loop()
    signal = AbortSignal.timeout(5.0)
    start = loop.time()
    with pytest.raises(LlmError, match=r"timed out after 5\.0s"):
        await abortable_sleep(100.0, signal)
    assert loop.time() - start == pytest.approx(5.0)


@pytest.mark.looptime(noop_cycles=0)
async def test_task_cancellation_during_abortable_sleep_stays_a_cancellation() -> None:
    controller = AbortController()
    task = asyncio.ensure_future(abortable_sleep(60.0, controller.signal))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
