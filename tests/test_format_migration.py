"""Cassette format version 2: what it adds, how a version-1 file is migrated, and why the version moved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from chunktape import (
    FORMAT_VERSION,
    BlockEnd,
    BlockStart,
    CallId,
    Cassette,
    Completed,
    ErrorCode,
    Event,
    Finish,
    FinishReason,
    Interaction,
    LlmError,
    ProviderEvent,
    ReasoningBlock,
    ReasoningDelta,
    RecordedRequest,
    ServerToolCallBlock,
    ServerToolResultBlock,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageChunk,
    load_cassette,
    open_cassette,
    save_cassette,
    validate,
)
from chunktape._cassettes import codec
from chunktape._cassettes.codec import MIGRATIONS
from chunktape._protocol import Message

# A version-1 file as chunktape 0.1 wrote it (JSON layout, camelCase, defaults omitted), written out by hand.
VERSION_1 = {
    "version": 1,
    "meta": {"createdAt": "2026-01-01T12:00:00Z", "recorder": "chunktape 0.1.0", "adapter": "deepseek"},
    "interactions": [
        {
            "request": {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}], "fingerprint": "x"},
            "events": [
                {"tNs": 5, "chunk": {"type": "block-start", "index": 0, "blockType": "text"}},
                {"tNs": 6, "chunk": {"type": "text-delta", "index": 0, "text": "Hello"}},
                {"tNs": 7, "chunk": {"type": "block-end", "index": 0, "block": {"type": "text", "text": "Hello"}}},
                {"tNs": 8, "chunk": {"type": "usage", "usage": {"inputTokens": 3, "outputTokens": 1}}},
                {"tNs": 9, "chunk": {"type": "finish", "reason": {"kind": "stop"}}},
            ],
            "outcome": {"type": "completed", "tNs": 10},
        }
    ],
}


def _expected_v1() -> list[Any]:
    return [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="Hello"),
        BlockEnd(index=0, block=TextBlock(text="Hello")),
        UsageChunk(usage=TokenUsage(input_tokens=3, output_tokens=1)),
        Finish(reason=FinishReason(kind="stop")),
    ]


def test_the_format_is_version_2_with_a_registered_migration_from_1() -> None:
    assert FORMAT_VERSION == 2
    document = json.loads(json.dumps(VERSION_1))
    assert MIGRATIONS[1](document) == VERSION_1  # everything version 1 wrote means the same in version 2


@pytest.mark.parametrize("suffix", [".json", ".msgpack"])
def test_a_version_1_file_loads_as_version_2_and_is_written_again_as_2(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"old{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(VERSION_1))
    else:
        packed = json.loads(json.dumps(VERSION_1))
        for interaction in packed["interactions"]:  # msgpack keeps each events array as one nested blob
            interaction["events"] = msgspec.msgpack.encode(interaction["events"])
        path.write_bytes(msgspec.msgpack.encode(packed))
    for cassette in (load_cassette(path), open_cassette(path).to_cassette()):
        assert cassette.version == FORMAT_VERSION
        assert cassette.meta.adapter == "deepseek"
        assert cassette.interactions[0].chunks == _expected_v1()
        assert cassette.interactions[0].outcome == Completed(t_ns=10)
    again = tmp_path / f"again{suffix}"
    save_cassette(load_cassette(path), again)
    assert load_cassette(again).version == 2
    assert load_cassette(again) == load_cassette(path)


def _rich_chunks() -> list[Any]:
    """Every chunk type and field version 2 adds, in one valid stream."""
    return [
        ProviderEvent(protocol="anthropic", event="ping", data='{"type": "ping"}'),
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="think"),
        ReasoningDelta(index=0, text="", signature="c2ln"),
        BlockEnd(index=0, block=ReasoningBlock(text="think", signature="c2ln")),
        BlockStart(index=1, block_type="server-tool-call"),
        ToolCallDelta(index=1, id=CallId("srvtoolu_1"), name="web_search", arguments_delta='{"query": "x"}'),
        BlockEnd(index=1, block=ServerToolCallBlock(id="srvtoolu_1", name="web_search", arguments='{"query": "x"}')),
        BlockStart(
            index=2,
            block_type="server-tool-result",
            opening={"anthropic": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}},
        ),
        BlockEnd(index=2, block=ServerToolResultBlock(tool_use_id="srvtoolu_1", content=[])),
        BlockStart(index=3, block_type="text", id="msg_1"),
        TextDelta(index=3, text="Cited", citation={"type": "url_citation", "url": "https://example.test"}),
        BlockEnd(
            index=3, block=TextBlock(text="Cited", citations=[{"type": "url_citation", "url": "https://example.test"}])
        ),
        UsageChunk(
            usage=TokenUsage(
                input_tokens=30,
                output_tokens=4,
                cached_input_tokens=10,
                cache_write_tokens=15,
                extra={"server_tool_use": {"web_search_requests": 1}},
            )
        ),
        Finish(reason=FinishReason(kind="stop", provider_reason="pause_turn", details={"type": "x"})),
    ]


@pytest.mark.parametrize("suffix", [".json", ".msgpack"])
def test_every_version_2_addition_survives_both_encodings(tmp_path: Path, suffix: str) -> None:
    chunks = _rich_chunks()
    validate(chunks)
    request = RecordedRequest.from_options(RecordedRequest(model="m", messages=[Message(role="user", content="q")]))
    interaction = Interaction(
        request=request,
        events=[Event(t_ns=n, chunk=chunk) for n, chunk in enumerate(chunks)],
        outcome=Completed(t_ns=len(chunks)),
    )
    cassette = Cassette(interactions=[interaction])
    save_cassette(cassette, tmp_path / f"new{suffix}")
    assert load_cassette(tmp_path / f"new{suffix}") == cassette
    assert open_cassette(tmp_path / f"new{suffix}").to_cassette() == cassette


def test_a_reader_of_version_1_refuses_a_version_2_file_as_newer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why the version moved: an older chunktape meeting a provider event says "newer", not "corrupt"."""
    path = tmp_path / "new.json"
    chunks = _rich_chunks()
    request = RecordedRequest.from_options(RecordedRequest(model="m", messages=[]))
    events = [Event(t_ns=0, chunk=chunk) for chunk in chunks]
    save_cassette(Cassette(interactions=[Interaction(request=request, events=events, outcome=Completed(t_ns=1))]), path)
    monkeypatch.setattr(codec, "FORMAT_VERSION", 1)
    with pytest.raises(LlmError) as raised:
        load_cassette(path)
    assert raised.value.code is ErrorCode.CASSETTE_VERSION
