"""What the event-stream encoders (Anthropic Messages, OpenAI Responses) share: what they keep of other protocols'
chunks, and a whole chunk stream as its events.

A chunk stream recorded on one protocol may be served on another: an encoder sends its own protocol's block
openings and events as they were recorded, leaves out another protocol's, and names what it left out in ``lost``
(for the cross-protocol warning), in the same words for every protocol.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from chunktape._protocol import BlockStart, ProviderEvent, StreamChunk
from chunktape.wire._sse import SseEvent, write_sse

__all__ = ["EventEncoder", "encoded_events", "own_event", "own_opening"]


class EventEncoder(Protocol):
    """An incremental encoder of a chunk stream as SSE bytes (``AnthropicEncoder``, ``ResponsesEncoder``)."""

    def start(self) -> bytes: ...

    def feed(self, chunk: StreamChunk) -> bytes: ...


def encoded_events(encoder: EventEncoder, chunks: Iterable[StreamChunk]) -> Iterator[bytes]:
    """The SSE bytes of a whole chunk stream through ``encoder``: its start, then each chunk's events (chunks with
    none, such as usage, yield nothing)."""
    yield encoder.start()
    for chunk in chunks:
        piece = encoder.feed(chunk)
        if piece:
            yield piece


def own_opening(chunk: BlockStart, protocol: str, lost: set[str]) -> dict[str, Any] | None:
    """The block's opening as ``protocol`` recorded it, if it did; another protocol's openings are named in
    ``lost``."""
    opening = chunk.opening.get(protocol)
    if chunk.opening and opening is None:
        lost.add(f"{', '.join(sorted(chunk.opening))} block openings")
    return opening


def own_event(chunk: ProviderEvent, protocol: str, lost: set[str]) -> bytes | None:
    """A ``protocol`` event as it was recorded, untouched; another protocol's event is None, named in ``lost``."""
    if chunk.protocol != protocol:
        lost.add(f"{chunk.protocol} events")
        return None
    return write_sse([SseEvent(event=chunk.event, data=chunk.data)])
