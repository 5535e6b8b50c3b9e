"""Test helpers for faults: a ReplayAdapter over scripted turns with faults, and a minimal agent loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence

from chunktape import Cassette, Completed, RecordedRequest, ReplayAdapter, Timing
from chunktape._protocol import GenerateOptions, LlmAdapter, Message, StreamChunk, ToolCallBlock
from chunktape.faults import Fault
from chunktape.harness import RetryPolicy, StreamObserver, Transcript, collect, stream_with_retry
from chunktape.providers._demo import DEMO_TURNS
from chunktape.providers._scripted import ScriptedTurn, script_chunks
from helpers import interaction_of


async def from_list(chunks: Iterable[StreamChunk], *, between_s: float = 0.0) -> AsyncIterator[StreamChunk]:
    """A plain async generator over prebuilt chunks (sleeping ``between_s`` before each)."""
    for chunk in chunks:
        await asyncio.sleep(between_s)
        yield chunk


def turns_cassette(turns: Sequence[ScriptedTurn], *, first_chunk_s: float, between_s: float) -> Cassette:
    """A cassette holding one interaction per scripted turn, paced like a ScriptedAdapter would be."""
    request = RecordedRequest.from_options(first_request())
    start, gap = round(first_chunk_s * 1e9), round(between_s * 1e9)
    interactions = []
    for turn in turns:
        chunks = script_chunks(turn)
        ends = Completed(t_ns=start + gap * (len(chunks) - 1))  # with the last chunk
        interactions.append(interaction_of(chunks, ends, request=request, gap_ns=gap, start_ns=start))
    return Cassette(interactions=interactions)


def _in_order(live: RecordedRequest, recorded: RecordedRequest) -> bool:
    return True


class FaultyAdapter(ReplayAdapter):
    """A real ReplayAdapter over scripted turns, matched in recorded order whatever the request, with faults.

    Tests of the harness and of injection run through the same replay path users get.
    """

    def __init__(
        self,
        turns: Sequence[ScriptedTurn] = DEMO_TURNS,
        faults: Iterable[Fault | str] = (),
        *,
        first_chunk_s: float = 0.1,
        between_s: float = 0.01,
    ) -> None:
        tape = turns_cassette(turns, first_chunk_s=first_chunk_s, between_s=between_s)
        super().__init__(tape, timing=Timing.recorded(), faults=faults, match_on=_in_order, name="faulty")

    @property
    def fault_ids(self) -> list[str | None]:
        return self.injected


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
