"""``chunktape demo``: the whole loop offline — record an agent session, show it, replay it, run the fault matrix.

Recording and the fault matrix run on an event loop with a virtual clock (sleeps complete at once, the loop's
time jumps ahead), so the scripted pacing, a 429's Retry-After and a 30 s stall are all recorded and honoured
exactly while the demo takes seconds. Only the replay at 10x runs in real time, so it visibly streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Annotated, Any, TypeVar

import looptime
import msgspec
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from chunktape.cassettes.analysis import summarize
from chunktape.cassettes.codec import load_cassette
from chunktape.cassettes.model import Cassette
from chunktape.cli.common import EXIT_USAGE, CliError, console
from chunktape.cli.play import replay_to_console
from chunktape.cli.render import summary_table
from chunktape.faults import STANDARD_FAULTS, FailFirst
from chunktape.harness import RetryPolicy, Transcript, collect, stream_with_retry
from chunktape.protocol import CallId, GenerateOptions, LlmAdapter, Message, ToolCallBlock
from chunktape.providers.demo import DEMO_PROMPT, DEMO_TOOL_RESULTS, DEMO_TOOLS, demo_adapter
from chunktape.recorder.recording import RecordingAdapter
from chunktape.replayer.replaying import ReplayAdapter
from chunktape.replayer.timing import Timing

__all__ = ["demo", "run_agent"]

_T = TypeVar("_T")
MODEL = "deepseek-chat"
POLICY = RetryPolicy(idle_timeout=10.0)
"""The seed's retry table, plus a 10 s idle timeout so a stalled stream is retried rather than waited out."""


# -- a virtual clock ---------------------------------------------------------------------------


def run_virtual(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on a looptime event loop: every sleep and timeout passes at once in loop time."""
    with asyncio.Runner(loop_factory=lambda: looptime.new_event_loop(start=0)) as runner:
        return runner.run(coro)


# -- the agent -----------------------------------------------------------------------------------


async def run_agent(adapter: LlmAdapter, policy: RetryPolicy = POLICY, max_turns: int = 6) -> list[Transcript]:
    """The demo agent: ask, run the requested tools (canned results), send the results back, until it answers."""
    messages = [Message(role="user", content=DEMO_PROMPT)]
    transcripts: list[Transcript] = []
    for _ in range(max_turns):
        options = GenerateOptions(model=MODEL, messages=messages, tools=list(DEMO_TOOLS), max_tokens=1024)
        transcript = await collect(stream_with_retry(adapter, options, policy))
        transcripts.append(transcript)
        if transcript.done is None or transcript.done.reason != "tool_use":
            break
        calls = [
            ToolCallBlock(id=CallId(call.id), name=call.name, arguments=call.raw_arguments)
            for call in transcript.tool_calls
        ]
        messages = [
            *messages,
            Message(
                role="assistant",
                content=transcript.text or None,
                tool_calls=calls,
                reasoning_content=transcript.reasoning or None,
            ),
            *(Message(role="tool", tool_call_id=call.id, content=DEMO_TOOL_RESULTS.get(call.id, "")) for call in calls),
        ]
    return transcripts


async def _record(path: Path) -> list[Transcript]:
    recorder = RecordingAdapter(demo_adapter(), path)
    try:
        return await run_agent(recorder)
    finally:
        await recorder.aclose()


class FaultRow(msgspec.Struct, frozen=True, kw_only=True):
    fault: str
    outcome: str
    completed: bool
    first_error: str
    retries: int
    attempts: int
    seconds: float


async def _under_fault(cassette: Cassette, fault_id: str) -> FaultRow:
    fault = STANDARD_FAULTS[fault_id]
    adapter = ReplayAdapter(cassette, timing=Timing.recorded(), faults=[FailFirst(n=1, fault=fault)])
    loop = asyncio.get_running_loop()
    start = loop.time()
    transcripts = await run_agent(adapter)
    seconds = loop.time() - start
    errors = [event.error for transcript in transcripts for event in transcript.errors]
    retries = sum(t.done.metrics.retry_count for t in transcripts if t.done is not None and t.done.metrics)
    attempts = sum(t.done.metrics.attempts for t in transcripts if t.done is not None and t.done.metrics)
    last = transcripts[-1].done
    completed = last is not None and last.reason == "stop" and len(transcripts) == len(cassette.interactions)
    first = "-"
    if errors:
        first = f"HTTP {errors[0].status}" if errors[0].status is not None else errors[0].code.value
    if completed:
        outcome = "retried & completed" if retries else "completed"
    elif last is not None and last.error is not None:
        outcome = "error, retries spent" if retries else "error, not retried"
    else:
        outcome = "error"
    return FaultRow(
        fault=fault_id,
        outcome=outcome,
        completed=completed,
        first_error=first,
        retries=retries,
        attempts=attempts,
        seconds=seconds,
    )


async def _fault_matrix(cassette: Cassette) -> list[FaultRow]:
    return [await _under_fault(cassette, fault_id) for fault_id in STANDARD_FAULTS]


def _fault_table(rows: list[FaultRow]) -> Table:
    table = Table(
        title="the reference harness (stream_with_retry) under each standard fault, injected into the first call",
        title_justify="left",
        caption="retry policy: the seed's table, idle timeout 10 s; times are virtual",
        caption_justify="left",
    )
    table.add_column("fault", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("first error", no_wrap=True)
    table.add_column("retries", justify="right")
    table.add_column("attempts", justify="right")
    table.add_column("agent time", justify="right")
    for row in rows:
        table.add_row(
            row.fault,
            Text(row.outcome, style="green" if row.completed else "red"),
            Text(row.first_error),
            str(row.retries),
            str(row.attempts),
            f"{row.seconds:.2f}s",
        )
    return table


@contextlib.contextmanager
def _folder(out: Path | None) -> Iterator[Path]:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="chunktape-demo-") as folder:
        yield Path(folder)


def _step(out: Console, number: int, text: str) -> None:
    out.print()
    out.rule(f"[bold]{number}. {text}", align="left")


def demo(
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Keep the demo cassette in this folder (default: a temp folder).")
    ] = None,
    speed: Annotated[float, typer.Option("--speed", help="Replay speed for step 3.")] = 10.0,
) -> None:
    """Run the whole record, show, replay and fault loop offline, in seconds.

    On the embedded ScriptedAdapter: record a tool-calling agent session, show it, replay it at 10x, and run
    the reference harness against every standard fault.

    Example: chunktape demo --out demo-out
    """
    if not speed > 0:
        raise CliError(f"--speed must be > 0, got {speed:g}", EXIT_USAGE)
    out = console()
    began = time.perf_counter()
    with _folder(out_dir) as folder:
        path = folder / "demo-session.msgpack"
        _step(out, 1, "record: an agent asks, calls tools, gets results back, answers (ScriptedAdapter)")
        transcripts = run_virtual(_record(path))
        for number, transcript in enumerate(transcripts, 1):
            tools = ", ".join(call.name for call in transcript.tool_calls)
            what = f"called {tools}; results fed back" if tools else f"answered: {transcript.text!r}"
            out.print(f"turn {number}: {what}", markup=False, soft_wrap=True)
        kept = "" if out_dir is not None else " (a temp folder; keep it with --out DIR)"
        out.print(f"wrote {path}{kept}", markup=False, soft_wrap=True)

        cassette = load_cassette(path)
        _step(out, 2, "show")
        summaries = [summarize(item, index) for index, item in enumerate(cassette.interactions)]
        out.print(summary_table(f"{path.name}", summaries))

        _step(out, 3, f"play: replay with the recorded timing at {speed:g}x")
        asyncio.run(replay_to_console(cassette, out, timing=Timing.recorded(speed=speed)))

        _step(out, 4, "faults: the reference harness against STANDARD_FAULTS")
        rows = run_virtual(_fault_matrix(cassette))
        out.print(_fault_table(rows))

    completed = sum(row.completed for row in rows)
    retried = sum(row.completed and row.retries > 0 for row in rows)
    chunks = sum(item.chunks for item in summaries)
    out.print(
        f"demo done in {time.perf_counter() - began:.1f}s: recorded {len(summaries)} interactions ({chunks} chunks), "
        f"replayed at {speed:g}x, {len(rows)} faults: {completed} completed ({retried} after retries), "
        f"{len(rows) - completed} ended in an error",
        style="bold",
        soft_wrap=True,
    )
