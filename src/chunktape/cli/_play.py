"""``chunktape play``: replay a cassette to the terminal with its timing, optionally under a fault."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, NamedTuple, Unpack

import typer
from rich.console import Console
from rich.text import Text

from chunktape._cassettes.model import Cancelled, Cassette, Completed
from chunktape._errors import ErrorCode, LlmError, ProtocolViolation
from chunktape._protocol import aclose_stream
from chunktape._replayer.adapter import ReplayAdapter
from chunktape._replayer.options import ReplayKeywords, ReplayOptions
from chunktape._replayer.timing import Timing
from chunktape._report.analysis import summarize
from chunktape._validation import StreamValidator
from chunktape.cli._common import (
    EXIT_FAILED,
    EXIT_USAGE,
    CliError,
    ShowSecrets,
    console,
    load,
    parse_fault_option,
    run_virtual,
    shown,
    timing_option,
)
from chunktape.cli._render import ChunkPrinter, printable, tool_result_line

__all__ = ["Played", "play", "replay_to_console"]


class Played(NamedTuple):
    """What a replay to the terminal met: interactions that ended with an error, and those that broke a rule."""

    errors: int
    violations: int


async def replay_to_console(
    cassette: Cassette,
    out: Console,
    *,
    replay_options: ReplayOptions | None = None,
    first_index: int = 0,
    **replay: Unpack[ReplayKeywords],
) -> Played:
    """Replay every interaction of ``cassette`` through a ``ReplayAdapter``, printing each as it streams.

    Each interaction gets its own adapter (and fault plan, so a transient fault fires on each interaction once),
    so each plays exactly as recorded. Every stream goes through a ``StreamValidator``: a protocol violation
    stops that interaction and is printed (it would fail a consumer). The tool executions recorded after an
    interaction (an agent run's) are shown after it, as the model received them.
    """
    settings = ReplayOptions.of(replay_options, **replay)
    errors = violations = 0
    for offset, interaction in enumerate(cassette.interactions):
        index = first_index + offset
        summary = summarize(interaction, index)
        last = summary.last_user.replace("\n", " ")
        excerpt = last if len(last) <= 60 else last[:57] + "..."
        out.rule(Text(printable(f"#{index} {summary.model} · {excerpt!r}")), align="left", style="blue")
        adapter = ReplayAdapter(Cassette(meta=cassette.meta, interactions=[interaction]), replay_options=settings)
        printer = ChunkPrinter(out)
        validator = StreamValidator(require_finish=type(interaction.outcome) is Completed)
        try:
            stream = adapter.stream(interaction.request.to_options())
            try:
                async for chunk in stream:
                    validator.feed(chunk)
                    printer.feed(chunk)
            finally:
                await aclose_stream(stream)  # a violation stops the replay of this interaction
            validator.close()
        except ProtocolViolation as violation:
            violations += 1
            printer.error(violation)
        except LlmError as error:
            outcome = interaction.outcome
            if error.code is ErrorCode.CASSETTE_EXHAUSTED and type(outcome) is Cancelled and not adapter.injected[0]:
                printer.note(f"the recording was cut short here ({outcome.reason or 'cancelled'})")
            else:
                errors += 1
                printer.error(error)
        printer.done()
        if adapter.injected and adapter.injected[0] is not None:
            printer.note(f"(fault injected: {adapter.injected[0]})")
        for run in cassette.tool_runs:
            if run.after_interaction == index:
                out.print(tool_result_line(run.name, run.content, is_error=run.is_error), style="dim", markup=False)
    return Played(errors=errors, violations=violations)


def play(
    cassette: Annotated[Path, typer.Argument(help="The cassette to replay.", show_default=False)],
    speed: Annotated[
        float | None, typer.Option("--speed", help="Replay the recorded timing this many times faster.")
    ] = None,
    instant: Annotated[
        bool, typer.Option("--instant", help="Replay without any delay (a fault's stall or latency included).")
    ] = False,
    fault: Annotated[
        list[str] | None,
        typer.Option("--fault", "-f", help="Inject a fault: a standard fault id (http-429, ...) or a JSON spec."),
    ] = None,
    interaction: Annotated[
        int | None, typer.Option("--interaction", "-n", help="Replay only this interaction (0-based).")
    ] = None,
    show_secrets: ShowSecrets = False,
) -> None:
    """Replay a cassette to the terminal with its recorded timing.

    Shows text, reasoning (dimmed), tool calls, the recorded tool results, usage and how each stream ended.
    Credentials are masked, also those the cassette was allowed to keep, unless --show-secrets. A stream that
    breaks a protocol rule is flagged and the exit code is 1. A fault follows the rule of chunktape.faults: a
    transient one fires once per interaction, a permanent one (http-401, http-400) on every call.

    Example: chunktape play cassettes/demo-session.msgpack --speed 4 --fault disconnect-mid-tool-call
    """
    loaded = load(cassette)
    options = ReplayOptions(
        timing=timing_option(speed, instant, Timing.recorded()), faults=parse_fault_option(fault or [])
    )
    first = 0
    if interaction is not None:
        count = len(loaded.interactions)
        if not 0 <= interaction < count:
            raise CliError(f"--interaction {interaction}: {cassette} has interactions 0 to {count - 1}", EXIT_USAGE)
        loaded = Cassette(meta=loaded.meta, interactions=[loaded.interactions[interaction]], tool_runs=loaded.tool_runs)
        first = interaction
    replay = replay_to_console(shown(loaded, show_secrets), console(), replay_options=options, first_index=first)
    # --instant: on a virtual-time loop, so a fault's stall or latency takes no wall time either.
    played = run_virtual(replay) if instant else asyncio.run(replay)
    if played.violations:
        raise typer.Exit(EXIT_FAILED)
