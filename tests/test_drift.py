"""Drift between two recordings of the same test, in words (``drift_summary``, ``chunktape diff --summary``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec

from chunktape import Raised, TokenUsage, UsageChunk, save_cassette
from chunktape._report.drift import drift_summary
from helpers import cassette_of, interaction_of, text_stream, tool_stream

SCRIPT = Path(sys.executable).parent / "chunktape"


def test_the_same_recording_has_no_drift() -> None:
    same = cassette_of(interaction_of(text_stream("a", "b")))
    drift = drift_summary(same, same)
    assert drift.same
    assert drift.sentence() == "no change"


def test_text_usage_and_timing_are_said_with_their_amounts() -> None:
    old = cassette_of(interaction_of(text_stream("Hello", " there"), gap_ns=10_000_000))
    new = cassette_of(interaction_of(text_stream("Hi", " there", "!"), gap_ns=15_000_000))
    drift = drift_summary(old, new)
    assert drift.changes == [
        "text changed in #0: 'Hello there' -> 'Hi there!'",
        "usage changed by +1 tokens (input +0, output +1)",  # text_stream counts one output token a piece
    ]
    # 6 chunks 10 ms apart end at 70 ms; 7 chunks 15 ms apart at 120 ms; the first chunk moved 10 -> 15 ms
    assert drift.timing == "timing shifted by +50 ms (duration, mean; first chunk +5 ms)"
    assert drift.sentence() == "; ".join([*drift.changes, drift.timing])


def test_tool_calls_outcomes_and_interaction_counts_are_said() -> None:
    old = cassette_of(
        interaction_of(tool_stream("read_file", '{"path":', '"a"}')), interaction_of(text_stream("ok"), content="2")
    )
    failed = Raised(t_ns=5_000_000, code="TIMEOUT", message="no chunk within 10 s")
    new = cassette_of(
        interaction_of(tool_stream("list_files", "{}")),
        interaction_of(text_stream("ok")[:2], failed, content="2"),
        interaction_of(text_stream("extra"), content="3"),
    )
    changes = drift_summary(old, new).changes
    assert changes[0] == "2 interaction(s) -> 3"
    assert "tool calls changed in #0: 'read_file({\"path\":\"a\"})' -> 'list_files({})'" in changes
    assert "outcome changed in #1: completed (stop) -> raised TIMEOUT" in changes


def test_a_changed_request_names_its_fields_and_rechunking_alone_is_said_as_such() -> None:
    old = cassette_of(interaction_of(text_stream("abc"), content="q"))
    new = cassette_of(interaction_of(text_stream("a", "bc"), content="q", temperature=0.5))
    changes = drift_summary(old, new).changes
    assert changes[0] == "requests changed in #0 (temperature)"
    # same text; the usage differs only because text_stream counts pieces
    assert any(change.startswith("usage changed by +1 tokens") for change in changes)
    same_usage = cassette_of(
        msgspec.structs.replace(
            new.interactions[0],
            request=old.interactions[0].request,
            events=[
                msgspec.structs.replace(event, chunk=UsageChunk(usage=TokenUsage(input_tokens=5, output_tokens=1)))
                if type(event.chunk) is UsageChunk
                else event
                for event in new.interactions[0].events
            ],
        )
    )
    assert drift_summary(old, same_usage).changes == ["chunking changed in #0 (same content, other chunk boundaries)"]


def _diff(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [str(SCRIPT), "diff", "--summary", *map(str, args)], capture_output=True, text=True, env=env, timeout=60
    )


def test_diff_summary_prints_the_drift_and_exits_1_on_content_0_on_timing(tmp_path: Path) -> None:
    old, new, slower = tmp_path / "old.msgpack", tmp_path / "new.json", tmp_path / "slower.msgpack"
    save_cassette(cassette_of(interaction_of(text_stream("Hello"), gap_ns=10_000_000)), old)
    save_cassette(cassette_of(interaction_of(text_stream("Bye"), gap_ns=10_000_000)), new)
    save_cassette(cassette_of(interaction_of(text_stream("Hello"), gap_ns=12_000_000)), slower)
    changed = _diff(old, new)
    assert changed.returncode == 1, changed.stderr
    assert changed.stdout.splitlines() == ["text changed in #0: 'Hello' -> 'Bye'"]
    timing = _diff(old, slower)
    assert timing.returncode == 0, timing.stderr
    assert timing.stdout.splitlines() == ["timing shifted by +12 ms (duration, mean; first chunk +2 ms)"]
    same = _diff(old, old)
    assert (same.returncode, same.stdout.strip()) == (0, "no change")
