"""Keeping credentials out of cassettes: find them (also split across deltas) and redact them.

Credentials come from three places: what the recorded adapter declares (``LlmAdapter.secrets``), the values
of environment variables named like ``*_API_KEY`` / ``*_TOKEN`` / ``*_SECRET``, and key-shaped strings
(``sk-...``, ``ghp_...``, ``AKIA...``, bearer tokens). Streamed text and tool arguments are checked on the
reassembled block, so a key split over two deltas is still found; a quoted JSON string holding escapes (tool
arguments) is also checked decoded, so an escape (``\n``, ``\u000a``) right before a key does not hide it.

A key-shaped string must not follow a letter or digit (``task-...`` is not a key), but may follow ``_``,
punctuation or a JSON escape. Redaction runs to a fixed point, so replacing one credential never makes a new
one appear (``...789sk-`` becomes ``[REDACTED]sk-``, which is itself a key-shaped start).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from chunktape.cassettes.codec import LazyCassette, PathLike, as_cassette
from chunktape.cassettes.model import Cassette, CassetteMeta, Event, Interaction, Raised, RecordedRequest
from chunktape.errors import ErrorCode, LlmError
from chunktape.protocol import (
    BlockEnd,
    Finish,
    ReasoningBlock,
    ReasoningDelta,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
)

__all__ = [
    "KEY_PATTERNS",
    "REDACTED",
    "check_secrets",
    "env_secrets",
    "find_secrets",
    "redact",
    "redact_request",
    "redact_text",
    "secrets_to_redact",
]

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8
"""Shorter values (``TOKEN=1``) are too likely to occur by chance to be treated as secrets."""

_START = r"(?:(?<![^\W_])|(?<=\\[bfnrt]))"
"""Where a key may start: not right after a letter or digit (``\\b`` also refused ``_`` and the ``n`` of a
JSON ``\\n``), or right after a JSON escape."""
_END = r"(?![^\W_])"

KEY_PATTERNS: dict[str, re.Pattern[str]] = {
    "api key (sk-...)": re.compile(_START + r"sk-[A-Za-z0-9_\-]{20,}"),
    "GitHub token": re.compile(_START + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    "AWS access key": re.compile(_START + r"AKIA[0-9A-Z]{16}" + _END),
    "Google API key": re.compile(_START + r"AIza[0-9A-Za-z_\-]{35}"),
    "Slack token": re.compile(_START + r"xox[abposr]-[A-Za-z0-9\-]{10,}"),
    "bearer token": re.compile(_START + r"[Bb]earer\s+[A-Za-z0-9._~+/\-]{20,}=*"),
}
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_json_string = msgspec.json.Decoder(str)
_ENV_NAME = re.compile(r".+_(?:API_KEY|TOKEN|SECRET)$")
_KEY_PREFIXES = ("sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "AKIA", "AIza", "xox", "earer")
"""A key-shaped string contains one of these; text without any of them skips the (slower) regexes."""
_screen_encoder = msgspec.msgpack.Encoder()
_Match = tuple[str, str, int, int]


def env_secrets(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Values of environment variables named ``*_API_KEY``, ``*_TOKEN`` or ``*_SECRET``, by name."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in environ.items()
        if _ENV_NAME.match(name.upper()) and len(value) >= MIN_SECRET_LENGTH
    }


def _mask(secret: str) -> str:
    return f"{secret[:4]}…({len(secret)} chars)"


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _strings(item, f"{path}[{position}]")


_DELTAS = (TextDelta, ReasoningDelta, ToolCallDelta)


def _delta_text(chunk: TextDelta | ReasoningDelta | ToolCallDelta) -> str:
    return chunk.arguments_delta if type(chunk) is ToolCallDelta else chunk.text  # type: ignore[union-attr]


def _blocks(events: Sequence[Event]) -> dict[tuple[int, type], list[int]]:
    """Event positions of the deltas of each block, keyed by (index, delta type), in stream order."""
    blocks: dict[tuple[int, type], list[int]] = {}
    for position, event in enumerate(events):
        kind = type(event.chunk)
        if kind is TextDelta or kind is ReasoningDelta or kind is ToolCallDelta:
            blocks.setdefault((event.chunk.index, kind), []).append(position)  # type: ignore[union-attr]
    return blocks


def _texts(interaction: Interaction, number: int) -> Iterator[tuple[str, str]]:
    """Every string of an interaction worth scanning, with where it is; streamed blocks reassembled."""
    yield from _strings(msgspec.to_builtins(interaction.request), f"interaction #{number} request")
    events = interaction.events
    for (index, kind), positions in _blocks(events).items():
        text = "".join(_delta_text(events[p].chunk) for p in positions)  # type: ignore[arg-type]
        label = "arguments" if kind is ToolCallDelta else "text"
        yield f"interaction #{number} block {index} streamed {label}", text
    for position, event in enumerate(events):
        chunk = event.chunk
        if type(chunk) is ToolCallDelta:
            where = f"interaction #{number} chunk #{position} tool call"
            if chunk.id is not None:
                yield where, chunk.id
            if chunk.name is not None:
                yield where, chunk.name
        elif type(chunk) is BlockEnd:
            block = chunk.block
            where = f"interaction #{number} chunk #{position} block-end"
            if type(block) is ToolCallBlock:
                yield where, block.id
                yield where, block.name
                yield where, block.arguments
            else:
                yield where, block.text  # type: ignore[union-attr]
        elif type(chunk) is Finish and chunk.reason.detail is not None:
            yield f"interaction #{number} chunk #{position} finish detail", chunk.reason.detail
    if type(interaction.outcome) is Raised:
        yield f"interaction #{number} error message", interaction.outcome.message


def _screen_text(interaction: Interaction) -> tuple[str, bytes]:
    """Everything in ``interaction`` that can hold a credential, as little text as possible.

    Returns the streamed deltas in order (blocks separated by NUL, so a key split over deltas reassembles)
    and the msgpack encoding of the rest: the request, the outcome, tool-call ids and names, a finish's
    detail, and any block-end whose content is not exactly what its deltas streamed. msgpack keeps strings as raw UTF-8,
    so a literal anywhere in those fields shows up verbatim in the bytes.
    """
    parts: list[str] = []
    others: list[object] = [interaction.request, interaction.outcome]
    block_start = 0
    for event in interaction.events:
        chunk = event.chunk
        kind = type(chunk)
        if kind is TextDelta or kind is ReasoningDelta:
            parts.append(chunk.text)  # type: ignore[union-attr]
        elif kind is ToolCallDelta:
            parts.append(chunk.arguments_delta)  # type: ignore[union-attr]
            if chunk.id is not None or chunk.name is not None:  # type: ignore[union-attr]
                others.append(chunk)
        elif kind is BlockEnd:
            block = chunk.block  # type: ignore[union-attr]
            streamed = "".join(parts[block_start:])
            if type(block) is ToolCallBlock:
                others.append((block.id, block.name))
                if block.arguments != streamed:
                    others.append(block.arguments)
            elif block.text != streamed:  # type: ignore[union-attr]
                others.append(block.text)  # type: ignore[union-attr]
            parts.append("\x00")
            block_start = len(parts)
        else:
            if kind is Finish and chunk.reason.detail is not None:  # type: ignore[union-attr]
                others.append(chunk.reason.detail)  # type: ignore[union-attr]
            parts.append("\x00")
            block_start = len(parts)
    return "".join(parts), _screen_encoder.encode(others)


def _may_hold(interaction: Interaction, literals: Sequence[str], patterns: bool) -> bool:
    """A cheap screen at C speed: can ``interaction`` hold a credential at all? Hits get the detailed walk."""
    streamed, rest = _screen_text(interaction)
    needles = [*literals, *(_KEY_PREFIXES if patterns else ())]
    return any(needle in streamed or needle.encode() in rest for needle in needles)


def _all_texts(cassette: Cassette, literals: Sequence[str], patterns: bool) -> Iterator[tuple[str, str]]:
    yield from _strings(msgspec.to_builtins(cassette.meta), "meta")
    for number, interaction in enumerate(cassette.interactions):
        if _may_hold(interaction, literals, patterns):
            yield from _texts(interaction, number)


def _usable(secrets: Iterable[str]) -> list[str]:
    """Long enough to be a credential, and not part of the marker itself (redacting would never end)."""
    usable = {secret for secret in secrets if len(secret) >= MIN_SECRET_LENGTH and secret not in REDACTED}
    return sorted(usable, key=len, reverse=True)


def _matches(text: str, secrets: Sequence[str], patterns: bool, *, decode: bool = True) -> Iterator[_Match]:
    """Every credential in ``text``: (label, what matched, start, end); the label is "" for a literal secret.

    With ``decode``, each quoted JSON string holding an escape is also searched decoded; a hit there spans
    the string's whole content in ``text`` (its raw form may not hold the credential contiguously).
    """
    for secret in secrets:
        start = text.find(secret)
        while start >= 0:
            yield "", secret, start, start + len(secret)
            start = text.find(secret, start + 1)
    if patterns:
        for label, pattern in KEY_PATTERNS.items():
            for match in pattern.finditer(text):
                yield label, match.group(), match.start(), match.end()
    if decode and "\\" in text:
        for token in _JSON_STRING.finditer(text):
            raw = token.group()
            if "\\" not in raw:
                continue
            try:
                decoded = _json_string.decode(raw)
            except msgspec.DecodeError:
                continue
            for label, found, _, _ in _matches(decoded, secrets, patterns):
                yield label, found, token.start() + 1, token.end() - 1


def find_secrets(
    cassette: Cassette | LazyCassette | PathLike,
    secrets: Iterable[str] = (),
    *,
    allow: Iterable[str] = (),
    patterns: bool = True,
) -> list[str]:
    """Where ``cassette`` still holds one of ``secrets`` or a key-shaped string; secrets are shown masked."""
    cassette = as_cassette(cassette)
    allowed = set(allow)
    literals = [secret for secret in _usable(secrets) if secret not in allowed]
    findings: list[str] = []
    for where, text in _all_texts(cassette, literals, patterns):
        for label, found, _, _ in _matches(text, literals, patterns):
            if not label:
                findings.append(f"credential {_mask(found)} in {where}")
            elif found not in allowed and not any(found in secret for secret in literals):
                findings.append(f"{label} {_mask(found)} in {where}")
    return list(dict.fromkeys(findings))


def check_secrets(
    cassette: Cassette | LazyCassette | PathLike,
    secrets: Iterable[str] = (),
    *,
    allow: Iterable[str] = (),
    destination: object = "the cassette",
) -> None:
    """Raise ``SECRET_DETECTED`` if ``cassette`` holds a credential that is not explicitly allowed."""
    findings = find_secrets(cassette, secrets, allow=allow)
    if findings:
        shown = "; ".join(findings[:5]) + (f"; and {len(findings) - 5} more" if len(findings) > 5 else "")
        raise LlmError(f"{destination} would contain a credential: {shown}", ErrorCode.SECRET_DETECTED)


# -- redaction ---------------------------------------------------------------------------------


def _merge(found: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _original(position: int, spans: Sequence[tuple[int, int]], *, end: bool) -> int:
    """Where ``position`` in ``_replace(text, spans)`` is in ``text``; inside a marker: the whole span it replaced."""
    shift = 0  # original position minus redacted position, in the plain text before the current marker
    for start, stop in spans:
        marker_start = start - shift
        marker_end = marker_start + len(REDACTED)
        if position < marker_start or (end and position == marker_start):
            return position + shift
        if position < marker_end or (end and position == marker_end):
            return stop if end else start
        shift = stop - marker_end
    return position + shift


def _spans(text: str, secrets: Sequence[str], patterns: bool) -> list[tuple[int, int]]:
    """The spans of ``text`` to replace so that the result holds no credential at all.

    Replacing can create a match (``789sk-...`` -> ``[REDACTED]sk-...``) or reveal one in a JSON string
    whose raw form hid it, so the redacted text is searched again and every new match, mapped back onto
    ``text``, widens the spans, until nothing new turns up. Each round covers more of ``text``, so it ends.
    """
    spans = _merge((start, end) for _, _, start, end in _matches(text, secrets, patterns, decode=False))
    if not spans and "\\" not in text:
        return spans
    while True:
        redacted = _replace(text, spans) if spans else text
        new = [
            (_original(start, spans, end=False), _original(end, spans, end=True))
            for _, _, start, end in _matches(redacted, secrets, patterns)
        ]
        new = [(a, b) for a, b in new if not any(start <= a and b <= end for start, end in spans)]
        if not new:
            return spans
        spans = _merge([*spans, *new])


def _replace(text: str, spans: Sequence[tuple[int, int]]) -> str:
    parts, position = [], 0
    for start, end in spans:
        parts.append(text[position:start])
        parts.append(REDACTED)
        position = end
    parts.append(text[position:])
    return "".join(parts)


def _redact_text(text: str, secrets: Sequence[str], patterns: bool) -> str:
    spans = _spans(text, secrets, patterns)
    return _replace(text, spans) if spans else text


def _redact_pieces(pieces: Sequence[str], spans: Sequence[tuple[int, int]]) -> list[str]:
    """Redact spans of the concatenation piece by piece: the marker goes where a span starts."""
    whole = "".join(pieces)
    result, low = [], 0
    for piece in pieces:
        high = low + len(piece)
        parts, position = [], low
        for start, end in spans:
            if end <= low or start >= high:
                continue
            if start >= low:
                parts.append(whole[position:start])
                parts.append(REDACTED)
            position = max(position, min(end, high))
        parts.append(whole[position:high])
        result.append("".join(parts))
        low = high
    return result


def _redact_value(value: Any, secrets: Sequence[str], patterns: bool) -> Any:
    if isinstance(value, str):
        return _redact_text(value, secrets, patterns)
    if isinstance(value, dict):
        return {key: _redact_value(item, secrets, patterns) for key, item in value.items()}
    if isinstance(value, list):
        return [_redact_value(item, secrets, patterns) for item in value]
    return value


def _redact_request(request: RecordedRequest, secrets: Sequence[str], patterns: bool) -> RecordedRequest:
    plain = msgspec.to_builtins(request)
    cleaned = _redact_value(plain, secrets, patterns)
    if cleaned == plain:
        return request
    return RecordedRequest.from_options(msgspec.convert(cleaned, RecordedRequest))


def secrets_to_redact(
    redact: bool | Sequence[str], *, declared: Iterable[str] = (), allow: Iterable[str] = ()
) -> list[str]:
    """The literal secrets a recorder redacts, and so a replayer too (they must agree, or replays miss).

    ``redact``: False redacts nothing; True the ``declared`` credentials (an adapter's ``secrets``) and the values
    of ``*_API_KEY`` / ``*_TOKEN`` / ``*_SECRET`` environment variables; a sequence adds those literals.
    ``allow`` lists values that stay as they are.
    """
    if redact is False:
        return []
    secrets = [*declared, *env_secrets().values()]
    if not isinstance(redact, bool):
        secrets.extend(redact)
    allowed = set(allow)
    return [secret for secret in secrets if secret not in allowed]


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with ``secrets`` and key-shaped strings replaced: for messages shown to people (CLI errors)."""
    return _redact_text(text, _usable(secrets), True)


def redact_request(request: RecordedRequest, secrets: Iterable[str]) -> RecordedRequest:
    """``request`` with every occurrence of ``secrets`` replaced, as the recorder stores it.

    A replayer applies this to the live request so that a request recorded with a credential in it still
    matches its (redacted) recording.
    """
    usable = _usable(secrets)
    return _redact_request(request, usable, patterns=False) if usable else request


def redact_interaction(interaction: Interaction, secrets: Sequence[str], *, patterns: bool = False) -> Interaction:
    """``interaction`` with every occurrence of ``secrets`` (and key patterns if asked) replaced."""
    secrets = _usable(secrets)
    if not _may_hold(interaction, secrets, patterns):
        return interaction
    events = list(interaction.events)
    changed = False
    for (_, kind), positions in _blocks(events).items():
        pieces = [_delta_text(events[p].chunk) for p in positions]  # type: ignore[arg-type]
        spans = _spans("".join(pieces), secrets, patterns)
        if not spans:
            continue
        changed = True
        for position, piece in zip(positions, _redact_pieces(pieces, spans), strict=True):
            event = events[position]
            field = "arguments_delta" if kind is ToolCallDelta else "text"
            chunk = msgspec.structs.replace(event.chunk, **{field: piece})
            events[position] = msgspec.structs.replace(event, chunk=chunk)
    for position, event in enumerate(events):
        chunk = event.chunk
        new: Any = chunk
        if type(chunk) is BlockEnd:
            block = chunk.block
            if type(block) is ToolCallBlock:
                new_block: Any = msgspec.structs.replace(
                    block,
                    arguments=_redact_text(block.arguments, secrets, patterns),
                    name=_redact_text(block.name, secrets, patterns),
                    id=_redact_text(block.id, secrets, patterns),
                )
            elif type(block) is TextBlock or type(block) is ReasoningBlock:
                new_block = msgspec.structs.replace(block, text=_redact_text(block.text, secrets, patterns))
            if new_block != block:
                new = msgspec.structs.replace(chunk, block=new_block)
        elif type(chunk) is ToolCallDelta and (chunk.name is not None or chunk.id is not None):
            # the id the same way as the block-end's, so the two still agree
            new = msgspec.structs.replace(
                chunk,
                name=None if chunk.name is None else _redact_text(chunk.name, secrets, patterns),
                id=None if chunk.id is None else _redact_text(chunk.id, secrets, patterns),
            )
        elif type(chunk) is Finish and chunk.reason.detail is not None:
            reason = msgspec.structs.replace(chunk.reason, detail=_redact_text(chunk.reason.detail, secrets, patterns))
            new = msgspec.structs.replace(chunk, reason=reason)
        if new is not chunk and new != chunk:
            events[position] = msgspec.structs.replace(event, chunk=new)
            changed = True
    request = _redact_request(interaction.request, secrets, patterns)
    outcome = interaction.outcome
    if type(outcome) is Raised:
        outcome = msgspec.structs.replace(outcome, message=_redact_text(outcome.message, secrets, patterns))
    if not changed and request is interaction.request and outcome == interaction.outcome:
        return interaction
    return msgspec.structs.replace(interaction, request=request, events=events, outcome=outcome)


def redact(
    cassette: Cassette | LazyCassette | PathLike, secrets: Iterable[str] = (), *, patterns: bool = True
) -> Cassette:
    """A copy of ``cassette`` with ``secrets`` (and, by default, key-shaped strings) replaced by ``[REDACTED]``.

    Streamed deltas are redacted on the reassembled block, so the deltas still concatenate to the
    (redacted) block-end and the stream stays valid.
    """
    cassette = as_cassette(cassette)
    usable = _usable(secrets)
    interactions = [redact_interaction(item, usable, patterns=patterns) for item in cassette.interactions]
    plain = msgspec.to_builtins(cassette.meta)
    cleaned = _redact_value(plain, usable, patterns)
    meta = cassette.meta if cleaned == plain else msgspec.convert(cleaned, CassetteMeta)
    return msgspec.structs.replace(cassette, meta=meta, interactions=interactions)
