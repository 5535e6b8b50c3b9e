"""``chunktape show --timeline``: the timeline model (first chunk, block spans, long gaps, outcome and fault markers)
and its drawing in a terminal, as a real process at 80 columns, in full and compact."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    Cancelled,
    Event,
    Interaction,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    ToolCallDelta,
    load_cassette,
    save_cassette,
)
from chunktape._report.timeline import LONG_GAP_FLOOR_NS, timeline
from chunktape.faults import Disconnect, Stall
from helpers import cassette_of, interaction_of, record_through_faults, recorded_request, text_stream

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "cassettes" / "demo-session.msgpack"
SCRIPT = Path(sys.executable).parent / "chunktape"
MS = 1_000_000


def _chunktape(*args: str | Path, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": str(columns)}
    return subprocess.run(
        [str(SCRIPT), *map(str, args)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


def _cut_tool_call() -> Interaction:
    """Reasoning, then a tool call that never closes: the consumer stopped at 90 ms."""
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="think"),
        BlockEnd(index=0, block=ReasoningBlock(text="think")),
        BlockStart(index=1, block_type="tool-call"),
        ToolCallDelta(index=1, id=CallId("c1"), name="read_file", arguments_delta='{"pa'),
    ]
    times = [10, 20, 30, 40, 50]
    events = [Event(t_ns=t * MS, chunk=chunk) for t, chunk in zip(times, chunks, strict=True)]
    return Interaction(request=recorded_request(), events=events, outcome=Cancelled(t_ns=90 * MS, reason="closed"))


def test_the_model_has_the_first_chunk_the_spans_and_an_unclosed_block() -> None:
    item = timeline(_cut_tool_call(), 3)
    assert (item.index, item.chunks, item.first_chunk_ns, item.end_ns) == (3, 5, 10 * MS, 90 * MS)
    assert [(s.block_type, s.start_ns, s.end_ns, s.closed, s.label) for s in item.spans] == [
        ("reasoning", 10 * MS, 30 * MS, True, ""),
        ("tool-call", 40 * MS, 90 * MS, False, "read_file"),
    ]
    assert item.status == "cancelled"
    assert item.markers[-1].kind == "cancelled"
    assert item.fault is None


def test_a_gap_is_long_against_the_streams_own_pace_and_never_under_the_floor() -> None:
    chunks = text_stream(*"abcdefgh")  # 12 chunks, 10 ms apart, but one wait of 900 ms after chunk #5
    times = [10 * n for n in range(1, 7)] + [960 + 10 * n for n in range(6)]
    events = [Event(t_ns=t * MS, chunk=chunk) for t, chunk in zip(times, chunks, strict=True)]
    interaction = interaction_of(chunks)
    interaction = Interaction(request=interaction.request, events=events, outcome=interaction.outcome)
    item = timeline(interaction)
    assert [(gap.after, gap.length_ns) for gap in item.long_gaps] == [(5, 900 * MS)]
    assert item.long_gap_ns == LONG_GAP_FLOOR_NS  # 8 x a 10 ms median is under the floor
    assert [gap.after for gap in timeline(interaction, long_gap_ns=5 * MS).long_gaps] == list(range(11))


def test_a_recorded_fault_and_its_stall_are_on_the_timeline(tmp_path: Path) -> None:
    faulty = tmp_path / "faulty.msgpack"
    record_through_faults(DEMO, faulty, [Stall(after_chunks=10, seconds=2.0), Disconnect(after_chunks=20)], calls=1)
    item = timeline(load_cassette(faulty).interactions[0])
    assert item.status == "raised"
    assert item.fault == "disconnect-after-20-chunks"
    assert [marker.kind for marker in item.markers[-2:]] == ["fault", "raised"]
    assert [(gap.after, round(gap.length_ns / 1e9, 1)) for gap in item.long_gaps] == [(9, 2.0)]


def test_show_timeline_draws_each_interaction_in_80_columns(tmp_path: Path) -> None:
    faulty = tmp_path / "faulty.msgpack"
    record_through_faults(DEMO, faulty, [Stall(after_chunks=10, seconds=2.0), Disconnect(after_chunks=20)])
    done = _chunktape("show", "--timeline", faulty)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    headers = [line for line in lines if line.startswith("#")]
    assert [header.split(" · ")[0] for header in headers] == ["#0", "#1", "#2"]
    chunk_rows = [line for line in lines if line.startswith("chunks ")]
    assert len(chunk_rows) == 3
    assert chunk_rows[0].rstrip().endswith("!▏")  # the injected fault, where the stream ended
    assert "░" in chunk_rows[0]  # the 2 s stall, shaded as a long gap
    assert all(row.rstrip().endswith("✔▏") for row in chunk_rows[1:])
    assert any(line.startswith("tool-call ") and "━" in line for line in lines)
    text = " ".join(done.stdout.split())
    assert "gap 2.03 s after chunk #9" in text  # the 2 s stall on top of the recorded 30 ms
    assert "injected fault disconnect-after-20-chunks at" in text
    assert "read_file" in text


def test_a_long_session_gets_the_compact_form_and_full_on_request(tmp_path: Path) -> None:
    many = tmp_path / "many.msgpack"
    save_cassette(cassette_of(*[interaction_of(text_stream("x" * n, "y"), content=f"q{n}") for n in range(12)]), many)
    compact = _chunktape("show", "--timeline", many)
    assert compact.returncode == 0, compact.stderr
    rows = [line for line in compact.stdout.splitlines() if line.startswith("#")]
    assert len(rows) == 12
    assert all("completed (stop)" in row for row in rows)
    assert max(len(line.rstrip()) for line in compact.stdout.splitlines()) <= 80
    full = _chunktape("show", "--timeline", "--full", many)
    assert len([line for line in full.stdout.splitlines() if line.startswith("chunks ")]) == 12
    forced = _chunktape("show", "--timeline", "--compact", DEMO)
    assert len([line for line in forced.stdout.splitlines() if line.startswith("#")]) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--json", "--timeline"], "use either --json or --timeline, not both"),
        (["--timeline", "--long-gap", "0"], "--long-gap must be > 0 seconds, got 0"),
    ],
)
def test_bad_timeline_options_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = _chunktape("show", *args, DEMO)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"chunktape: error: {message}"]


def test_the_demo_tool_calls_are_named_on_their_rows() -> None:
    done = _chunktape("show", "--timeline", DEMO, columns=120)
    text = " ".join(done.stdout.split())
    assert "list_files 1.12 s-1.27 s" in text
    assert "first chunk at 400 ms" in text
