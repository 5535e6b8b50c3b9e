"""``chunktape report``: cassettes as one self-contained HTML page, a timeline chart per interaction.

The page holds everything it shows: the charts are inline SVG drawn here, the style and the filter script are
inline, and its Content-Security-Policy forbids every fetch, so it opens the same from a CI artifact, a mail or
a laptop offline. Recorded text is escaped, never markup. The pytest plugin writes the same page for a run
(``--tape-report PATH``), one source per test.
"""

from __future__ import annotations

import html
import math
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec

from chunktape._cassettes.model import Cassette
from chunktape._report.timeline import Timeline, bins, timeline
from chunktape._version import __version__

__all__ = ["ReportSource", "render_report", "write_report"]


class ReportSource(msgspec.Struct, frozen=True, kw_only=True):
    """One cassette in a report: what to call it (a path, a test id), and its content."""

    label: str
    cassette: Cassette
    note: str = ""
    """Said beside the label (``recorded by this run``, ``kept aside: the test failed``)."""


_WIDTH: Final = 1000
_PLOT_LEFT: Final = 92
_PLOT_RIGHT: Final = 986
_LANE: Final = 18
_TOP: Final = 22
_MAX_TICKS: Final = 2000
"""Beyond this many chunks an interaction's arrivals are drawn as a density strip, not a tick each."""
_LANES: Final = ("reasoning", "text", "tool-call")
_STATUS_WORDS: Final = {"completed": "completed", "raised": "raised", "cancelled": "cut short"}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ms(t_ns: int | None) -> str:
    if t_ns is None:
        return "-"
    if t_ns < 1_000_000_000:
        return f"{t_ns / 1e6:.0f} ms"
    return f"{t_ns / 1e9:.3g} s"


def _step(end_ns: int) -> int:
    """A tick step of 1, 2 or 5 times a power of ten that gives four to ten ticks over ``end_ns``."""
    raw = max(end_ns, 1) / 6
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return max(1, int(factor * power))
    return max(1, int(10 * power))


def _chart(item: Timeline, number: int) -> str:
    """The SVG of one interaction: axis, arrivals, block lanes, long gaps, the first-chunk wait and markers."""
    lanes = ["chunks", *[lane for lane in _LANES if any(span.block_type == lane for span in item.spans)], "events"]
    height = _TOP + _LANE * len(lanes) + 26
    span = max(item.end_ns, 1)
    plot = _PLOT_RIGHT - _PLOT_LEFT

    def x(t_ns: int) -> float:
        return round(_PLOT_LEFT + plot * min(max(t_ns, 0), span) / span, 2)

    def y(lane: str) -> int:
        return _TOP + _LANE * lanes.index(lane)

    parts = [
        f'<svg class="timeline" viewBox="0 0 {_WIDTH} {height}" role="img" '
        f'aria-label="timeline of interaction {number}" preserveAspectRatio="none">'
    ]
    for lane in lanes:
        parts.append(
            f'<text class="lane" x="{_PLOT_LEFT - 8}" y="{y(lane) + 12}" text-anchor="end">{_e(lane)}</text>'
            f'<line class="lane-line" x1="{_PLOT_LEFT}" x2="{_PLOT_RIGHT}" y1="{y(lane) + _LANE - 1}" '
            f'y2="{y(lane) + _LANE - 1}"/>'
        )
    bottom = _TOP + _LANE * len(lanes)
    step = _step(item.end_ns)
    for tick in range(0, item.end_ns + 1, step):
        parts.append(
            f'<line class="tick" x1="{x(tick)}" x2="{x(tick)}" y1="{_TOP}" y2="{bottom + 4}"/>'
            f'<text class="tick-label" x="{x(tick)}" y="{bottom + 16}" text-anchor="middle">{_e(_ms(tick))}</text>'
        )
    for gap in item.long_gaps:
        where = "before the end" if gap.to_end else f"after chunk #{gap.after}"
        parts.append(
            f'<rect class="gap long" x="{x(gap.start_ns)}" y="{_TOP}" width="{max(x(gap.end_ns) - x(gap.start_ns), 1)}"'
            f' height="{bottom - _TOP}"><title>long gap: {_e(_ms(gap.length_ns))} {_e(where)}</title></rect>'
        )
    if item.first_chunk_ns:
        row = y("chunks") + _LANE // 2
        parts.append(
            f'<line class="ttft" x1="{x(0)}" x2="{x(item.first_chunk_ns)}" y1="{row}" y2="{row}">'
            f"<title>time to first chunk: {_e(_ms(item.first_chunk_ns))}</title></line>"
        )
    top = y("chunks") + 2
    if item.chunks <= _MAX_TICKS:
        ticks = "".join(f"M{x(t)} {top}v{_LANE - 5}" for t in item.arrivals)
        if ticks:
            parts.append(f'<path class="arrival" d="{ticks}"><title>{item.chunks} chunks</title></path>')
    else:
        counts = bins(item.arrivals, item.end_ns, 500)
        peak = max(counts) or 1
        width = plot / len(counts)
        for position, count in enumerate(counts):
            if count:
                bar = (_LANE - 5) * count / peak
                parts.append(
                    f'<rect class="density" x="{round(_PLOT_LEFT + position * width, 2)}" '
                    f'y="{round(top + _LANE - 5 - bar, 2)}" width="{round(width, 2)}" height="{round(bar, 2)}"/>'
                )
    in_lane: dict[str, int] = {}
    for block in item.spans:
        lane = block.block_type if block.block_type in _LANES else "text"
        in_lane[lane] = in_lane.get(lane, -1) + 1  # neighbours on one lane alternate in shade
        kind = "open" if not block.closed else ("odd" if in_lane[lane] % 2 else "even")
        left, right = x(block.start_ns), x(block.end_ns)
        name = f" {block.label}" if block.label else ""
        state = "" if block.closed else ", never closed"
        parts.append(
            f'<rect class="block {_e(lane)} {kind}" x="{left}" y="{y(lane) + 3}" width="{max(right - left, 2)}" '
            f'height="{_LANE - 7}" rx="2"><title>{_e(lane)} block #{block.index}{_e(name)}: '
            f"{_e(_ms(block.start_ns))} to {_e(_ms(block.end_ns))}, {block.chunks} chunks{state}</title></rect>"
        )
        if block.label and right - left > 40:
            parts.append(
                f'<text class="block-label {kind}" x="{left + 3}" y="{y(lane) + 12}">{_e(block.label[:40])}</text>'
            )
    row = y("events") + _LANE // 2
    for marker in item.markers:
        cx = x(marker.t_ns)
        label = f"{marker.label} at {_ms(marker.t_ns)}"
        if marker.kind in ("usage", "finish"):
            parts.append(
                f'<circle class="marker {marker.kind}" cx="{cx}" cy="{row}" r="3.5"><title>{_e(label)}</title></circle>'
            )
        elif marker.kind in ("fault", "violation"):
            parts.append(
                f'<path class="marker {marker.kind}" d="M{cx} {row - 7}l6 11h-12z"><title>{_e(label)}</title></path>'
            )
        else:
            parts.append(
                f'<path class="marker end {marker.kind}" d="M{cx} {row - 6}l6 6-6 6-6-6z">'
                f"<title>{_e(label)}</title></path>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _interaction_html(number: int, source: int, label: str, item: Timeline) -> str:
    tokens = "" if item.input_tokens is None else f" · {item.input_tokens} in / {item.output_tokens} out"
    attempt = f" · attempt {item.attempt}" if item.attempt > 1 else ""
    fault = f' · <span class="fault">injected fault {_e(item.fault)}</span>' if item.fault else ""
    gaps = f" · {len(item.long_gaps)} long gap(s)" if item.long_gaps else ""
    return (
        f'<section class="interaction {item.status}" id="i{number}" {_data(number, source, label, item)}>'
        f'<h3><a href="#i{number}">#{item.index}</a> <span class="source">{_e(label)}</span> · {_e(item.model)}'
        f"{attempt} · {item.chunks} chunks · first chunk {_e(_ms(item.first_chunk_ns))} · ends {_e(_ms(item.end_ns))}"
        f'{_e(tokens)}{gaps}{fault} · <span class="outcome">{_e(item.outcome)}</span></h3>'
        f"{_chart(item, number)}</section>"
    )


def _data(number: int, source: int, label: str, item: Timeline) -> str:
    search = " ".join([label, item.model, item.outcome, item.last_user, *(span.label for span in item.spans)])
    return (
        f'data-n="{number}" data-source="{source}" data-status="{item.status}" '
        f'data-fault="{_e(item.fault or "")}" data-long="{len(item.long_gaps)}" data-duration="{item.end_ns}" '
        f'data-text="{_e(search.lower())}"'
    )


def _row(number: int, source: int, label: str, item: Timeline) -> str:
    tokens = "-" if item.input_tokens is None else f"{item.input_tokens}/{item.output_tokens}"
    fault = f" (injected fault {_e(item.fault)})" if item.fault else ""
    return (
        f'<tr class="{item.status}" {_data(number, source, label, item)}>'
        f'<td data-v="{number}"><a href="#i{number}">{item.index}</a></td>'
        f'<td data-v="{_e(label)}">{_e(label)}</td><td data-v="{_e(item.model)}">{_e(item.model)}</td>'
        f'<td data-v="{item.chunks}">{item.chunks}</td>'
        f'<td data-v="{-1 if item.first_chunk_ns is None else item.first_chunk_ns}">'
        f"{_e(_ms(item.first_chunk_ns))}</td>"
        f'<td data-v="{item.end_ns}">{_e(_ms(item.end_ns))}</td>'
        f'<td data-v="{(item.input_tokens or 0) + (item.output_tokens or 0)}">{_e(tokens)}</td>'
        f'<td data-v="{_e(item.outcome)}" class="outcome">{_e(item.outcome)}{fault}</td></tr>'
    )


_STYLE: Final = """
:root{--text:#1d7f4e;--reasoning:#7a4fd0;--tool:#c46c12;--arrival:#2f6fd0;--bad:#d1343c;--warn:#b7860b;
--fg:#1c1e21;--muted:#6b7078;--line:#e3e5e8;--bg:#fff}
*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:var(--fg);
background:var(--bg);margin:0 auto;padding:16px 24px;max-width:1200px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:22px 0 8px}h3{font-size:13px;font-weight:600;margin:0 0 4px}
.muted,.source{color:var(--muted)}a{color:inherit}
.filters{display:flex;flex-wrap:wrap;gap:10px 16px;align-items:center;padding:10px 12px;background:#f5f6f8;
border:1px solid var(--line);border-radius:6px;position:sticky;top:0;z-index:2}
.filters input[type=search]{width:260px}.filters label{white-space:nowrap}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{padding:4px 8px;border-bottom:1px solid var(--line);
text-align:left;white-space:nowrap}td.outcome{white-space:normal}.table{overflow-x:auto}
th{cursor:pointer;user-select:none;background:#fafbfc}th[aria-sort]::after{content:" \\2195";color:var(--muted)}
td:nth-child(4),td:nth-child(5),td:nth-child(6),td:nth-child(7){text-align:right;font-variant-numeric:tabular-nums}
tr.raised .outcome,section.raised .outcome,.fault{color:var(--bad);font-weight:600}
tr.cancelled .outcome,section.cancelled .outcome{color:var(--warn);font-weight:600}
tr.completed .outcome,section.completed .outcome{color:var(--text)}
section.interaction{border:1px solid var(--line);border-radius:6px;padding:8px 10px;margin:10px 0}
section.interaction:target{outline:2px solid var(--arrival)}
svg.timeline{width:100%;height:auto;display:block}
svg .lane,svg .tick-label{font-size:11px;fill:var(--muted)}svg .lane-line{stroke:var(--line)}
svg .tick{stroke:#eef0f2}svg .arrival{stroke:var(--arrival);stroke-width:1.2}svg .density{fill:var(--arrival)}
svg .ttft{stroke:var(--muted);stroke-dasharray:3 3}
svg .gap.long{fill:var(--bad);fill-opacity:.13}
svg .block.text{fill:var(--text)}svg .block.reasoning{fill:var(--reasoning)}svg .block.tool-call{fill:var(--tool)}
svg .block.odd{fill-opacity:.7}svg .block.open{fill-opacity:.35;stroke:var(--warn);stroke-dasharray:4 2}
svg .block-label{font-size:10px;fill:#fff;pointer-events:none}svg .block-label.open{fill:var(--fg)}
svg .marker.usage{fill:var(--muted)}svg .marker.finish{fill:var(--text)}
svg .marker.completed{fill:var(--text)}svg .marker.raised,svg .marker.fault,svg .marker.violation{fill:var(--bad)}
svg .marker.cancelled{fill:var(--warn)}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:10px;
margin-right:4px;vertical-align:-1px;border-radius:2px}
[hidden]{display:none!important}
"""

_SCRIPT: Final = """
(function () {
  "use strict";
  var q = document.getElementById("q"), outcome = document.getElementById("outcome");
  var longOnly = document.getElementById("long"), slower = document.getElementById("slower");
  var shown = document.getElementById("shown");
  var rows = Array.prototype.slice.call(document.querySelectorAll("#summary tbody tr"));
  var charts = Array.prototype.slice.call(document.querySelectorAll("section.interaction"));
  function keep(el) {
    var d = el.dataset, words = q.value.trim().toLowerCase().split(/\\s+/).filter(Boolean);
    var want = outcome.value, min = parseFloat(slower.value);
    if (want === "fault" ? !d.fault : (want && d.status !== want)) return false;
    if (longOnly.checked && d.long === "0") return false;
    if (!isNaN(min) && Number(d.duration) < min * 1e6) return false;
    return words.every(function (w) { return d.text.indexOf(w) >= 0; });
  }
  function apply() {
    var count = 0;
    rows.forEach(function (row) { row.hidden = !keep(row); });
    charts.forEach(function (chart) { chart.hidden = !keep(chart); if (!chart.hidden) count += 1; });
    shown.textContent = count + " of " + charts.length + " interaction(s) shown";
    document.documentElement.setAttribute("data-shown", String(count));
    var state = new URLSearchParams();
    if (q.value) state.set("q", q.value);
    if (outcome.value) state.set("outcome", outcome.value);
    if (longOnly.checked) state.set("long", "1");
    if (slower.value) state.set("slower", slower.value);
    var hash = state.toString();
    if (hash !== location.hash.slice(1) && history.replaceState) {
      history.replaceState(null, "", hash ? "#" + hash : " ");
    }
  }
  var initial = new URLSearchParams(location.hash.slice(1));
  if (initial.has("q")) q.value = initial.get("q");
  if (initial.has("outcome")) outcome.value = initial.get("outcome");
  if (initial.has("long")) longOnly.checked = true;
  if (initial.has("slower")) slower.value = initial.get("slower");
  [q, outcome, longOnly, slower].forEach(function (el) { el.addEventListener("input", apply); });
  outcome.addEventListener("change", apply);
  Array.prototype.forEach.call(document.querySelectorAll("#summary th"), function (th, column) {
    th.setAttribute("aria-sort", "none");
    th.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending", body = th.closest("table").tBodies[0];
      Array.prototype.forEach.call(th.parentNode.children, function (other) {
        other.setAttribute("aria-sort", "none");
      });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var sorted = Array.prototype.slice.call(body.rows).sort(function (a, b) {
        var x = a.cells[column].dataset.v, y = b.cells[column].dataset.v, nx = Number(x), ny = Number(y);
        var order = isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny;
        return up ? order : -order;
      });
      sorted.forEach(function (row) { body.appendChild(row); });
    });
  });
  document.documentElement.setAttribute("data-charts", String(document.querySelectorAll("svg.timeline").length));
  apply();
})();
"""


def render_report(
    sources: Sequence[ReportSource],
    *,
    title: str = "chunktape report",
    long_gap_ns: int | None = None,
    generated_at: datetime | None = None,
) -> str:
    """The report page for ``sources``: a summary table (model, chunks, first chunk, duration, tokens, outcome),
    filters (text, outcome, long gaps, duration; kept in the page's URL fragment) and a chart per interaction."""
    when = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    sections: list[str] = []
    rows: list[str] = []
    number = 0
    totals = {"completed": 0, "raised": 0, "cancelled": 0}
    faults = 0
    chunks = 0
    for source_number, source in enumerate(sources):
        items = [
            timeline(interaction, index, long_gap_ns=long_gap_ns)
            for index, interaction in enumerate(source.cassette.interactions)
        ]
        note = f' <span class="muted">({_e(source.note)})</span>' if source.note else ""
        sections.append(
            f'<h2 class="source-title">{_e(source.label)}{note} <span class="muted">· {len(items)} interaction(s) · '
            f"{_e(source.cassette.meta.recorder)}, adapter {_e(source.cassette.meta.adapter or '-')}</span></h2>"
        )
        if not items:
            sections.append('<p class="muted">no interaction recorded</p>')
        for item in items:
            sections.append(_interaction_html(number, source_number, source.label, item))
            rows.append(_row(number, source_number, source.label, item))
            totals[item.status] += 1
            faults += item.fault is not None
            chunks += item.chunks
            number += 1
    headline = (
        f"{len(sources)} cassette(s) · {number} interaction(s) · {chunks} chunks · {totals['completed']} completed · "
        f"{totals['raised']} raised ({faults} by an injected fault) · {totals['cancelled']} cut short"
    )
    legend = (
        '<p class="legend muted"><span><i style="background:var(--arrival)"></i>a chunk arrives</span>'
        '<span><i style="background:var(--reasoning)"></i>reasoning block</span>'
        '<span><i style="background:var(--text)"></i>text block</span>'
        '<span><i style="background:var(--tool)"></i>tool call</span>'
        '<span><i style="background:var(--bad);opacity:.3"></i>long gap</span>'
        "<span>- - - waiting for the first chunk</span><span>&#9670; the end (green completed, red raised, "
        "amber cut short)</span><span>&#9650; injected fault or protocol violation</span>"
        "<span>&#9679; usage, finish</span></p>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="chunktape {_e(__version__)}"><title>{_e(title)}</title>'
        f"<style>{_STYLE}</style></head><body>"
        f'<h1>{_e(title)}</h1><p class="muted">{_e(headline)} · generated {_e(when)} by chunktape '
        f"{_e(__version__)}; this page loads nothing from the network</p>"
        '<div class="filters" role="search">'
        '<label>filter <input type="search" id="q" placeholder="model, file, test, tool, prompt"></label>'
        '<label>outcome <select id="outcome"><option value="">any</option><option value="completed">completed'
        '</option><option value="raised">raised</option><option value="cancelled">cut short</option>'
        '<option value="fault">injected fault</option></select></label>'
        '<label><input type="checkbox" id="long"> with long gaps</label>'
        '<label>slower than <input type="number" id="slower" min="0" step="100" style="width:90px"> ms</label>'
        '<span id="shown" class="muted"></span></div>'
        '<h2>Summary</h2><div class="table"><table id="summary"><thead><tr><th>#</th><th>cassette</th><th>model</th>'
        "<th>chunks</th><th>first chunk</th><th>duration</th><th>tokens in/out</th><th>outcome</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
        f"<h2>Timelines</h2>{legend}{''.join(sections)}"
        f"<script>{_SCRIPT}</script></body></html>\n"
    )


def write_report(page: str, target: Path) -> None:
    """Write ``page`` to ``target`` whole or not at all: a temp file beside it, then renamed over it."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(page)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
