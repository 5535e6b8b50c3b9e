"""The embedded demo session: a multi-turn, tool-calling conversation with reasoning, fully offline."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chunktape._protocol import TokenUsage, ToolSpec
from chunktape.providers._scripted import ScriptedAdapter, ScriptedToolCall, ScriptedTurn

DEMO_TURNS: tuple[ScriptedTurn, ...] = (
    ScriptedTurn(
        reasoning="The user wants the files in src/. I should list the directory first.",
        text="Let me look at the project files.",
        tool_calls=[ScriptedToolCall(id="call_ls_1", name="list_files", arguments={"path": "src/", "depth": 1})],
        usage=TokenUsage(input_tokens=412, output_tokens=38, cached_input_tokens=128, reasoning_tokens=17),
    ),
    ScriptedTurn(
        reasoning="Two modules. Reading the entry point tells me what the package does.",
        tool_calls=[
            ScriptedToolCall(id="call_read_2", name="read_file", arguments={"path": "src/app/__init__.py"}),
            ScriptedToolCall(id="call_read_3", name="read_file", arguments={"path": "src/app/main.py"}),
        ],
        usage=TokenUsage(input_tokens=530, output_tokens=44, cached_input_tokens=384, reasoning_tokens=15),
    ),
    ScriptedTurn(
        text=(
            "src/ holds one package, app, with an empty __init__.py and main.py, "
            "which starts the HTTP server on port 8080."
        ),
        usage=TokenUsage(input_tokens=801, output_tokens=29, cached_input_tokens=512),
    ),
)


DEMO_PROMPT = "What is in src/?"
"""The user message that starts the demo session."""

DEMO_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="list_files",
        description="List the files in a folder",
        parameters={"type": "object", "properties": {"path": {"type": "string"}, "depth": {"type": "integer"}}},
    ),
    ToolSpec(
        name="read_file",
        description="Read a text file",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
)
"""The tools the demo session offers."""

DEMO_RETRY_TURN = ScriptedTurn(
    text="Reading main.py timed out; let me try again.",
    tool_calls=[ScriptedToolCall(id="call_read_4", name="read_file", arguments={"path": "src/app/main.py"})],
    usage=TokenUsage(input_tokens=688, output_tokens=31, cached_input_tokens=512),
)
DEMO_AGENT_TURNS: tuple[ScriptedTurn, ...] = (DEMO_TURNS[0], DEMO_TURNS[1], DEMO_RETRY_TURN, DEMO_TURNS[2])
"""The demo session as the agent loop plays it: the one read that fails is asked for again."""

DEMO_FILES: dict[str, str] = {
    "src/app/__init__.py": "",
    "src/app/main.py": "import http.server\n\nhttp.server.test(port=8080)\n",
}
"""The project the demo's tools look at."""

DEMO_TOOL_RESULTS: dict[str, str] = {
    "call_ls_1": '["src/app/__init__.py", "src/app/main.py"]',
    "call_read_2": DEMO_FILES["src/app/__init__.py"],
    "call_read_3": DEMO_FILES["src/app/main.py"],
}
"""Canned results by tool call id, for the example cassettes (``scripts/make_example_cassettes.py``)."""


def demo_tools() -> dict[str, Callable[..., Any]]:
    """Fresh demo tools: ``list_files`` and ``read_file`` over ``DEMO_FILES``; the first read of main.py fails."""
    failed: set[str] = set()

    def list_files(path: str, depth: int = 1) -> list[str]:
        return sorted(name for name in DEMO_FILES if name.startswith(path))

    def read_file(path: str) -> str:
        if path.endswith("main.py") and path not in failed:
            failed.add(path)
            raise TimeoutError(f"read timed out: {path}")
        if path not in DEMO_FILES:
            raise FileNotFoundError(f"no such file: {path}")
        return DEMO_FILES[path]

    return {"list_files": list_files, "read_file": read_file}


def demo_adapter(
    *, first_chunk_s: float = 0.4, between_s: float = 0.03, turns: tuple[ScriptedTurn, ...] = DEMO_TURNS
) -> ScriptedAdapter:
    """The demo script with realistic pacing (first chunk after 0.4 s, then every 30 ms)."""
    return ScriptedAdapter(list(turns), first_chunk_s=first_chunk_s, between_s=between_s)
