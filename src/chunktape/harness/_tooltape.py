"""Tool executions on tape: record them beside the model calls, answer them from the recording, or check real
tools against it.

Three ``ToolRunner``s, one per need (``CassetteSession.tools()`` picks the one for its mode):

- ``RecordingToolRunner`` runs the real tools and hands each execution (name, arguments, result or error,
  duration) to a sink, the session's recorder, as a ``ToolRun``.
- ``ReplayingToolRunner`` answers each call from the recording and calls no tool (offline, no side effects).
  A call the recording lacks raises ``CASSETTE_MISMATCH`` naming the tool and its arguments (or goes to a
  ``fallback`` runner, as ``new_episodes`` records it).
- ``VerifyingToolRunner`` runs the real tools and compares each result with the recording. A divergence is
  appended to ``divergences`` and warned as a ``ToolDivergenceWarning``; the model is still given the recorded
  result, so the replayed model calls that follow keep matching the recording.

A call is answered by the first unplayed recorded run with the same tool name and arguments (one with the same
call id first), so identical calls replay in recorded order, as identical requests do.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from chunktape._cassettes.model import MAX_GAP_NS, ToolRun
from chunktape._errors import ErrorCode, LlmError
from chunktape.harness._events import ToolCallEvent, ToolResultEvent
from chunktape.harness._tools import Tool, ToolRunner

__all__ = [
    "RecordingToolRunner",
    "ReplayingToolRunner",
    "ToolDivergence",
    "ToolDivergenceWarning",
    "ToolTape",
    "VerifyingToolRunner",
    "tool_run",
]

_json = msgspec.json.Encoder(order="sorted")


def tool_run(call: ToolCallEvent, result: ToolResultEvent, duration_ns: int = 0) -> ToolRun:
    """The ``ToolRun`` that records ``call`` answered by ``result``; the result is kept as JSON."""
    return ToolRun(
        name=call.name,
        arguments=call.arguments,
        result=msgspec.to_builtins(result.result),
        content=result.content,
        is_error=result.is_error,
        duration_ns=duration_ns,
        call_id=call.id,
    )


def _described(call: ToolCallEvent) -> str:
    return f"{call.name}({_json.encode(call.arguments).decode()})"


class ToolTape:
    """The recorded tool runs of one cassette; each answers one call, in recorded order."""

    def __init__(self, runs: Sequence[ToolRun], where: str = "the cassette") -> None:
        self.runs = list(runs)
        self.played = [False] * len(self.runs)
        self.where = where

    def take(self, call: ToolCallEvent) -> ToolRun | None:
        """The recorded run that answers ``call`` (now used up), or None when the recording has none left."""
        matches = [
            index
            for index, run in enumerate(self.runs)
            if not self.played[index] and run.name == call.name and run.arguments == call.arguments
        ]
        if not matches:
            return None
        index = next((index for index in matches if self.runs[index].call_id == call.id), matches[0])
        self.played[index] = True
        return self.runs[index]

    def miss(self, call: ToolCallEvent) -> LlmError:
        """``CASSETTE_MISMATCH`` for a call the recording cannot answer, showing what it holds for that tool."""
        same = [run for index, run in enumerate(self.runs) if run.name == call.name and not self.played[index]]
        if same:
            recorded = "; ".join(f"{run.name}({_json.encode(run.arguments).decode()})" for run in same[:3])
            held = f"unplayed recorded runs of {call.name!r}: {recorded}"
        elif any(run.name == call.name for run in self.runs):
            held = f"every recorded run of {call.name!r} was already played"
        else:
            names = ", ".join(sorted({run.name for run in self.runs})) or "none"
            held = f"no recorded run of {call.name!r} (recorded tools: {names})"
        return LlmError(
            f"tool call {_described(call)} is not in {self.where}: {held}",
            ErrorCode.CASSETTE_MISMATCH,
            hint="record the agent run again with its real tools (e.g. --tape-mode all)",
        )

    def unplayed(self) -> list[ToolRun]:
        return [run for index, run in enumerate(self.runs) if not self.played[index]]


def _answer(call: ToolCallEvent, run: ToolRun) -> ToolResultEvent:
    return ToolResultEvent(
        tool_call_id=call.id, name=call.name, result=run.result, is_error=run.is_error, content=run.content
    )


class RecordingToolRunner(ToolRunner):
    """Runs the real tools and passes each finished execution to ``record`` (a cancelled one is not recorded)."""

    def __init__(self, tools: Mapping[str, Tool], record: Callable[[ToolRun], object]) -> None:
        super().__init__(tools)
        self.record = record

    async def run(self, call: ToolCallEvent) -> ToolResultEvent:
        loop = asyncio.get_running_loop()
        started = loop.time()
        result = await super().run(call)
        self.record(tool_run(call, result, round((loop.time() - started) * 1e9)))
        return result


class ReplayingToolRunner(ToolRunner):
    """Answers every call from ``tape`` and runs no tool; a call not on tape goes to ``fallback`` or raises.

    ``time_scale`` > 0 makes each answer take its recorded duration times that (seconds per recorded ns, e.g.
    ``1e-9 / speed``), on ``asyncio.sleep``, so timeouts around tools replay in virtual time; 0 answers at once.
    """

    def __init__(self, tape: ToolTape, fallback: ToolRunner | None = None, *, time_scale: float = 0.0) -> None:
        super().__init__({})
        self.tape = tape
        self.fallback = fallback
        self.time_scale = time_scale

    async def run(self, call: ToolCallEvent) -> ToolResultEvent:
        run = self.tape.take(call)
        if run is not None:
            if self.time_scale > 0 and run.duration_ns > 0:
                await asyncio.sleep(min(run.duration_ns, MAX_GAP_NS) * self.time_scale)
            return _answer(call, run)
        if self.fallback is not None:
            return await self.fallback.run(call)
        raise self.tape.miss(call)


class ToolDivergenceWarning(UserWarning):
    """A real tool's result differs from the recorded one (or the recording lacks the call)."""


class ToolDivergence(msgspec.Struct, frozen=True, kw_only=True):
    """Where a real tool disagreed with the recording: the call, what was recorded (None: nothing), what it gave."""

    name: str
    arguments: dict[str, Any]
    recorded: ToolRun | None
    actual: ToolResultEvent

    def __str__(self) -> str:
        call = f"{self.name}({_json.encode(self.arguments).decode()})"
        if self.recorded is None:
            return f"tool call {call} is not in the recording; the real tool returned {self.actual.content!r}"
        error = (
            f" (is_error {self.recorded.is_error} recorded, {self.actual.is_error} now)"
            if self.recorded.is_error != self.actual.is_error
            else ""
        )
        return (
            f"tool call {call} diverged from the recording: recorded {self.recorded.content!r}, "
            f"the real tool returned {self.actual.content!r}{error}"
        )


class VerifyingToolRunner(ToolRunner):
    """Runs the real tools, compares each result with ``tape`` and reports divergences (list and warning).

    The model gets the recorded result when there is one (so a replay stays on its recording), else the real one.
    """

    def __init__(
        self, tools: Mapping[str, Tool], tape: ToolTape, divergences: list[ToolDivergence] | None = None
    ) -> None:
        super().__init__(tools)
        self.tape = tape
        self.divergences: list[ToolDivergence] = [] if divergences is None else divergences
        """Every divergence found so far, in the order the calls finished."""

    async def run(self, call: ToolCallEvent) -> ToolResultEvent:
        actual = await super().run(call)
        recorded = self.tape.take(call)
        if recorded is None or (recorded.content, recorded.is_error) != (actual.content, actual.is_error):
            divergence = ToolDivergence(name=call.name, arguments=call.arguments, recorded=recorded, actual=actual)
            self.divergences.append(divergence)
            warnings.warn(str(divergence), ToolDivergenceWarning, stacklevel=2)
        return actual if recorded is None else _answer(call, recorded)
