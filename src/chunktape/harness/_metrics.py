"""Stream metrics and the observer hooks (the seed's ``llm/stream/start|chunk|error|end`` events).

Times are read from the running event loop's clock, so a test in virtual time (``looptime``) measures
virtual seconds. Observers are plain callables ``on_event(name, payload)``; every event is also logged on
the ``chunktape.harness`` logger (start/end at INFO, chunks at DEBUG, errors at WARNING).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import msgspec

from chunktape._protocol import TokenUsage

__all__ = [
    "STREAM_CHUNK",
    "STREAM_END",
    "STREAM_ERROR",
    "STREAM_START",
    "StreamMetrics",
    "StreamObserver",
    "StreamStart",
    "add_usage",
    "logger",
]

STREAM_START: Final = "llm/stream/start"
"""Payload: ``StreamStart``, once per attempt."""
STREAM_CHUNK: Final = "llm/stream/chunk"
"""Payload: the ``StreamChunk`` as received from the adapter."""
STREAM_ERROR: Final = "llm/stream/error"
"""Payload: the ``ErrorEvent`` (also yielded to the consumer)."""
STREAM_END: Final = "llm/stream/end"
"""Payload: the final ``DoneEvent``, exactly once per ``stream_with_retry`` call, also on task cancellation."""

StreamObserver = Callable[[str, Any], None]
"""``on_event(name, payload)``: called synchronously for each observer event."""

logger = logging.getLogger("chunktape.harness")


class StreamStart(msgspec.Struct, frozen=True, kw_only=True):
    """What the ``llm/stream/start`` event carries (the seed's structured ``llm_request`` log)."""

    model: str
    message_count: int
    tool_count: int
    attempt: int


class StreamMetrics(msgspec.Struct, kw_only=True):
    """Figures of one ``stream_with_retry`` call, in seconds of loop time, across all its attempts."""

    ttfb: float | None = None
    """From the call to the first chunk of any attempt (retry delays included); None if no chunk came."""
    total_duration: float | None = None
    """From the call to its ``DoneEvent``."""
    chunk_count: int = 0
    """Chunks received from the adapter, over all attempts."""
    tool_call_count: int = 0
    """Tool calls delivered to the consumer (``ToolCallEvent``s)."""
    retry_count: int = 0
    attempts: int = 0
    token_usage: TokenUsage | None = None
    """The usage reported by the attempt that completed (in an agent run: summed over its turns)."""

    def add_turn(self, turn: StreamMetrics) -> None:
        """Add one turn of an agent run: counts and usage add up, ``ttfb`` stays the first turn's.

        ``total_duration`` is the run's own, so the caller sets it.
        """
        if self.attempts == 0:
            self.ttfb = turn.ttfb
        self.chunk_count += turn.chunk_count
        self.tool_call_count += turn.tool_call_count
        self.retry_count += turn.retry_count
        self.attempts += turn.attempts
        self.token_usage = add_usage(self.token_usage, turn.token_usage)


def add_usage(total: TokenUsage | None, more: TokenUsage | None) -> TokenUsage | None:
    """The sum of two usages; an optional count stays None only when neither side reported it."""
    if total is None or more is None:
        return total or more
    return TokenUsage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cached_input_tokens=_add(total.cached_input_tokens, more.cached_input_tokens),
        reasoning_tokens=_add(total.reasoning_tokens, more.reasoning_tokens),
    )


def _add(left: int | None, right: int | None) -> int | None:
    if left is None and right is None:
        return None
    return (left or 0) + (right or 0)
