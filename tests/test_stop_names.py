"""The table of stop names in docs/stream-protocol.md is what the code does: each protocol finish kind, the
harness's done reason for it, and OpenAI's ``finish_reason`` both ways (encoder and decoder)."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest

from chunktape import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishKind,
    FinishReason,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    UsageChunk,
)
from chunktape.harness import DoneEvent, stream_with_retry
from chunktape.wire import chunks_to_openai_dicts, decode_openai_sse
from helpers import PacedAdapter, options, paced, run_sync

DOC = Path(__file__).parents[1] / "docs" / "stream-protocol.md"


def _table() -> list[tuple[str, str, str]]:
    section = DOC.read_text(encoding="utf-8").split("## One stop, three names", 1)[1]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| `([^`]+)` \|$", section, flags=re.M)
    return [(kind, done, wire) for kind, done, wire in rows]


def test_the_table_names_every_finish_kind_once() -> None:
    kinds = [kind for kind, _, _ in _table()]
    assert sorted(kinds) == sorted(typing.get_args(FinishKind))


def _stream(kind: str) -> list[StreamChunk]:
    return [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="hi"),
        BlockEnd(index=0, block=TextBlock(text="hi")),
        UsageChunk(usage=TokenUsage(input_tokens=1, output_tokens=1)),
        Finish(reason=FinishReason(kind=kind)),  # type: ignore[arg-type]
    ]


async def _done_reason(kind: str) -> str:
    done = [
        event
        async for event in stream_with_retry(PacedAdapter(paced(_stream(kind))), options())
        if isinstance(event, DoneEvent)
    ]
    return done[-1].reason


@pytest.mark.parametrize(("kind", "done", "wire"), _table())
def test_each_row_is_what_the_harness_and_the_wire_say(kind: str, done: str, wire: str) -> None:
    assert run_sync(_done_reason(kind)) == done
    dicts = chunks_to_openai_dicts(_stream(kind), model="m")
    sent = [item["choices"][0]["finish_reason"] for item in dicts if item["choices"]]
    assert [reason for reason in sent if reason is not None] == [wire]
    event = {"choices": [{"index": 0, "delta": {}, "finish_reason": wire}]}
    body = f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode()
    finishes = [chunk for chunk in decode_openai_sse(body) if isinstance(chunk, Finish)]
    assert [finish.reason.kind for finish in finishes] == [kind]
