"""The consumer-side events ``stream_with_retry`` yields (the seed's chunk types, one level above StreamChunk).

A consumer sees ``TextEvent``/``ReasoningEvent`` live as deltas arrive, ``ToolCallEvent``s once the attempt
has finished cleanly (so a failed attempt never hands out a tool call), ``ErrorEvent`` for each failed
attempt, and exactly one final ``DoneEvent``.

**Retries after partial output.** Text streams live, so an attempt that fails mid-way has already yielded
some text. Its ``ErrorEvent`` then has ``will_retry=True`` and ``partial=True``: everything the failed
attempt yielded is superseded, and the next attempt's events start the answer over from its beginning
(each event carries its ``attempt`` number). ``collect()`` applies this rule, so its text never holds a
duplicate.

**Agent runs.** ``run_agent`` adds ``ToolResultEvent`` (one per executed tool call, in call order) and
``TurnEvent`` (the end of each model turn, with that turn's own ``DoneEvent``) and still ends with exactly
one ``DoneEvent`` for the whole run. A retry then supersedes only the output of its own turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any, Literal, TypeAlias, assert_never

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    BlockEnd,
    CallId,
    Finish,
    FinishKind,
    FinishReason,
    ReasoningDelta,
    Reply,
    ReplyBuilder,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    UsageChunk,
)
from chunktape.harness._metrics import StreamMetrics

__all__ = [
    "DoneEvent",
    "DoneReason",
    "ErrorEvent",
    "HarnessEvent",
    "ReasoningEvent",
    "TextEvent",
    "ToolCallEvent",
    "ToolResultEvent",
    "Transcript",
    "TurnEvent",
    "collect",
    "turn_reply",
]

_json = msgspec.json.Decoder()

DoneReason: TypeAlias = Literal["stop", "tool_use", "length", "cancel", "error"]


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    pass


class TextEvent(_Event, frozen=True, kw_only=True, tag="text"):
    """A piece of answer text; concatenate the pieces of one attempt."""

    text: str
    index: int
    attempt: int = 1


class ReasoningEvent(_Event, frozen=True, kw_only=True, tag="reasoning"):
    """A piece of the model's reasoning (DeepSeek ``reasoning_content``)."""

    text: str
    index: int
    attempt: int = 1


class ToolCallEvent(_Event, frozen=True, kw_only=True, tag="tool_call"):
    """A complete tool call with its arguments parsed from JSON (always a JSON object)."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str
    index: int
    attempt: int = 1

    @classmethod
    def from_block(cls, block: ToolCallBlock, index: int, attempt: int = 1) -> ToolCallEvent:
        """The event for a complete tool-call block; ``INVALID_RESPONSE`` if its arguments are not a JSON object."""
        try:
            arguments = _json.decode(block.arguments)
        except msgspec.DecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            raise LlmError(
                f"tool call {block.name!r} ({block.id}) has arguments that are not a JSON object: "
                f"{block.arguments[:80]!r}",
                ErrorCode.INVALID_RESPONSE,
            )
        return cls(
            id=block.id,
            name=block.name,
            arguments=arguments,
            raw_arguments=block.arguments,
            index=index,
            attempt=attempt,
        )


class ErrorEvent(_Event, frozen=True, kw_only=True, tag="error"):
    """An attempt failed. ``retry_after`` is the delay before the next attempt when ``will_retry``, else None."""

    error: LlmError
    recoverable: bool
    retry_after: float | None = None
    will_retry: bool = False
    partial: bool = False
    """The failed attempt had already yielded text or reasoning, which the next attempt supersedes."""
    attempt: int = 1


class DoneEvent(_Event, frozen=True, kw_only=True, tag="done"):
    """The last event of every call: why it ended, the usage, and (for ``error``) the error."""

    reason: DoneReason
    usage: TokenUsage | None = None
    error: LlmError | None = None
    finish: FinishKind | None = None
    """The protocol's finish kind when the stream finished (``content-filter`` maps to ``stop``)."""
    metrics: StreamMetrics | None = None
    reply: Reply | None = None
    """The whole reply of the attempt that finished (None when none did): its ``blocks`` carry what the provider
    needs to take the turn back, such as Anthropic's thinking signatures, which the output events do not."""


class ToolResultEvent(_Event, frozen=True, kw_only=True, tag="tool_result"):
    """The outcome of one tool call, fed back to the model as a ``tool`` message.

    A tool that raised, or an unknown tool name, gives ``is_error=True`` with ``result`` the seed's
    ``{"error": true, "message": ...}``; ``content`` is exactly what the model receives (``result`` itself
    when it is a str, else its JSON).
    """

    tool_call_id: str
    name: str
    result: Any
    is_error: bool = False
    content: str


class TurnEvent(_Event, frozen=True, kw_only=True, tag="turn"):
    """Model turn ``turn`` (1-based) of an agent run ended; ``done`` is that turn's own end and metrics."""

    turn: int
    done: DoneEvent


HarnessEvent: TypeAlias = (
    TextEvent | ReasoningEvent | ToolCallEvent | ToolResultEvent | TurnEvent | ErrorEvent | DoneEvent
)


class Transcript(msgspec.Struct, kw_only=True):
    """What a consumer ends up with: the text of the attempt that counted, its tool calls, errors, the end."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallEvent] = []
    tool_results: list[ToolResultEvent] = []
    turns: list[TurnEvent] = []
    errors: list[ErrorEvent] = []
    done: DoneEvent | None = None
    events: list[HarnessEvent] = []


async def collect(events: AsyncIterable[HarnessEvent]) -> Transcript:
    """Consume a harness stream or an agent run; text of an attempt that was retried is dropped, never duplicated."""
    transcript = Transcript()
    output: list[StreamChunk] = []  # the text and reasoning that count so far, folded at the end
    kept = (0, 0)  # output and tool calls of finished turns, which no later retry supersedes
    async for event in events:
        transcript.events.append(event)
        match event:
            case TextEvent() | ReasoningEvent():
                output.append(_as_chunk(event))
            case ToolCallEvent():
                transcript.tool_calls.append(event)
            case ToolResultEvent():
                transcript.tool_results.append(event)
            case TurnEvent():
                transcript.turns.append(event)
                kept = (len(output), len(transcript.tool_calls))
            case ErrorEvent():
                transcript.errors.append(event)
                if event.will_retry:
                    del output[kept[0] :], transcript.tool_calls[kept[1] :]
            case DoneEvent():
                transcript.done = event
            case _:
                assert_never(event)
    fold = ReplyBuilder(output)
    transcript.text = fold.text
    transcript.reasoning = fold.reasoning
    return transcript


def _as_chunk(event: TextEvent | ReasoningEvent | ToolCallEvent) -> StreamChunk:
    """The chunk an output event stands for, so harness events fold with the protocol's ``ReplyBuilder``."""
    match event:
        case TextEvent():
            return TextDelta(index=event.index, text=event.text)
        case ReasoningEvent():
            return ReasoningDelta(index=event.index, text=event.text)
        case ToolCallEvent():
            block = ToolCallBlock(id=CallId(event.id), name=event.name, arguments=event.raw_arguments)
            return BlockEnd(index=event.index, block=block)
        case _:
            assert_never(event)


def turn_reply(output: Iterable[TextEvent | ReasoningEvent | ToolCallEvent], done: DoneEvent) -> Reply:
    """The reply of one model turn: its output events (of the attempt that counted) folded, with its usage and end."""
    fold = ReplyBuilder(_as_chunk(event) for event in output)
    if done.usage is not None:
        fold.feed(UsageChunk(usage=done.usage))
    fold.feed(Finish(reason=FinishReason(kind=done.finish or "tool-calls")))
    return fold.reply()
