"""The seed's agent loop: the model asks for tools, the loop runs them, feeds the results back, repeats.

``run_agent`` drives ``stream_with_retry`` turn by turn. After a model turn that made tool calls, the calls
run through one ``ToolRunner`` (concurrently, results in call order), each yields a ``ToolResultEvent``, and
the assistant turn plus one ``tool`` message per call go into the history of the next turn. The run ends when
a turn makes no tool calls, when it fails, or after ``max_turns`` turns (the last turn's calls are then not
run: nobody would read their results), always with exactly one ``DoneEvent`` for the whole run.

**Cancellation.** When ``options.signal`` aborts, mid-stream or while tools run, the run ends with
``DoneEvent(reason="cancel")``. Tools already run stay run (the seed's FAQ: a cancelled stream rolls nothing
back): a call that finished before the abort still yields its ``ToolResultEvent``; calls still running are
cancelled. Cancelling the consuming task or closing the generator cancels running tools and propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Mapping

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import GenerateOptions, LlmAdapter, Message
from chunktape.harness._events import (
    DoneEvent,
    DoneReason,
    HarnessEvent,
    ReasoningEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEvent,
    turn_reply,
)
from chunktape.harness._metrics import StreamMetrics, StreamObserver
from chunktape.harness._retry import RetryPolicy, stream_with_retry
from chunktape.harness._tools import Tool, ToolRunner

__all__ = ["run_agent"]


def run_agent(
    adapter: LlmAdapter,
    options: GenerateOptions,
    tools: Mapping[str, Tool] | ToolRunner,
    *,
    policy: RetryPolicy | None = None,
    max_turns: int = 10,
    on_event: StreamObserver | None = None,
    metrics: StreamMetrics | None = None,
) -> AsyncGenerator[HarnessEvent, None]:
    """Run the agent loop from ``options`` (its messages are the start of the history); yields every event.

    ``tools`` maps tool names to callables (or is a ``ToolRunner``); ``options.tools`` are the specs the
    model sees. ``metrics`` (optional) adds up over the turns as the run goes; the final ``DoneEvent`` carries
    it, and its ``usage`` is the sum over the turns. ``on_event`` observes each turn's ``stream_with_retry``
    (so ``llm/stream/end`` fires once per turn).
    """
    if type(max_turns) is not int or max_turns < 1:
        raise LlmError(f"max_turns must be an integer >= 1, got {max_turns!r}", ErrorCode.INVALID_CONFIG)
    runner = tools if isinstance(tools, ToolRunner) else ToolRunner(tools)
    return _agent(adapter, options, runner, policy, max_turns, on_event, metrics or StreamMetrics())


async def _agent(
    adapter: LlmAdapter,
    options: GenerateOptions,
    runner: ToolRunner,
    policy: RetryPolicy | None,
    max_turns: int,
    on_event: StreamObserver | None,
    total: StreamMetrics,
) -> AsyncGenerator[HarnessEvent, None]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    signal = options.signal
    history = list(options.messages)

    def finish(last: DoneEvent, reason: DoneReason | None = None, error: LlmError | None = None) -> DoneEvent:
        total.total_duration = loop.time() - started
        return DoneEvent(
            reason=reason or last.reason,
            usage=total.token_usage,
            error=error or last.error,
            finish=last.finish,
            metrics=total,
        )

    for turn in range(1, max_turns + 1):
        turn_metrics = StreamMetrics()
        output: list[TextEvent | ReasoningEvent] = []
        calls: list[ToolCallEvent] = []
        done: DoneEvent | None = None
        request = msgspec.structs.replace(options, messages=history)
        turn_events = stream_with_retry(adapter, request, policy, on_event=on_event, metrics=turn_metrics)
        try:
            async with contextlib.aclosing(turn_events):
                async for event in turn_events:
                    match event:
                        case DoneEvent():
                            done = event
                            continue  # the run's own DoneEvent comes last
                        case TextEvent() | ReasoningEvent():
                            output.append(event)
                        case ToolCallEvent():
                            calls.append(event)
                        case _:
                            pass
                    yield event
        finally:
            total.add_turn(turn_metrics)
        assert done is not None, "stream_with_retry always ends with a DoneEvent"
        yield TurnEvent(turn=turn, done=done)
        if done.reason in ("error", "cancel") or not calls or turn == max_turns:
            yield finish(done)
            return
        results = await runner.run_turn(calls, signal)
        for result in results:
            if result is not None:
                yield result
        if signal is not None and signal.aborted:
            yield finish(done, "cancel", signal.error())
            return
        # A retried attempt's output is superseded by the next attempt's (see harness.events): keep the last.
        output = [event for event in output if event.attempt == turn_metrics.attempts]
        history += _turn_messages(output, calls, done, results)
    raise AssertionError("unreachable: the last turn always returns")  # pragma: no cover


def _turn_messages(
    output: list[TextEvent | ReasoningEvent],
    calls: list[ToolCallEvent],
    done: DoneEvent,
    results: list[ToolResultEvent | None],
) -> list[Message]:
    """The assistant turn with its tool calls, then one ``tool`` message per call, in call order; its reasoning in
    the form the provider takes back (the finished attempt's blocks: Anthropic's signed thinking)."""
    reply = turn_reply([*output, *calls], done)
    if done.reply is not None:
        reply = msgspec.structs.replace(reply, blocks=done.reply.blocks, reasoning_items=done.reply.reasoning_items)
    tool_messages = [
        Message(role="tool", tool_call_id=result.tool_call_id, content=result.content)
        for result in results
        if result is not None
    ]
    return [reply.message(), *tool_messages]
