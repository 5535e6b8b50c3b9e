"""``chunktape show --timeline``: each interaction's timing drawn in a terminal, from ``_report.timeline``.

The full form gives an interaction a few rows on its own time scale (0 to its end): the chunks as a density
strip (long gaps shaded), one row per block type with each block's span, and a line of what happened when. The
compact form gives it one line; it is the default for a cassette of many interactions. Both fit 80 columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from rich.console import Console
from rich.padding import Padding
from rich.text import Text

from chunktape._report.timeline import BlockSpan, Timeline, bins
from chunktape.cli._render import printable

__all__ = ["COMPACT_FROM", "format_ns", "render_timelines"]

COMPACT_FROM: Final = 10
"""From this many interactions on, the compact form is the default (``--full`` draws every one in full)."""
_MAX_WIDTH: Final = 100
_LABEL: Final = 10
_LEVELS: Final = " ▁▂▃▄▅▆▇█"
_ROWS: Final = ("reasoning", "text", "tool-call")
_BLOCK_STYLES: Final = {"reasoning": "magenta", "text": "green", "tool-call": "yellow"}
_END_GLYPH: Final = {"completed": ("✔", "bold green"), "raised": ("✖", "bold red"), "cancelled": ("■", "bold yellow")}
_MAX_NOTES: Final = 3


def format_ns(t_ns: int) -> str:
    """A duration as a person reads it: ``412 ms``, ``1.33 s``, ``95.2 s``."""
    if t_ns < 1_000_000_000:
        return f"{t_ns / 1e6:.0f} ms" if t_ns >= 1_000_000 or t_ns == 0 else f"{t_ns / 1e6:.2g} ms"
    return f"{t_ns / 1e9:.3g} s"


def _cell(t_ns: int, end_ns: int, width: int) -> int:
    return min(width - 1, max(0, t_ns * width // max(end_ns, 1)))


def _strip(item: Timeline, width: int) -> Text:
    """The chunk row: arrivals per slice as a bar height, the wait for the first chunk dotted, long gaps shaded,
    the outcome's glyph in the last slice."""
    counts = bins(item.arrivals, item.end_ns, width)
    peak = max(counts, default=0) or 1
    cells: list[tuple[str, str]] = []
    for count in counts:
        level = 0 if count == 0 else max(1, round(count * (len(_LEVELS) - 1) / peak))
        cells.append((_LEVELS[level], "cyan"))
    first = item.first_chunk_ns if item.first_chunk_ns is not None else item.end_ns
    for position in range(_cell(first, item.end_ns, width) if first > 0 else 0):
        if counts[position] == 0:
            cells[position] = ("·", "dim")
    for gap in item.long_gaps:
        for position in range(_cell(gap.start_ns, item.end_ns, width) + 1, _cell(gap.end_ns, item.end_ns, width)):
            if counts[position] == 0:
                cells[position] = ("░", "red")
    glyph, style = _END_GLYPH[item.status]
    if item.fault is not None:
        glyph, style = "!", "bold red reverse"
    cells[-1] = (glyph, style)
    text = Text()
    for char, style in cells:
        text.append(char, style)
    return text


def _span_row(spans: Sequence[BlockSpan], item: Timeline, width: int) -> Text:
    cells: list[tuple[str, str]] = [(" ", "")] * width
    for number, span in enumerate(spans):
        start, end = _cell(span.start_ns, item.end_ns, width), _cell(span.end_ns, item.end_ns, width)
        style = _BLOCK_STYLES.get(span.block_type, "white") + ("" if number % 2 == 0 else " bold")
        char = "━" if span.closed else "╌"
        for position in range(start, end + 1):
            cells[position] = (char, style if span.closed else "yellow")
    text = Text()
    for char, style in cells:
        text.append(char, style)
    return text


def _row(label: str, bar: Text, right: str = "") -> Text:
    line = Text(f"{label:<{_LABEL}}", style="dim")
    line.append("▕", style="dim")
    line.append_text(bar)
    line.append("▏", style="dim")
    if right:
        line.append(f" {right}", style="dim")
    return line


def _axis(item: Timeline, width: int) -> Text:
    left, right = "0", format_ns(item.end_ns)
    middle = format_ns(item.end_ns // 2)
    bar = [" "] * width
    for position, char in enumerate(left):
        bar[position] = char
    for position, char in enumerate(right):
        bar[width - len(right) + position] = char
    start = width // 2 - len(middle) // 2
    if start > len(left) + 1 and start + len(middle) < width - len(right) - 1:
        for position, char in enumerate(middle):
            bar[start + position] = char
    return Text(f"{'time':<{_LABEL}} " + "".join(bar) + " ", style="dim")


def _header(item: Timeline) -> Text:
    parts = [f"#{item.index}", printable(item.model)]
    if item.attempt > 1:
        parts.append(f"attempt {item.attempt}")
    parts.append(f"{item.chunks} chunks")
    if item.first_chunk_ns is not None:
        parts.append(f"first chunk {format_ns(item.first_chunk_ns)}")
    parts.append(f"ends {format_ns(item.end_ns)}")
    if item.input_tokens is not None:
        parts.append(f"{item.input_tokens}/{item.output_tokens} tokens")
    text = Text(" · ".join(parts), style="bold")
    style = {"completed": "green", "raised": "red", "cancelled": "yellow"}[item.status]
    text.append(" · ")
    text.append(printable(item.outcome), style=f"bold {style}")
    return text


def _notes(item: Timeline) -> Text:
    """What happened when, in words: the first chunk, the blocks that have names, the long gaps, the end."""
    notes: list[tuple[str, str]] = []
    if item.first_chunk_ns is not None:
        notes.append((f"first chunk at {format_ns(item.first_chunk_ns)}", ""))
    else:
        notes.append(("no chunk", "yellow"))
    for span in item.spans:
        if span.label:
            notes.append((f"{printable(span.label)} {format_ns(span.start_ns)}-{format_ns(span.end_ns)}", "yellow"))
        if not span.closed:
            notes.append((f"{span.block_type} block #{span.index} never closed", "yellow"))
    gaps = item.long_gaps
    for gap in gaps[:_MAX_NOTES]:
        where = "before the end" if gap.to_end else f"after chunk #{gap.after}"
        notes.append((f"gap {format_ns(gap.length_ns)} {where} (at {format_ns(gap.start_ns)})", "red"))
    if len(gaps) > _MAX_NOTES:
        notes.append((f"+{len(gaps) - _MAX_NOTES} more long gap(s)", "red"))
    if not gaps and item.chunks > 1:
        notes.append((f"no gap over {format_ns(item.long_gap_ns)} (longest {format_ns(item.longest_gap_ns)})", "dim"))
    for marker in item.markers:
        if marker.kind == "fault" or marker.kind == "violation":
            notes.append((f"{printable(marker.label)} at {format_ns(marker.t_ns)}", "bold red"))
    glyph, style = _END_GLYPH[item.status]
    notes.append((f"{glyph} {printable(item.outcome)} at {format_ns(item.end_ns)}", style))
    text = Text()
    for number, (note, style) in enumerate(notes):
        if number:
            text.append(" · ", style="dim")
        text.append(note, style=style)
    return text


def _full(out: Console, item: Timeline, width: int) -> None:
    bar = width - _LABEL - 2
    out.print(_header(item), soft_wrap=False, overflow="fold")
    out.print(_axis(item, bar), no_wrap=True)
    out.print(_row("chunks", _strip(item, bar)), no_wrap=True)
    for block_type in _ROWS:
        spans = [span for span in item.spans if span.block_type == block_type]
        if spans:
            out.print(_row(block_type, _span_row(spans, item, bar)), no_wrap=True)
    out.print(Padding(_notes(item), (0, 0, 0, _LABEL + 1)), overflow="fold")


_SUMMARY: Final = 38


def _compact(out: Console, item: Timeline, width: int, index_width: int) -> None:
    bar = width - index_width - 3 - _SUMMARY - 1
    line = Text(f"#{item.index:<{index_width - 1}} ", style="bold")
    line.append("▕", style="dim")
    line.append_text(_strip(item, bar))
    line.append("▏", style="dim")
    summary = f"{format_ns(item.end_ns):>7} {printable(item.outcome)}"
    if item.fault is not None:
        summary = f"{format_ns(item.end_ns):>7} fault {printable(item.fault)}"
    if len(summary) > _SUMMARY:
        summary = summary[: _SUMMARY - 1] + "…"
    style = {"completed": "green", "raised": "red", "cancelled": "yellow"}[item.status]
    line.append(f" {summary}", style=style)
    out.print(line, no_wrap=True)


def render_timelines(
    out: Console, title: str, items: Sequence[Timeline], *, compact: bool | None = None, width: int | None = None
) -> None:
    """Draw ``items`` on ``out``: in full, or one line each (``compact``; None: compact from ``COMPACT_FROM``
    interactions on). ``width`` defaults to the console's, at most 100 columns."""
    width = min(width or out.width, _MAX_WIDTH)
    short = compact if compact is not None else len(items) >= COMPACT_FROM
    out.print(Text(printable(title), style="bold"), overflow="fold")
    if not items:
        out.print("no interaction recorded", style="yellow")
        return
    if short:
        out.print(
            Text(
                "one line per interaction, each on its own scale (0 to its end): ▁▅█ chunks, ░ long gap, ✔ completed, "
                "✖ raised, ■ cancelled, ! injected fault; --full draws each in full",
                style="dim",
            ),
            overflow="fold",
        )
        index_width = len(str(items[-1].index)) + 1
        for item in items:
            _compact(out, item, width, index_width)
        return
    out.print(
        Text(
            "each interaction on its own scale (0 to its end): ▁▅█ chunks per slice, · waiting for the first chunk, "
            "░ long gap, ━ a block's span (╌ never closed), ✔ completed, ✖ raised, ■ cancelled, ! injected fault",
            style="dim",
        ),
        overflow="fold",
    )
    for item in items:
        out.print()
        _full(out, item, width)
