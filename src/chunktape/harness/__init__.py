"""The reference consumer: ``stream_with_retry``, the agent loop ``run_agent`` (with its tools on tape), a
person-driven ``Conversation``, and their events, policy and metrics."""

from chunktape.harness._agent import run_agent
from chunktape.harness._conversation import Conversation
from chunktape.harness._events import (
    DoneEvent,
    DoneReason,
    ErrorEvent,
    HarnessEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    Transcript,
    TurnEvent,
    collect,
)
from chunktape.harness._metrics import (
    STREAM_CHUNK,
    STREAM_END,
    STREAM_ERROR,
    STREAM_START,
    StreamMetrics,
    StreamObserver,
    StreamStart,
    add_usage,
)
from chunktape.harness._retry import ErrorClass, RetryPolicy, RetryRule, stream_with_retry
from chunktape.harness._tools import Tool, ToolRunner, tool_content, tool_error
from chunktape.harness._tooltape import (
    RecordingToolRunner,
    ReplayingToolRunner,
    ToolDivergence,
    ToolDivergenceWarning,
    ToolTape,
    VerifyingToolRunner,
    tool_run,
)

__all__ = [
    "Conversation",
    "DoneEvent",
    "DoneReason",
    "ErrorClass",
    "ErrorEvent",
    "HarnessEvent",
    "ReasoningEvent",
    "RecordingToolRunner",
    "ReplayingToolRunner",
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
    "Tool",
    "ToolCallEvent",
    "ToolDivergence",
    "ToolDivergenceWarning",
    "ToolResultEvent",
    "ToolRunner",
    "ToolTape",
    "Transcript",
    "TurnEvent",
    "VerifyingToolRunner",
    "add_usage",
    "collect",
    "run_agent",
    "stream_with_retry",
    "tool_content",
    "tool_error",
    "tool_run",
]
