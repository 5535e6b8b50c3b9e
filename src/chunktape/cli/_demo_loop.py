"""The loop of ``chunktape demo``, offline: record an agent session (``run_agent`` with a tool that fails once),
show it, replay it, run the fault matrix.

Recording and the fault matrix run on an event loop with a virtual clock (sleeps complete at once, the loop's
time jumps ahead), so the scripted pacing, a 429's Retry-After and a 30 s stall are all recorded and honoured
exactly while the demo takes seconds. Only the replay at 10x runs in real time, so it visibly streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from chunktape._cassettes.codec import load_cassette
from chunktape._cassettes.model import Cassette
from chunktape._protocol import GenerateOptions, LlmAdapter, Message
from chunktape._recorder import RecordingAdapter
from chunktape._replayer.adapter import ReplayAdapter
from chunktape._replayer.timing import Timing
from chunktape._report.analysis import summarize
from chunktape.cli._common import console, run_virtual
from chunktape.cli._play import replay_to_console
from chunktape.cli._render import summary_table
from chunktape.faults import STANDARD_FAULTS
from chunktape.harness import (
    ErrorEvent,
    RetryPolicy,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    Transcript,
    TurnEvent,
    collect,
    run_agent,
)
from chunktape.providers._demo import DEMO_AGENT_TURNS, DEMO_PROMPT, DEMO_TOOLS, demo_adapter, demo_tools

__all__ = ["demo_agent", "run_demo"]

MODEL = "deepseek-chat"
POLICY = RetryPolicy(idle_timeout=10.0)
"""The seed's retry table, plus a 10 s idle timeout so a stalled stream is retried rather than waited out."""


# -- a virtual clock ---------------------------------------------------------------------------


# -- the agent -----------------------------------------------------------------------------------


async def demo_agent(adapter: LlmAdapter, policy: RetryPolicy = POLICY, max_turns: int = 6) -> Transcript:
    """The demo agent: ``run_agent`` with the demo's tools (fresh, so the one flaky read fails again)."""
    options = GenerateOptions(
        model=MODEL, messages=[Message(role="user", content=DEMO_PROMPT)], tools=list(DEMO_TOOLS), max_tokens=1024
    )
    return await collect(run_agent(adapter, options, demo_tools(), policy=policy, max_turns=max_turns))


async def _record(path: Path) -> Transcript:
    recorder = RecordingAdapter(demo_adapter(turns=DEMO_AGENT_TURNS), path)
    try:
        return await demo_agent(recorder)
    finally:
        await recorder.aclose()


def _turn_lines(transcript: Transcript) -> list[str]:
    """One line per model turn: what it said or called, and how its tool calls went."""
    lines: list[str] = []
    text: list[str] = []
    calls: list[str] = []
    for event in transcript.events:
        match event:
            case TextEvent():
                text.append(event.text)
            case ErrorEvent() if event.will_retry:
                text.clear()
            case ToolCallEvent():
                calls.append(event.name)
            case TurnEvent():
                said = "".join(text)
                if not calls:
                    lines.append(f"turn {event.turn}: answered: {said!r}")
                else:
                    prefix = f"said {said!r}; " if said else ""
                    lines.append(f"turn {event.turn}: {prefix}called {', '.join(calls)}")
                text, calls = [], []
            case ToolResultEvent(is_error=True):
                lines.append(f"  {event.name}: error {event.result['message']!r}, fed back with is_error")
            case ToolResultEvent():
                lines.append(f"  {event.name}: ok, {len(event.content)} characters fed back")
            case _:
                pass
    return lines


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
    adapter = ReplayAdapter(
        cassette, timing=Timing.recorded(), faults=[fault]
    )  # transient: once; permanent: every call
    loop = asyncio.get_running_loop()
    start = loop.time()
    transcript = await demo_agent(adapter)
    seconds = loop.time() - start
    errors = [event.error for event in transcript.errors]
    last = transcript.done
    metrics = last.metrics if last is not None else None
    retries = metrics.retry_count if metrics is not None else 0
    attempts = metrics.attempts if metrics is not None else 0
    completed = last is not None and last.reason == "stop" and len(transcript.turns) == len(cassette.interactions)
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
        title="the agent loop under each standard fault (transient: fires once; permanent: on every call)",
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


def run_demo(out_dir: Path | None, speed: float) -> None:
    """The ``chunktape demo`` command's loop (``cli/demo.py`` holds its options, and loads this when it runs)."""
    out = console()
    began = time.perf_counter()
    with _folder(out_dir) as folder:
        path = folder / "demo-session.msgpack"
        _step(out, 1, "record: an agent asks, runs tools (one fails once), feeds results back, answers (run_agent)")
        transcript = run_virtual(_record(path))
        for line in _turn_lines(transcript):
            out.print(line, markup=False, soft_wrap=True)
        kept = "" if out_dir is not None else " (a temp folder; keep it with --out DIR)"
        out.print(f"wrote {path}{kept}", markup=False, soft_wrap=True)

        cassette = load_cassette(path)
        _step(out, 2, "show")
        summaries = [summarize(item, index) for index, item in enumerate(cassette.interactions)]
        out.print(summary_table(f"{path.name}", summaries))

        _step(out, 3, f"play: replay with the recorded timing at {speed:g}x")
        asyncio.run(replay_to_console(cassette, out, timing=Timing.recorded(speed=speed)))

        _step(out, 4, "faults: the agent loop against STANDARD_FAULTS")
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
    if out_dir is None:
        out.print("the cassette was in a temp folder, now deleted; keep it with --out DIR", soft_wrap=True)
    else:
        out.print(f"cassette kept: {path.resolve()}", markup=False, soft_wrap=True)
        out.print(f"look at it: chunktape show --timeline {path}", markup=False, soft_wrap=True)
