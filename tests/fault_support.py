"""Test helpers for faults: a replay-like adapter over scripted turns that applies a FaultPlan, and an agent loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence

from chunktape import abort
from chunktape.errors import ErrorCode, LlmError
from chunktape.faults import Fault
from chunktape.harness import RetryPolicy, StreamObserver, Transcript, collect, stream_with_retry
from chunktape.protocol import GenerateOptions, LlmAdapter, Message, StreamChunk, ToolCallBlock
from chunktape.providers.demo import DEMO_TURNS
from chunktape.providers.scripted import ScriptedTurn, script_chunks
from chunktape.replayer.injection import FaultPlan


async def from_list(chunks: Iterable[StreamChunk], *, between_s: float = 0.0) -> AsyncIterator[StreamChunk]:
    """A plain async generator over prebuilt chunks (sleeping ``between_s`` before each)."""
    for chunk in chunks:
        await asyncio.sleep(between_s)
        yield chunk


class FaultyAdapter(LlmAdapter):
    """Stands in for ReplayAdapter: serves recorded turns in order and applies a FaultPlan the documented way.

    ``select`` -> ``before_stream`` -> ``wrap`` the timed stream; a turn is reserved when the call starts and
    released when ``consumes_interaction`` is False (at once, or after an abandoned stall), so a retry
    replays it.
    """

    def __init__(
        self,
        turns: Sequence[ScriptedTurn] = DEMO_TURNS,
        faults: Iterable[Fault | str] = (),
        *,
        first_chunk_s: float = 0.1,
        between_s: float = 0.01,
    ) -> None:
        self.turns = list(turns)
        self.plan = FaultPlan(faults)
        self.position = 0
        self.first_chunk_s = first_chunk_s
        self.between_s = between_s
        self.call_times: list[float] = []
        self.fault_ids: list[str | None] = []

    @property
    def name(self) -> str:
        return "faulty"

    @property
    def calls(self) -> int:
        return len(self.call_times)

    async def _timed(self, turn: ScriptedTurn, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        for position, chunk in enumerate(script_chunks(turn)):
            await abort.sleep(self.first_chunk_s if position == 0 else self.between_s, options.signal)
            yield chunk

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        self.call_times.append(asyncio.get_running_loop().time())
        active = self.plan.select(options)
        self.fault_ids.append(None if active is None else active.fault_id)
        if active is not None:
            active.before_stream()
        if self.position >= len(self.turns):
            raise LlmError(f"call #{self.calls}: every turn was played", ErrorCode.CASSETTE_EXHAUSTED)
        turn = self.turns[self.position]
        reserved = active is None or active.consumes_interaction
        if reserved:
            self.position += 1
        chunks = self._timed(turn, options)
        if active is not None:
            chunks = active.wrap(chunks, options.signal)
        try:
            async with contextlib.aclosing(chunks) as closing:  # type: ignore[type-var]
                async for chunk in closing:
                    yield chunk
        finally:
            if reserved and active is not None and not active.consumes_interaction:
                self.position -= 1  # abandoned during a stall: the retry replays the interaction


def first_request() -> GenerateOptions:
    return GenerateOptions(model="demo-model", messages=[Message(role="user", content="What is in src/?")])


async def run_agent(
    adapter: LlmAdapter,
    policy: RetryPolicy | None = None,
    *,
    max_turns: int = 5,
    on_event: StreamObserver | None = None,
) -> list[Transcript]:
    """A minimal agent loop: stream, run the tool calls (fake results), send them back, until not tool_use."""
    options = first_request()
    transcripts: list[Transcript] = []
    for _ in range(max_turns):
        transcript = await collect(stream_with_retry(adapter, options, policy, on_event=on_event))
        transcripts.append(transcript)
        assert transcript.done is not None
        if transcript.done.reason != "tool_use":
            break
        calls = [
            ToolCallBlock(id=call.id, name=call.name, arguments=call.raw_arguments)  # type: ignore[arg-type]
            for call in transcript.tool_calls
        ]
        messages = [
            *options.messages,
            Message(role="assistant", content=transcript.text or None, tool_calls=calls),
            *(Message(role="tool", tool_call_id=call.id, content=f"result of {call.name}") for call in calls),
        ]
        options = GenerateOptions(model=options.model, messages=messages)
    return transcripts
