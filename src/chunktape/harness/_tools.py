"""Running the tool calls of a turn: ``ToolRunner`` turns ``ToolCallEvent``s into ``ToolResultEvent``s.

A tool is a plain callable, sync or async, called with the call's JSON arguments as keyword arguments.
Whatever goes wrong inside it (it raises, its name is unknown, its arguments do not fit, its result cannot be
JSON-encoded) becomes an ``is_error`` result the model sees, never a crash of the agent: the seed's
``{"error": true, "message": "Permission denied: /etc/passwd"}``.

Sync tools run on the event loop (so they run in a fixed order and in virtual time under ``looptime``); wrap
blocking work in ``asyncio.to_thread`` yourself. ``run_agent`` executes every call through one
``ToolRunner``, so a subclass that overrides ``run`` (e.g. one that replays recorded results) swaps in.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import msgspec

from chunktape._abort import AbortSignal
from chunktape.harness._events import ToolCallEvent, ToolResultEvent

__all__ = ["Tool", "ToolRunner", "tool_content", "tool_error"]

Tool: TypeAlias = Callable[..., Any]
"""A tool implementation: ``tool(**arguments)``, returning the result or an awaitable of it."""

_json = msgspec.json.Encoder()


def tool_content(result: Any) -> str:
    """The text a tool message carries: a str as it is, anything else as compact JSON (msgspec)."""
    return result if isinstance(result, str) else _json.encode(result).decode()


def tool_error(call: ToolCallEvent, message: str) -> ToolResultEvent:
    """The ``is_error`` result the model sees for a call that failed: the seed's ``{"error": true, "message": ...}``."""
    result = {"error": True, "message": message}
    return ToolResultEvent(
        tool_call_id=call.id, name=call.name, result=result, is_error=True, content=tool_content(result)
    )


class ToolRunner:
    """Executes tool calls by name; one call at a time with ``run``, the calls of a turn with ``run_turn``."""

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self.tools = dict(tools)

    async def run(self, call: ToolCallEvent) -> ToolResultEvent:
        """Run one call; every failure of the tool is returned as an ``is_error`` result."""
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(sorted(self.tools)) or "none"
            return tool_error(call, f"unknown tool {call.name!r} (available: {available})")
        try:
            result = tool(**call.arguments)
            if inspect.isawaitable(result):
                result = await result
            content = tool_content(result)
        except Exception as exc:  # a failing tool is a result for the model, not a crash
            return tool_error(call, str(exc) or type(exc).__name__)
        return ToolResultEvent(tool_call_id=call.id, name=call.name, result=result, content=content)

    async def run_turn(
        self, calls: Sequence[ToolCallEvent], signal: AbortSignal | None = None
    ) -> list[ToolResultEvent | None]:
        """Run the calls of one turn concurrently; their results in call order.

        When ``signal`` aborts first, the calls still running are cancelled and their slots are None; the
        calls that finished stay done (their side effects are not rolled back).
        """
        tasks = [asyncio.ensure_future(self.run(call)) for call in calls]
        try:
            await _settle(tasks, signal)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # let cancelled tools run their cleanup
        return [task.result() if not task.cancelled() else None for task in tasks]


async def _settle(tasks: Sequence[asyncio.Future[ToolResultEvent]], signal: AbortSignal | None) -> None:
    """Wait until every task is done, or until ``signal`` aborts."""
    everything = asyncio.gather(*tasks, return_exceptions=True)
    if signal is None:
        await everything
        return
    aborted = asyncio.get_running_loop().create_future()

    def on_abort(_reason: object) -> None:
        if not aborted.done():
            aborted.set_result(None)

    remove = signal.add_listener(on_abort)
    try:
        await asyncio.wait([everything, aborted], return_when=asyncio.FIRST_COMPLETED)
    finally:
        remove()
        aborted.cancel()
