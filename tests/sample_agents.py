"""Sample agents for the fault search: one correct, and variants each with one planted bug.

``SampleAgent`` asks about the weather, runs the ``get_weather`` tool the model calls, and answers; it retries
recoverable errors by hand over ``adapter.stream()``. Its planted bugs, one flag each:

- ``commit_text_at_tool_call``: text is committed to the transcript when the first tool-call delta arrives, and a
  retry only forgets uncommitted text, so a disconnect after that delta streams the text twice;
- ``honour_retry_after=False``: a 429's Retry-After is ignored (a fixed 1 s backoff instead);
- ``idle_timeout=None``: no idle timeout, so a stream that goes silent is waited on for good.

``check(agent, adapter)`` is what the search runs: the agent must end with the whole transcript, or give up on a
non-recoverable error, and never call again before a Retry-After has passed (``RetryAfterGuard``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import looptime

from chunktape import (
    BlockEnd,
    ErrorCode,
    Finish,
    GenerateOptions,
    LlmAdapter,
    LlmError,
    Message,
    RecordingAdapter,
    StreamChunk,
    StreamValidator,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    ToolSpec,
)
from chunktape.providers._scripted import ScriptedAdapter, ScriptedToolCall, ScriptedTurn

QUESTION = "What is the weather in Paris?"
LOOKING = "Let me look that up for you. "
ANSWER = "It is sunny and 21 degrees in Paris today."
EXPECTED_TEXT = LOOKING + ANSWER
WEATHER_TOOL = ToolSpec(
    name="get_weather",
    description="The current weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TURNS = [
    ScriptedTurn(text=LOOKING, tool_calls=[ScriptedToolCall(name="get_weather", arguments={"city": "Paris"}, id="c1")]),
    ScriptedTurn(text=ANSWER),
]


def weather(city: str) -> str:
    return f"sunny, 21 degrees in {city}"


@dataclass
class Outcome:
    """How a run ended: the transcript, and the error it gave up on (None: it finished)."""

    text: str
    error: LlmError | None = None


@dataclass
class _Attempt:
    text: list[str] = field(default_factory=list)
    calls: list[ToolCallBlock] = field(default_factory=list)


@dataclass(frozen=True)
class SampleAgent:
    """The weather agent; the defaults are the correct agent."""

    commit_text_at_tool_call: bool = False
    honour_retry_after: bool = True
    idle_timeout: float | None = 10.0
    max_attempts: int = 4
    backoff_s: float = 1.0
    max_turns: int = 4

    async def run(self, adapter: LlmAdapter) -> Outcome:
        transcript: list[str] = []
        messages = [Message(role="user", content=QUESTION)]
        for _ in range(self.max_turns):
            options = GenerateOptions(model="sample", messages=messages, tools=[WEATHER_TOOL])
            try:
                turn = await self._turn(adapter, options, transcript)
            except LlmError as error:
                return Outcome("".join(transcript), error)
            if not turn.calls:
                return Outcome("".join(transcript))
            messages = [*messages, Message(role="assistant", content="".join(turn.text), tool_calls=turn.calls)]
            for block in turn.calls:
                city = str(json.loads(block.arguments)["city"])
                messages.append(Message(role="tool", content=weather(city), tool_call_id=block.id))
        return Outcome("".join(transcript), LlmError("too many turns", ErrorCode.INVALID_RESPONSE))

    async def _turn(self, adapter: LlmAdapter, options: GenerateOptions, transcript: list[str]) -> _Attempt:
        """One model turn with retries; its text goes to ``transcript`` once the turn is done."""
        for attempt in range(1, self.max_attempts + 1):
            pending: list[str] = []
            try:
                turn = await self._attempt(adapter, options, pending, transcript)
            except LlmError as error:
                if not error.recoverable or attempt == self.max_attempts:
                    raise
                delay = self.backoff_s * attempt
                if self.honour_retry_after and error.retry_after is not None:
                    delay = error.retry_after
                await asyncio.sleep(delay)
                continue
            transcript.extend(pending)
            return turn
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(
        self, adapter: LlmAdapter, options: GenerateOptions, pending: list[str], transcript: list[str]
    ) -> _Attempt:
        turn = _Attempt()
        validator = StreamValidator()
        finished = False
        stream = adapter.stream(options)
        try:
            while True:
                try:
                    chunk = await self._next(stream)
                except StopAsyncIteration:
                    break
                validator.feed(chunk)
                match chunk:
                    case TextDelta():
                        pending.append(chunk.text)
                        turn.text.append(chunk.text)
                    case ToolCallDelta() if self.commit_text_at_tool_call:
                        # BUG (a): the text "is final" once a tool call starts, so it is committed now...
                        transcript.extend(pending)
                        pending.clear()
                    case BlockEnd(block=ToolCallBlock() as block):
                        turn.calls.append(block)
                    case Finish():
                        finished = True
                    case _:
                        pass
        finally:
            await stream.aclose()
        if not finished:
            raise LlmError("the stream ended without a finish chunk", ErrorCode.STREAM_ABORTED)
        validator.close()
        return turn

    async def _next(self, stream: AsyncIterator[StreamChunk]) -> StreamChunk:
        if self.idle_timeout is None:
            return await anext(stream)  # BUG (c): waits for good on a silent stream
        try:
            async with asyncio.timeout(self.idle_timeout):
                return await anext(stream)
        except TimeoutError:
            raise LlmError(f"no chunk within {self.idle_timeout:g}s", ErrorCode.TIMEOUT) from None


CORRECT = SampleAgent()
DUPLICATES_TEXT = SampleAgent(commit_text_at_tool_call=True)
IGNORES_RETRY_AFTER = SampleAgent(honour_retry_after=False)
NO_IDLE_TIMEOUT = SampleAgent(idle_timeout=None)


class RetryAfterGuard(LlmAdapter):
    """Wraps an adapter like a strict provider: notes every call made before a Retry-After it was given passed."""

    def __init__(self, inner: LlmAdapter) -> None:
        self.inner = inner
        self.violations: list[str] = []
        self._not_before: tuple[float, float] | None = None

    @property
    def name(self) -> str:
        return self.inner.name

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        loop = asyncio.get_running_loop()
        if self._not_before is not None:
            due, retry_after = self._not_before
            if loop.time() < due - 1e-6:
                early = due - loop.time()
                self.violations.append(f"called again {early:g}s before the Retry-After of {retry_after:g}s passed")
        self._not_before = None
        try:
            async for chunk in self.inner.stream(options):
                yield chunk
        except LlmError as error:
            if error.retry_after is not None:
                self._not_before = (loop.time() + error.retry_after, error.retry_after)
            raise


async def check(agent: SampleAgent, adapter: LlmAdapter) -> None:
    """The property the search tests: whole transcript or a clean give-up, and Retry-After honoured."""
    guard = RetryAfterGuard(adapter)
    outcome = await agent.run(guard)
    assert not guard.violations, guard.violations[0]
    if outcome.error is None:
        assert outcome.text == EXPECTED_TEXT, f"the transcript is {outcome.text!r}"
    else:
        assert not outcome.error.recoverable, f"gave up on a recoverable error: {outcome.error}"


def scripted() -> ScriptedAdapter:
    """The provider the sample cassette is recorded from: paced like a real one."""
    return ScriptedAdapter(TURNS, first_chunk_s=0.4, between_s=0.05, args_piece=4)


def record(path: Path, agent: SampleAgent = CORRECT, inner: LlmAdapter | None = None) -> Path:
    """Record the correct agent's conversation into ``path`` in virtual time (its timing is the scripted pacing)."""

    async def main() -> None:
        recorder = RecordingAdapter(inner or scripted(), path)
        try:
            outcome = await agent.run(recorder)
            assert outcome == Outcome(EXPECTED_TEXT), outcome
        finally:
            await recorder.aclose()

    with asyncio.Runner(loop_factory=lambda: looptime.new_event_loop(start=0)) as runner:
        runner.run(main())
    return path


__all__: Sequence[str] = [
    "CORRECT",
    "DUPLICATES_TEXT",
    "EXPECTED_TEXT",
    "IGNORES_RETRY_AFTER",
    "NO_IDLE_TIMEOUT",
    "Outcome",
    "RetryAfterGuard",
    "SampleAgent",
    "check",
    "record",
    "scripted",
]
