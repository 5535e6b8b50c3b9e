"""The reference consumer: ``stream_with_retry`` and the events, retry policy and metrics around it."""

from chunktape.harness.events import (
    DoneEvent,
    DoneReason,
    ErrorEvent,
    HarnessEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallEvent,
    Transcript,
    collect,
)
from chunktape.harness.metrics import (
    STREAM_CHUNK,
    STREAM_END,
    STREAM_ERROR,
    STREAM_START,
    StreamMetrics,
    StreamObserver,
    StreamStart,
)
from chunktape.harness.retry import ErrorClass, RetryPolicy, RetryRule, stream_with_retry

__all__ = [
    "DoneEvent",
    "DoneReason",
    "ErrorClass",
    "ErrorEvent",
    "HarnessEvent",
    "ReasoningEvent",
    "RetryPolicy",
    "RetryRule",
    "STREAM_CHUNK",
    "STREAM_END",
    "STREAM_ERROR",
    "STREAM_START",
    "StreamMetrics",
    "StreamObserver",
    "StreamStart",
    "TextEvent",
    "ToolCallEvent",
    "Transcript",
    "collect",
    "stream_with_retry",
]
