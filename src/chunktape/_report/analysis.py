"""Reading cassettes for people and CI: per-interaction summaries, file checks, and interaction-level diffs.

``summarize`` gives the figures ``chunktape show`` prints (chunks, time to first chunk, duration, usage,
outcome); ``check_cassette`` is ``chunktape check`` for one file (format, timing and protocol rules);
``diff_cassettes`` is ``chunktape diff``. They live here, not in the CLI, so tests and tools share them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

import msgspec

from chunktape._cassettes.codec import PathLike, as_cassette, load_cassette
from chunktape._cassettes.matching import diff_requests
from chunktape._cassettes.model import (
    MAX_GAP_NS,
    Cancelled,
    Cassette,
    Completed,
    Interaction,
    Outcome,
    Raised,
    request_fingerprint,
)
from chunktape._errors import ErrorCode, LlmError, ProtocolViolation
from chunktape._limits import UnreadableFile, read_user_file
from chunktape._protocol import Finish, ReplyBuilder, TokenUsage
from chunktape._report.staleness import stale
from chunktape._validation import shortened, validate

__all__ = [
    "CASSETTE_SUFFIXES",
    "CassetteDiff",
    "CassetteFiles",
    "CheckProblem",
    "InteractionSummary",
    "check_cassette",
    "describe_outcome",
    "diff_cassettes",
    "find_cassette_files",
    "looks_like_cassette",
    "protocol_violation",
    "summarize",
]


class InteractionSummary(msgspec.Struct, frozen=True, kw_only=True):
    """What one interaction amounts to, in the figures a person looks at first."""

    index: int
    model: str
    last_user: str
    """The last user message's text (may be empty)."""
    message_count: int
    chunks: int
    first_chunk_s: float | None
    """Seconds from the call to the first chunk; None when no chunk came."""
    duration_s: float
    """Seconds from the call to the recorded end of the stream."""
    usage: TokenUsage | None
    outcome: str
    """``completed (stop)``, ``raised PROVIDER_HTTP_ERROR 429``, ``cancelled (...)``."""
    text: str
    reasoning: str
    tool_calls: list[str]
    """``name(arguments)`` of each complete tool call."""
    attempt: int


def describe_outcome(interaction: Interaction) -> str:
    """A short human description of how the recorded stream ended."""
    outcome = interaction.outcome
    match outcome:
        case Completed():
            finish = next((chunk.reason.kind for chunk in reversed(interaction.chunks) if type(chunk) is Finish), None)
            return f"completed ({finish})" if finish else "completed (no finish chunk)"
        case Raised():
            status = f" {outcome.status}" if outcome.status is not None else ""
            return f"raised {outcome.code}{status}"
        case Cancelled():
            return f"cancelled ({outcome.reason})" if outcome.reason else "cancelled"


def summarize(interaction: Interaction, index: int = 0) -> InteractionSummary:
    """The summary of ``interaction`` (``index`` is its position in the cassette)."""
    request = interaction.request
    last_user = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
    fold = ReplyBuilder(interaction.chunks)
    events = interaction.events
    return InteractionSummary(
        index=index,
        model=request.model,
        last_user=last_user,
        message_count=len(request.messages),
        chunks=len(events),
        first_chunk_s=events[0].t_ns / 1e9 if events else None,
        duration_s=interaction.outcome.t_ns / 1e9,
        usage=fold.usage,
        outcome=describe_outcome(interaction),
        text=fold.text,
        reasoning=fold.reasoning,
        tool_calls=[f"{call.name}({call.arguments})" for call in fold.tool_calls],
        attempt=interaction.attempt,
    )


# -- checking ------------------------------------------------------------------------------------


class CheckProblem(msgspec.Struct, frozen=True, kw_only=True):
    """One reason a cassette file fails ``check_cassette``."""

    path: str
    interaction: int | None
    """The interaction at fault, or None for the file as a whole."""
    rule: str
    """A protocol rule (``block-pairs``...), ``timing``, ``fingerprint``, or an error code (``CASSETTE_CORRUPT``)."""
    detail: str

    def __str__(self) -> str:
        where = "file" if self.interaction is None else f"interaction #{self.interaction}"
        return f"{self.path}: {where}: {self.rule}: {self.detail}"


def protocol_violation(interaction: Interaction) -> ProtocolViolation | None:
    """The first protocol rule the recorded stream breaks, or None; a recording that did not complete need not
    finish."""
    try:
        validate(interaction.chunks, require_finish=type(interaction.outcome) is Completed)
    except ProtocolViolation as violation:
        return violation
    return None


def _check_interaction(path: str, index: int, interaction: Interaction) -> list[CheckProblem]:
    problems: list[CheckProblem] = []
    violation = protocol_violation(interaction)
    if violation is not None:
        problems.append(CheckProblem(path=path, interaction=index, rule=violation.rule, detail=violation.message))
    previous = 0
    for position, event in enumerate(interaction.events):
        if event.t_ns < previous:
            problems.append(
                CheckProblem(
                    path=path,
                    interaction=index,
                    rule="timing",
                    detail=f"chunk #{position} at {event.t_ns} ns is earlier than the one before ({previous} ns)",
                )
            )
            break
        previous = event.t_ns
    if interaction.outcome.t_ns < previous:
        problems.append(
            CheckProblem(
                path=path,
                interaction=index,
                rule="timing",
                detail=f"the stream ends ({interaction.outcome.t_ns} ns) before its last chunk ({previous} ns)",
            )
        )
    late = _beyond_bound(interaction)
    if late is not None:
        problems.append(CheckProblem(path=path, interaction=index, rule="timing", detail=late))
    wrong = _outcome_problem(interaction.outcome)
    if wrong is not None:
        problems.append(CheckProblem(path=path, interaction=index, rule="outcome", detail=wrong))
    request = interaction.request
    if request.fingerprint and request.fingerprint != request_fingerprint(request):
        problems.append(
            CheckProblem(
                path=path, interaction=index, rule="fingerprint", detail="the request fingerprint does not match it"
            )
        )
    return problems


MAX_RETRY_AFTER_S = 86_400.0
"""The longest ``retry_after`` check accepts (a day): providers ask for seconds or minutes, a daily quota for
hours at most; a consumer that honours more (or NaN, or infinity) waits for ever."""
_CODES = frozenset(code.value for code in ErrorCode)


def _outcome_problem(outcome: Outcome) -> str | None:
    """What is wrong with a recorded error outcome: a code chunktape never raises (a replay would raise an
    ``LlmError`` with no stable code), or a ``retry_after`` no consumer can wait (NaN, infinite, negative, huge)."""
    if not isinstance(outcome, Raised):
        return None
    if outcome.code not in _CODES:
        valid = ", ".join(sorted(_CODES))
        return f"the recorded error code {outcome.code!r} is not one chunktape raises (valid: {valid})"
    retry_after = outcome.retry_after
    if retry_after is not None and not (math.isfinite(retry_after) and 0 <= retry_after <= MAX_RETRY_AFTER_S):
        return (
            f"retry_after {retry_after!r} is not a number of seconds from 0 to {MAX_RETRY_AFTER_S:,.0f} (a day): a "
            "client that honours it would wait for ever; fix or re-record it"
        )
    return None


def _beyond_bound(interaction: Interaction) -> str | None:
    """What is recorded later than ``MAX_GAP_NS`` (one hour) after the call, if anything: no real stream waits
    that long, and a recorded-timing replay would sleep it (it caps the sleep and warns)."""
    offsets = [(f"chunk #{position}", event.t_ns) for position, event in enumerate(interaction.events)]
    offsets.append(("the end of the stream", interaction.outcome.t_ns))
    for what, t_ns in offsets:
        if t_ns > MAX_GAP_NS:
            return (
                f"{what} is recorded {_duration(t_ns)} after the call, beyond the "
                f"{_duration(MAX_GAP_NS)} bound (MAX_GAP_NS); fix or re-record its timing"
            )
    return None


def _duration(t_ns: int) -> str:
    seconds = t_ns / 1e9
    if seconds < 2 * 86_400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86_400:.3g} days" if seconds < 2 * 31_557_600 else f"{seconds / 31_557_600:.3g} years"


def check_cassette(
    path: PathLike, *, max_age: timedelta | None = None, now: datetime | None = None
) -> list[CheckProblem]:
    """Every problem with the cassette at ``path``: decoding, version, timing, and the StreamChunk rules; with
    ``max_age``, also a cassette recorded longer ago than that (rule ``stale``, the ``CASSETTE_STALE`` message).

    Timing problems: an event earlier than the one before, an end before the last event, and anything
    recorded more than ``MAX_GAP_NS`` (one hour) after the call. A ``Raised`` status outside 400-599 fails to
    decode (``CASSETTE_CORRUPT`` naming the field); a ``Raised`` code chunktape never raises, or a
    ``retry_after`` that is not 0 to ``MAX_RETRY_AFTER_S`` seconds, is an ``outcome`` problem.

    A recording that raised or was cut short may stop mid-block; what it holds must still follow the rules.
    An empty list means the file passes.
    """
    shown = str(path)
    try:
        cassette = load_cassette(path)
    except LlmError as error:
        detail = error.message.removeprefix(f"{shown}: ")
        return [CheckProblem(path=shown, interaction=None, rule=error.code.value, detail=detail)]
    problems: list[CheckProblem] = []
    if max_age is not None:
        old = stale(cassette, max_age, "", now)
        if old is not None:
            problems.append(CheckProblem(path=shown, interaction=None, rule="stale", detail=old.message))
    for index, interaction in enumerate(cassette.interactions):
        problems.extend(_check_interaction(shown, index, interaction))
    return problems


# -- diffing -------------------------------------------------------------------------------------


class CassetteDiff(msgspec.Struct, frozen=True, kw_only=True):
    """Interaction-level differences between two cassettes; ``same`` when no content differs.

    ``changes`` lists content differences (requests, chunks, text, outcomes, added/removed interactions);
    ``timing`` summarises how the timing shifted, which alone does not make two cassettes differ.
    """

    changes: list[str]
    timing: list[str]

    @property
    def same(self) -> bool:
        return not self.changes


def _outcome_key(outcome: Outcome) -> object:
    """An outcome without its time, for comparing content."""
    return msgspec.structs.replace(outcome, t_ns=0)


def _diff_interaction(index: int, old: Interaction, new: Interaction, names: tuple[str, str]) -> list[str]:
    lines = [f"#{index} request {line}" for line in diff_requests(old.request, new.request, names=names)]
    old_chunks, new_chunks = old.chunks, new.chunks
    if old_chunks != new_chunks:
        first = next(
            (p for p, (a, b) in enumerate(zip(old_chunks, new_chunks, strict=False)) if a != b),
            min(len(old_chunks), len(new_chunks)),
        )
        lines.append(f"#{index} chunks: {len(old_chunks)} -> {len(new_chunks)}, first difference at chunk #{first}")
        a, b = summarize(old, index), summarize(new, index)
        for label, before, after in (("text", a.text, b.text), ("reasoning", a.reasoning, b.reasoning)):
            if before != after:
                lines.append(f"#{index} {label}: {shortened(before)} -> {shortened(after)}")
        if a.tool_calls != b.tool_calls:
            lines.append(f"#{index} tool calls: {a.tool_calls} -> {b.tool_calls}")
        if a.usage != b.usage:
            lines.append(f"#{index} usage: {_usage(a.usage)} -> {_usage(b.usage)}")
    if _outcome_key(old.outcome) != _outcome_key(new.outcome):
        lines.append(f"#{index} outcome: {describe_outcome(old)} -> {describe_outcome(new)}")
    return lines


def _usage(usage: TokenUsage | None) -> str:
    return "none" if usage is None else f"{usage.input_tokens} in / {usage.output_tokens} out"


def _timing(pairs: list[tuple[Interaction, Interaction]]) -> list[str]:
    first: list[float] = []
    total: list[float] = []
    for old, new in pairs:
        if old.events and new.events:
            first.append((new.events[0].t_ns - old.events[0].t_ns) / 1e6)
        total.append((new.outcome.t_ns - old.outcome.t_ns) / 1e6)
    if not total or (not any(first) and not any(total)):
        return []
    lines = []
    if first:
        lines.append(f"time to first chunk: mean shift {sum(first) / len(first):+.1f} ms, largest {_largest(first)} ms")
    lines.append(f"duration: mean shift {sum(total) / len(total):+.1f} ms, largest {_largest(total)} ms")
    return lines


def _largest(values: list[float]) -> str:
    return f"{max(values, key=abs):+.1f}"


def diff_cassettes(
    old: Cassette | PathLike, new: Cassette | PathLike, *, names: tuple[str, str] = ("old", "new")
) -> CassetteDiff:
    """Compare two cassettes interaction by interaction (paired by position); a request's differences name the two
    sides with ``names`` (``chunktape diff A B``: the files' names)."""
    a, b = as_cassette(old), as_cassette(new)
    changes: list[str] = []
    pairs = list(zip(a.interactions, b.interactions, strict=False))
    for index, (before, after) in enumerate(pairs):
        changes.extend(_diff_interaction(index, before, after, names))
    for index in range(len(pairs), len(a.interactions)):
        changes.append(f"#{index} removed: {_one_line(summarize(a.interactions[index], index))}")
    for index in range(len(pairs), len(b.interactions)):
        changes.append(f"#{index} added: {_one_line(summarize(b.interactions[index], index))}")
    return CassetteDiff(changes=changes, timing=_timing(pairs))


def _one_line(summary: InteractionSummary) -> str:
    return f"model {summary.model!r}, last user message {shortened(summary.last_user, 40)}, {summary.outcome}"


CASSETTE_SUFFIXES = (".msgpack", ".json")
"""The suffixes a cassette file can have: ``.json`` is JSON, ``.msgpack`` msgpack."""


class _JsonProbe(msgspec.Struct):
    """The top level every JSON cassette has; the rest is not decoded."""

    version: msgspec.Raw
    interactions: msgspec.Raw


def looks_like_cassette(path: PathLike) -> bool:
    """False for a ``.json`` file that is valid JSON but not a cassette (no top-level ``version`` and
    ``interactions``: a scenario file, a config); True for anything else, so a corrupt cassette still counts.
    """
    path = Path(path)
    if path.suffix.lower() != ".json":
        return True
    try:
        data = read_user_file(path)
    except UnreadableFile:
        return True  # check reports it
    try:
        msgspec.json.decode(data, type=_JsonProbe)
    except msgspec.ValidationError:
        return False  # valid JSON of another shape
    except msgspec.DecodeError:
        return True  # not even JSON: a damaged cassette, for check to report
    return True


class CassetteFiles(msgspec.Struct, frozen=True, kw_only=True):
    """What ``find_cassette_files`` found: the files to check, and the JSON files in folders that are not cassettes."""

    files: list[Path]
    skipped: list[Path]


def find_cassette_files(paths: Iterable[PathLike]) -> CassetteFiles:
    """The files to check: each file as given, and every cassette ``*.msgpack`` / ``*.json`` below each folder.

    In folders, ``*.json`` files that are not cassettes (``looks_like_cassette``) are skipped and listed in
    ``skipped``; a file given by name is always checked. A path that does not exist is kept, so checking it
    reports ``CASSETTE_NOT_FOUND``.
    """
    found: list[Path] = []
    skipped: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            for candidate in sorted(p for p in path.rglob("*") if p.suffix.lower() in CASSETTE_SUFFIXES):
                if not candidate.is_file():
                    continue
                (found if looks_like_cassette(candidate) else skipped).append(candidate)
        else:
            found.append(path)
    files = list(dict.fromkeys(found))
    return CassetteFiles(files=files, skipped=[p for p in dict.fromkeys(skipped) if p not in files])
