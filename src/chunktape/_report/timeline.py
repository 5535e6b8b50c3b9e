"""A recording's timing as something to look at: per interaction, when each chunk arrived, each block's span, the
gaps (the long ones marked), and where the stream ended, finished or failed (an injected fault included).

``timeline(interaction)`` builds the model; ``chunktape show --timeline`` draws it in a terminal and
``chunktape report`` as an SVG chart per interaction. Every figure is derived from ``Event.t_ns`` and the
outcome's ``t_ns``, in the recording's own clock (virtual time when it was recorded in virtual time).
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from chunktape._cassettes.model import Cancelled, Completed, Interaction, Raised
from chunktape._protocol import BlockEnd, BlockStart, Finish, ProviderEvent, ToolCallBlock, ToolCallDelta, UsageChunk
from chunktape._report.analysis import describe_outcome, protocol_violation, summarize

__all__ = [
    "LONG_GAP_FACTOR",
    "LONG_GAP_FLOOR_NS",
    "BlockSpan",
    "Gap",
    "Marker",
    "Timeline",
    "bins",
    "injected_fault",
    "timeline",
]

LONG_GAP_FLOOR_NS: Final = 200_000_000
"""No gap shorter than 200 ms counts as long, however even the stream is."""
LONG_GAP_FACTOR: Final = 8
"""A gap is long when it is this many times the interaction's median gap (and at least the floor)."""

_FAULT = re.compile(r"injected fault (?P<id>[\w.+-]+) \(seed (?P<seed>-?\d+)\)")

MarkerKind = Literal["usage", "finish", "completed", "raised", "cancelled", "fault", "violation"]


class BlockSpan(msgspec.Struct, frozen=True, kw_only=True):
    """One content block, from its ``block-start`` to its ``block-end`` (or to the end, when it never closed)."""

    index: int
    block_type: str
    start_ns: int
    end_ns: int
    closed: bool
    chunks: int
    """Its chunks, start and end included."""
    label: str = ""
    """A tool call's name; empty for text and reasoning."""


class Gap(msgspec.Struct, frozen=True, kw_only=True):
    """A wait between two chunks, or between the last chunk and the end of the stream (``after`` is then the
    last chunk and ``to_end`` is set)."""

    after: int
    """The 0-based position of the chunk the wait follows."""
    start_ns: int
    end_ns: int
    to_end: bool = False

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


class Marker(msgspec.Struct, frozen=True, kw_only=True):
    """Something that happened at one instant: usage, finish, the outcome, an injected fault, a protocol violation."""

    t_ns: int
    kind: MarkerKind
    label: str


class Timeline(msgspec.Struct, frozen=True, kw_only=True):
    """One interaction's timing, ready to draw: every arrival, the block spans, the long gaps, the markers."""

    index: int
    model: str
    attempt: int
    arrivals: list[int]
    """Each chunk's ``t_ns``, in order."""
    first_chunk_ns: int | None
    end_ns: int
    """When the stream ended (the outcome's ``t_ns``), never earlier than the last chunk."""
    spans: list[BlockSpan]
    long_gaps: list[Gap]
    """The gaps at least ``long_gap_ns``, in order."""
    longest_gap_ns: int
    median_gap_ns: int
    long_gap_ns: int
    """The threshold this timeline used."""
    markers: list[Marker]
    outcome: str
    """``completed (stop)``, ``raised STREAM_ABORTED``... (``describe_outcome``)."""
    status: Literal["completed", "raised", "cancelled"]
    fault: str | None
    """The injected fault the recorded error names (``http-429``), if it names one."""
    input_tokens: int | None
    output_tokens: int | None
    last_user: str

    @property
    def chunks(self) -> int:
        return len(self.arrivals)


def injected_fault(message: str) -> str | None:
    """The fault id an error message names as injected (``injected fault http-429 (seed 0)``), or None."""
    found = _FAULT.search(message)
    return found["id"] if found else None


def _spans(interaction: Interaction, end_ns: int) -> list[BlockSpan]:
    spans: list[BlockSpan] = []
    open_: dict[int, tuple[str, int, int, str]] = {}
    for event in interaction.events:
        chunk = event.chunk
        match chunk:
            case BlockStart():
                open_[chunk.index] = (chunk.block_type, event.t_ns, 1, "")
            case BlockEnd():
                block_type, start, count, label = open_.pop(chunk.index, (_type_of(chunk), event.t_ns, 0, ""))
                if type(chunk.block) is ToolCallBlock:
                    label = chunk.block.name
                spans.append(
                    BlockSpan(
                        index=chunk.index,
                        block_type=block_type,
                        start_ns=start,
                        end_ns=event.t_ns,
                        closed=True,
                        chunks=count + 1,
                        label=label,
                    )
                )
            case UsageChunk() | Finish() | ProviderEvent():
                pass
            case _:
                index = chunk.index
                if index in open_:
                    block_type, start, count, label = open_[index]
                    if type(chunk) is ToolCallDelta and chunk.name:
                        label = chunk.name
                    open_[index] = (block_type, start, count + 1, label)
    for index, (block_type, start, count, label) in open_.items():
        spans.append(
            BlockSpan(
                index=index,
                block_type=block_type,
                start_ns=start,
                end_ns=end_ns,
                closed=False,
                chunks=count,
                label=label,
            )
        )
    return sorted(spans, key=lambda span: (span.start_ns, span.index))


def _type_of(chunk: BlockEnd) -> str:
    """The block type of a ``block-end`` without its ``block-start`` (a malformed recording)."""
    return str(chunk.block.__struct_config__.tag)


def timeline(interaction: Interaction, index: int = 0, *, long_gap_ns: int | None = None) -> Timeline:
    """The timeline of ``interaction`` (``index`` is its position in the cassette).

    A gap is long from ``long_gap_ns`` on; by default from ``LONG_GAP_FACTOR`` times the median gap, and never
    under ``LONG_GAP_FLOOR_NS``. The wait from the last chunk to the end counts as a gap too (a stall before a
    timeout); the wait for the first chunk is ``first_chunk_ns``, not a gap.
    """
    arrivals = [event.t_ns for event in interaction.events]
    end_ns = max([interaction.outcome.t_ns, *arrivals[-1:]])
    waits = [
        Gap(after=position, start_ns=before, end_ns=after)
        for position, (before, after) in enumerate(itertools.pairwise(arrivals))
    ]
    if arrivals and end_ns > arrivals[-1]:
        waits.append(Gap(after=len(arrivals) - 1, start_ns=arrivals[-1], end_ns=end_ns, to_end=True))
    between = [gap.length_ns for gap in waits if not gap.to_end]
    median = int(statistics.median(between)) if between else 0
    threshold = long_gap_ns if long_gap_ns is not None else max(LONG_GAP_FLOOR_NS, LONG_GAP_FACTOR * median)
    markers: list[Marker] = []
    for event in interaction.events:
        if type(event.chunk) is UsageChunk:
            usage = event.chunk.usage
            markers.append(
                Marker(t_ns=event.t_ns, kind="usage", label=f"{usage.input_tokens} in / {usage.output_tokens} out")
            )
        elif type(event.chunk) is Finish:
            markers.append(Marker(t_ns=event.t_ns, kind="finish", label=f"finish {event.chunk.reason.kind}"))
    violation = protocol_violation(interaction)
    if violation is not None and violation.position < len(arrivals):
        markers.append(Marker(t_ns=arrivals[violation.position], kind="violation", label=f"violates {violation.rule}"))
    outcome = interaction.outcome
    fault: str | None = None
    status: Literal["completed", "raised", "cancelled"]
    match outcome:
        case Completed():
            status = "completed"
        case Raised():
            status = "raised"
            fault = injected_fault(outcome.message)
            if fault is not None:
                markers.append(Marker(t_ns=end_ns, kind="fault", label=f"injected fault {fault}"))
        case Cancelled():
            status = "cancelled"
    described = describe_outcome(interaction)
    markers.append(Marker(t_ns=end_ns, kind=status, label=described))
    summary = summarize(interaction, index)
    return Timeline(
        index=index,
        model=interaction.request.model,
        attempt=interaction.attempt,
        arrivals=arrivals,
        first_chunk_ns=arrivals[0] if arrivals else None,
        end_ns=end_ns,
        spans=_spans(interaction, end_ns),
        long_gaps=[gap for gap in waits if gap.length_ns >= threshold and gap.length_ns > 0],
        longest_gap_ns=max((gap.length_ns for gap in waits), default=0),
        median_gap_ns=median,
        long_gap_ns=threshold,
        markers=sorted(markers, key=lambda marker: marker.t_ns),
        outcome=described,
        status=status,
        fault=fault,
        input_tokens=summary.usage.input_tokens if summary.usage is not None else None,
        output_tokens=summary.usage.output_tokens if summary.usage is not None else None,
        last_user=summary.last_user,
    )


def bins(arrivals: Sequence[int], end_ns: int, width: int) -> list[int]:
    """How many chunks arrived in each of ``width`` equal slices of ``[0, end_ns]`` (the last slice holds the end)."""
    counts = [0] * width
    if width <= 0:
        return counts
    span = max(end_ns, 1)
    for t_ns in arrivals:
        counts[min(width - 1, max(0, t_ns * width // span))] += 1
    return counts
