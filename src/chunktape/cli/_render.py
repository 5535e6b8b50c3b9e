"""How streams and cassettes look in a terminal: a live chunk printer and the per-interaction table."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from chunktape._errors import LlmError
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    Finish,
    ReasoningDelta,
    ReplyBuilder,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from chunktape._report.analysis import InteractionSummary

__all__ = ["ChunkPrinter", "format_usage", "printable", "printable_json", "summary_table", "tool_result_line"]

_CONTROLS = (*range(0x20), 0x7F, *range(0x80, 0xA0))
_SHOWN = {code: f"\\x{code:02x}" for code in _CONTROLS if code not in (0x09, 0x0A)}
_JSON_ESCAPED = {code: f"\\u{code:04x}" for code in _CONTROLS if code >= 0x7F}


def printable(text: str) -> str:
    """``text`` safe for a terminal: every control character but newline and tab shown as ``\\xNN``, so recorded
    text can neither move the cursor, clear the screen, retitle the window nor set the clipboard (OSC 52)."""
    return text.translate(_SHOWN)


def printable_json(text: str) -> str:
    """JSON text safe for a terminal and equal in meaning: the controls msgspec writes raw (DEL and C1, which
    some terminals obey) as ``\\u`` escapes; it escapes the others itself."""
    return text.translate(_JSON_ESCAPED)


def format_usage(usage: TokenUsage | None) -> str:
    if usage is None:
        return "-"
    text = f"{usage.input_tokens} in"
    if usage.cached_input_tokens:
        text += f" ({usage.cached_input_tokens} cached)"
    text += f" / {usage.output_tokens} out"
    if usage.reasoning_tokens:
        text += f" ({usage.reasoning_tokens} reasoning)"
    return text


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def tool_result_line(name: str, content: str, *, is_error: bool = False) -> str:
    """How a tool's result (what the model received) is shown after its tool-call turn."""
    return f"  -> {name}{' (error)' if is_error else ''}: {content}"


class ChunkPrinter:
    """Prints a stream as it arrives: text plain, reasoning dimmed, tool calls, usage and how it ended.

    ``reply`` is the fold of what was printed, also when the stream broke off mid-way.
    """

    def __init__(self, console: Console) -> None:
        self.console = console
        self._column = 0
        self.reply = ReplyBuilder()

    def _write(self, text: str, style: str = "") -> None:
        text = printable(text)
        self.console.print(Text(text, style=style), end="", soft_wrap=True)
        if text:
            self._column = 0 if text.endswith("\n") else self._column + len(text)

    def _newline(self) -> None:
        if self._column:
            self._write("\n")

    def feed(self, chunk: StreamChunk) -> None:
        self.reply.feed(chunk)
        match chunk:
            case BlockStart(block_type="reasoning"):
                self._newline()
                self._write("thinking: ", "dim italic")
            case BlockStart(block_type="tool-call"):
                self._newline()
            case BlockStart():
                self._newline()
            case TextDelta():
                self._write(chunk.text)
            case ReasoningDelta():
                self._write(chunk.text, "dim")
            case ToolCallDelta():
                if chunk.name is not None:
                    self._write(f"→ {chunk.name}(", "bold cyan")
                self._write(chunk.arguments_delta, "cyan")
            case BlockEnd():
                if type(chunk.block) is ToolCallBlock:
                    self._write(")", "bold cyan")
                    self._write(f"  [{chunk.block.id}]", "dim")
                self._newline()
            case UsageChunk():
                self._newline()
                self._write(f"usage: {format_usage(chunk.usage)}\n", "dim")
            case Finish():
                self._newline()
                detail = f" ({chunk.reason.detail})" if chunk.reason.detail else ""
                self._write(f"finish: {chunk.reason.kind}{detail}\n", "green")

    def error(self, error: LlmError) -> None:
        self._newline()
        self._write(f"error: {error}\n", "bold red")

    def note(self, text: str) -> None:
        self._newline()
        self._write(f"{text}\n", "yellow")

    def done(self) -> None:
        self._newline()


def summary_table(title: str, summaries: Sequence[InteractionSummary]) -> Table:
    """The ``chunktape show`` table: one row per interaction (recorded text as ``Text``, never as markup)."""
    table = Table(title=Text(printable(title)), title_justify="left", expand=False)
    table.add_column("#", justify="right")
    table.add_column("model")
    table.add_column("last user message", max_width=32, overflow="ellipsis", no_wrap=True)
    table.add_column("chunks", justify="right")
    table.add_column("first chunk", justify="right")
    table.add_column("duration", justify="right")
    table.add_column("tokens in/out", justify="right")
    table.add_column("outcome")
    for item in summaries:
        failed = "raised" in item.outcome or item.outcome.startswith("VIOLATES")
        style = "green" if item.outcome.startswith("completed") else "red" if failed else "yellow"
        attempt = f" (attempt {item.attempt})" if item.attempt > 1 else ""
        table.add_row(
            str(item.index),
            Text(printable(item.model)),
            Text(printable(item.last_user.replace("\n", " "))),
            str(item.chunks),
            _seconds(item.first_chunk_s),
            _seconds(item.duration_s),
            "-" if item.usage is None else f"{item.usage.input_tokens}/{item.usage.output_tokens}",
            Text(printable(item.outcome) + attempt, style=style),
        )
    return table
