"""Drift between two recordings of the same test, in words: what a re-recording changed.

``diff_cassettes`` lists every difference line by line; ``drift_summary`` says what kind of thing changed, as
someone reviewing a re-recorded cassette asks: did the text change, the tool calls, the outcome, the token usage
(by how many tokens), the timing (by how many milliseconds)? ``chunktape diff --summary`` prints it, and the pytest
plugin prints it for each cassette it re-recorded.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from chunktape._cassettes.codec import PathLike, as_cassette
from chunktape._cassettes.model import Cassette, Interaction, RecordedRequest
from chunktape._report.analysis import InteractionSummary, describe_outcome, summarize
from chunktape._validation import shortened

__all__ = ["TIMING_TOLERANCE_NS", "Drift", "drift_summary"]

TIMING_TOLERANCE_NS = 1_000_000
"""A mean shift under 1 ms is no timing change."""


class Drift(msgspec.Struct, frozen=True, kw_only=True):
    """What changed between two recordings: ``changes`` in words (content), ``timing`` (how the timing moved, which
    alone does not make two recordings differ)."""

    changes: list[str]
    timing: str | None

    @property
    def same(self) -> bool:
        return not self.changes

    def sentence(self) -> str:
        """Everything on one line: ``text changed in #0; usage changed by +12 tokens; timing shifted by +35 ms``."""
        said = [*self.changes, *([self.timing] if self.timing else [])]
        return "; ".join(said) if said else "no change"


def _where(numbers: list[int]) -> str:
    return ", ".join(f"#{number}" for number in numbers)


def _example(what: str, numbers: list[int], before: str, after: str) -> str:
    """``text changed in #0: 'a' -> 'b'``, or with more: ``text changed in #0, #2 (#0: 'a' -> 'b')``."""
    if len(numbers) == 1:
        return f"{what} changed in #{numbers[0]}: {before} -> {after}"
    return f"{what} changed in {_where(numbers)} (#{numbers[0]}: {before} -> {after})"


def _fields(old: RecordedRequest, new: RecordedRequest) -> list[str]:
    a = msgspec.to_builtins(msgspec.structs.replace(old, fingerprint=""))
    b = msgspec.to_builtins(msgspec.structs.replace(new, fingerprint=""))
    return [key for key in sorted({*a, *b}) if a.get(key) != b.get(key)]


def _changed(
    pairs: list[tuple[int, InteractionSummary, InteractionSummary]], field: Callable[[InteractionSummary], object]
) -> list[int]:
    return [index for index, old, new in pairs if field(old) != field(new)]


def _tokens(summary: InteractionSummary) -> tuple[int, int]:
    usage = summary.usage
    return (0, 0) if usage is None else (usage.input_tokens, usage.output_tokens)


def _shift_ms(t_ns: float) -> str:
    return f"{t_ns / 1e6:+.0f} ms"


def _timing(pairs: list[tuple[Interaction, Interaction]]) -> str | None:
    durations = [new.outcome.t_ns - old.outcome.t_ns for old, new in pairs]
    firsts = [new.events[0].t_ns - old.events[0].t_ns for old, new in pairs if old.events and new.events]
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    first = sum(firsts) / len(firsts) if firsts else 0.0
    largest = max(durations, key=abs)
    if abs(mean) < TIMING_TOLERANCE_NS and abs(first) < TIMING_TOLERANCE_NS and abs(largest) < TIMING_TOLERANCE_NS:
        return None
    said = f"timing shifted by {_shift_ms(mean)} (duration, mean"
    if len(durations) > 1 and abs(largest - mean) >= TIMING_TOLERANCE_NS:
        said += f"; largest {_shift_ms(largest)} at #{durations.index(largest)}"
    return f"{said}; first chunk {_shift_ms(first)})"


def drift_summary(old: Cassette | PathLike, new: Cassette | PathLike) -> Drift:
    """What changed from ``old`` to ``new``, two recordings of the same test (interactions paired by position)."""
    a, b = as_cassette(old), as_cassette(new)
    paired = list(zip(a.interactions, b.interactions, strict=False))
    summaries = [(index, summarize(x, index), summarize(y, index)) for index, (x, y) in enumerate(paired)]
    changes: list[str] = []
    if len(a.interactions) != len(b.interactions):
        changes.append(f"{len(a.interactions)} interaction(s) -> {len(b.interactions)}")
    requests = [(index, _fields(x.request, y.request)) for index, (x, y) in enumerate(paired)]
    requests = [(index, fields) for index, fields in requests if fields]
    if requests:
        listed = "; ".join(f"#{index} ({', '.join(fields)})" for index, fields in requests)
        changes.append(f"requests changed in {listed}")
    text = _changed(summaries, lambda s: s.text)
    if text:
        first = next(item for item in summaries if item[0] == text[0])
        changes.append(_example("text", text, shortened(first[1].text, 40), shortened(first[2].text, 40)))
    reasoning = _changed(summaries, lambda s: s.reasoning)
    if reasoning:
        changes.append(f"reasoning changed in {_where(reasoning)}")
    calls = _changed(summaries, lambda s: s.tool_calls)
    if calls:
        first = next(item for item in summaries if item[0] == calls[0])
        before = ", ".join(first[1].tool_calls) or "none"
        after = ", ".join(first[2].tool_calls) or "none"
        changes.append(_example("tool calls", calls, shortened(before, 50), shortened(after, 50)))
    outcomes = [(index, describe_outcome(x), describe_outcome(y)) for index, (x, y) in enumerate(paired)]
    outcomes = [(index, before, after) for index, before, after in outcomes if before != after]
    if outcomes:
        index, before, after = outcomes[0]
        more = f" and {len(outcomes) - 1} more" if len(outcomes) > 1 else ""
        changes.append(f"outcome changed in #{index}: {before} -> {after}{more}")
    old_in = sum(_tokens(s)[0] for _, s, _ in summaries)
    old_out = sum(_tokens(s)[1] for _, s, _ in summaries)
    new_in = sum(_tokens(s)[0] for _, _, s in summaries)
    new_out = sum(_tokens(s)[1] for _, _, s in summaries)
    if (old_in, old_out) != (new_in, new_out):
        total = new_in + new_out - old_in - old_out
        changes.append(
            f"usage changed by {total:+d} tokens (input {new_in - old_in:+d}, output {new_out - old_out:+d})"
        )
    said = {*text, *reasoning, *calls, *(index for index, _, _ in outcomes)}
    said |= {index for index, x, y in summaries if _tokens(x) != _tokens(y)}
    chunking = [index for index, (x, y) in enumerate(paired) if x.chunks != y.chunks and index not in said]
    if chunking:
        changes.append(f"chunking changed in {_where(chunking)} (same content, other chunk boundaries)")
    return Drift(changes=changes, timing=_timing(paired))
