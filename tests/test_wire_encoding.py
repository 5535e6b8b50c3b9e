"""What the event-stream encoders share (``chunktape.wire._encoding``, ``json_event``): their framing, and what they
keep of another protocol's chunks, named in ``lost`` in the same words."""

from __future__ import annotations

import msgspec
import pytest

from chunktape import BlockEnd, BlockStart, Finish, FinishReason, ProviderEvent, StreamChunk, TextBlock, TextDelta
from chunktape.wire import AnthropicEncoder, ResponsesEncoder, SseEvent, parse_sse
from chunktape.wire._encoding import EventEncoder, encoded_events
from chunktape.wire._sse import json_event

CHAT_EVENT = ProviderEvent(protocol="chat", event=None, data="{}")


def test_json_event_parses_back_to_its_name_and_value() -> None:
    payload = {"type": "ping", "text": "a\nb"}
    assert parse_sse(json_event(payload, event="ping")) == [
        SseEvent(event="ping", data=msgspec.json.encode(payload).decode())
    ]
    assert parse_sse(json_event([1])) == [SseEvent(data="[1]")]


@pytest.mark.parametrize("protocol", ["anthropic", "responses"])
def test_both_encoders_keep_their_own_and_name_what_they_leave_out_alike(protocol: str) -> None:
    encoder: AnthropicEncoder | ResponsesEncoder = (
        AnthropicEncoder(model="m") if protocol == "anthropic" else ResponsesEncoder(model="m")
    )
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="text", opening={"chat": {"x": 1}}),
        TextDelta(index=0, text="hi"),
        BlockEnd(index=0, block=TextBlock(text="hi")),
        CHAT_EVENT,
        ProviderEvent(protocol=protocol, event="ping", data='{"type": "ping"}'),
        Finish(reason=FinishReason(kind="stop")),
    ]
    events = list(encoded_events(encoder, chunks))
    assert encoder.lost == {"chat block openings", "chat events"}
    assert b'event: ping\ndata: {"type": "ping"}\n\n' in events
    assert encoder.finished


def test_encoded_events_yields_only_what_the_encoder_wrote() -> None:
    class Quiet:
        def start(self) -> bytes:
            return b"start"

        def feed(self, chunk: object) -> bytes:
            return b"" if isinstance(chunk, ProviderEvent) else b"x"

    quiet: EventEncoder = Quiet()
    assert list(encoded_events(quiet, [CHAT_EVENT, Finish(reason=FinishReason(kind="stop"))])) == [b"start", b"x"]
