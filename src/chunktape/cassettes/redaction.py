"""Keeping credentials out of cassettes: find them (also split across deltas) and redact them.

Credentials come from three places: what the recorded adapter declares (``LlmAdapter.secrets``), the values
of environment variables named like ``*_API_KEY`` / ``*_TOKEN`` / ``*_SECRET``, and key-shaped strings
(``sk-...``, ``ghp_...``, ``AKIA...``, bearer tokens). Streamed text and tool arguments are checked on the
reassembled block, so a key split over two deltas is still found.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgspec

from chunktape.cassettes.codec import LazyCassette, PathLike, as_cassette
from chunktape.cassettes.model import Cassette, Event, Interaction, Raised, RecordedRequest
from chunktape.errors import ErrorCode, LlmError
from chunktape.protocol import (
    BlockEnd,
    ReasoningBlock,
    ReasoningDelta,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
)

__all__ = ["KEY_PATTERNS", "REDACTED", "check_secrets", "env_secrets", "find_secrets", "redact", "redact_request"]

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8
"""Shorter values (``TOKEN=1``) are too likely to occur by chance to be treated as secrets."""

KEY_PATTERNS: dict[str, re.Pattern[str]] = {
    "api key (sk-...)": re.compile(r"\bsk-[A-Za-z0-9_\-]{20,}"),
    "GitHub token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    "AWS access key": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "Google API key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    "Slack token": re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    "bearer token": re.compile(r"\b[Bb]earer\s+[A-Za-z0-9._~+/\-]{20,}=*"),
}
_ENV_NAME = re.compile(r".+_(?:API_KEY|TOKEN|SECRET)$")
_KEY_PREFIXES = ("sk-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "AKIA", "AIza", "xox", "earer")
"""A key-shaped string contains one of these; text without any of them skips the (slower) regexes."""
_screen_encoder = msgspec.msgpack.Encoder()


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
            yield f"interaction #{number} chunk #{position} tool call", f"{chunk.id or ''} {chunk.name or ''}"
        elif type(chunk) is BlockEnd:
            block = chunk.block
            where = f"interaction #{number} chunk #{position} block-end"
            if type(block) is ToolCallBlock:
                yield where, f"{block.id} {block.name} {block.arguments}"
            else:
                yield where, block.text  # type: ignore[union-attr]
    if type(interaction.outcome) is Raised:
        yield f"interaction #{number} error message", interaction.outcome.message


def _screen_text(interaction: Interaction) -> tuple[str, bytes]:
    """Everything in ``interaction`` that can hold a credential, as little text as possible.

    Returns the streamed deltas in order (blocks separated by NUL, so a key split over deltas reassembles)
    and the msgpack encoding of the rest: the request, the outcome, tool-call ids and names, and any
    block-end whose content is not exactly what its deltas streamed. msgpack keeps strings as raw UTF-8,
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
    return sorted({secret for secret in secrets if len(secret) >= MIN_SECRET_LENGTH}, key=len, reverse=True)


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
        for secret in literals:
            if secret in text:
                findings.append(f"credential {_mask(secret)} in {where}")
        if patterns:
            for label, pattern in KEY_PATTERNS.items():
                for match in pattern.finditer(text):
                    if match.group() not in allowed and not any(match.group() in s for s in literals):
                        findings.append(f"{label} {_mask(match.group())} in {where}")
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


def _spans(text: str, secrets: Sequence[str], patterns: bool) -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = []
    for secret in secrets:
        start = text.find(secret)
        while start >= 0:
            found.append((start, start + len(secret)))
            start = text.find(secret, start + 1)
    if patterns:
        for pattern in KEY_PATTERNS.values():
            found.extend(match.span() for match in pattern.finditer(text))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(found):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


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
                )
            elif type(block) is TextBlock or type(block) is ReasoningBlock:
                new_block = msgspec.structs.replace(block, text=_redact_text(block.text, secrets, patterns))
            if new_block != block:
                new = msgspec.structs.replace(chunk, block=new_block)
        elif type(chunk) is ToolCallDelta and chunk.name is not None:
            new = msgspec.structs.replace(chunk, name=_redact_text(chunk.name, secrets, patterns))
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
    tags = {key: _redact_text(value, usable, patterns) for key, value in cassette.meta.tags.items()}
    meta = msgspec.structs.replace(cassette.meta, tags=tags) if tags != cassette.meta.tags else cassette.meta
    return msgspec.structs.replace(cassette, meta=meta, interactions=interactions)
