"""Keeping credentials out of cassettes: find them (also split across deltas) and redact them.

What a credential looks like lives in ``chunktape._secrets`` (literal values, key shapes, JSON escapes and
base64); this module walks a cassette with it. Credentials come from what the recorded adapter declares
(``LlmAdapter.secrets``), the environment (``env_secrets``) and key-shaped strings. Streamed text and tool
arguments are checked on the reassembled block (by index, so the deltas of parallel tool calls may
interleave, and a block cut short before its end counts too), so a key split over deltas is still found.
Recorded tool executions (their arguments, results and content) are walked and redacted too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from chunktape._cassettes.codec import LazyCassette, PathLike, as_cassette
from chunktape._cassettes.model import (
    Cancelled,
    Cassette,
    CassetteMeta,
    Event,
    Interaction,
    Raised,
    RecordedRequest,
    ResponseMeta,
    ToolRun,
)
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    BlockEnd,
    BlockStart,
    Finish,
    ProviderEvent,
    ReasoningBlock,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
)
from chunktape._secrets import KEY_PATTERNS, REDACTED, Scanner, env_secrets, mask, redact_text, scanner, usable

__all__ = [
    "KEY_PATTERNS",
    "REDACTED",
    "check_secrets",
    "env_secrets",
    "find_secrets",
    "redact",
    "redact_request",
    "redact_text",
    "redact_tool_runs",
    "secrets_to_redact",
]

_screen_encoder = msgspec.msgpack.Encoder()
_screen_fallback = msgspec.json.Encoder()


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{path} key", key
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for position, item in enumerate(value):
            yield from _strings(item, f"{path}[{position}]")


def _rich(chunk: Any) -> bool:
    """Whether ``chunk`` holds strings beyond the ones walked by name (a provider event, a block's opening, a
    citation, a signature, a server tool's blocks, a usage or finish's provider fields): those are walked whole."""
    kind = type(chunk)
    if kind is ProviderEvent:
        return True
    if kind is BlockStart:
        return chunk.id is not None or bool(chunk.opening)
    if kind is TextDelta:
        return chunk.citation is not None
    if kind is ReasoningDelta:
        return chunk.signature is not None
    if kind is BlockEnd:
        block = chunk.block
        if type(block) is TextBlock:
            return block.citations is not None
        if type(block) is ReasoningBlock:
            return block.signature is not None or block.redacted is not None or block.encrypted is not None
        return type(block) is not ToolCallBlock
    if kind is UsageChunk:
        return bool(chunk.usage.extra)
    if kind is Finish:
        return chunk.reason.details is not None or chunk.reason.stop_sequence is not None
    return False


def _redact_chunk(chunk: StreamChunk, scan: Scanner) -> StreamChunk:
    """A rich chunk with every string in it redacted (its JSON values walked, then typed again)."""
    plain = msgspec.to_builtins(chunk)
    cleaned = _redact_value(plain, scan)
    if cleaned == plain:
        return chunk
    redacted: StreamChunk = msgspec.convert(cleaned, StreamChunk)
    return redacted


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
        if _rich(chunk):
            yield from _strings(msgspec.to_builtins(chunk), f"interaction #{number} chunk #{position}")
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
            elif type(block) is TextBlock or type(block) is ReasoningBlock:
                yield where, block.text
        elif type(chunk) is Finish and chunk.reason.detail is not None:
            yield f"interaction #{number} chunk #{position} finish detail", chunk.reason.detail
    outcome = interaction.outcome
    where = f"interaction #{number} outcome"
    if type(outcome) is Raised:
        yield f"interaction #{number} error message", outcome.message
        if outcome.exception_type is not None:
            yield where, outcome.exception_type
    elif type(outcome) is Cancelled and outcome.reason is not None:
        yield where, outcome.reason


_BLOCK_DELTA: dict[type, type] = {ToolCallBlock: ToolCallDelta, TextBlock: TextDelta, ReasoningBlock: ReasoningDelta}


def _screen_text(interaction: Interaction) -> str:
    """Everything in ``interaction`` that can hold a credential, as little text as possible.

    The streamed deltas reassembled per block (by index, so interleaved deltas of parallel tool calls and a
    block cut before its end reassemble too), blocks separated by NUL, then the msgpack encoding of the rest:
    the request, the outcome, tool-call ids and names, a finish's detail, and any block-end whose content is
    not exactly what its deltas streamed. msgpack keeps strings as raw UTF-8, so a literal anywhere in those
    fields shows up verbatim (its framing bytes decode to escapes that glue to nothing).
    """
    blocks: dict[tuple[int, type], list[str]] = {}
    others: list[object] = [interaction.request, interaction.outcome]
    last_index, last_kind = -1, None
    first: list[str] = []
    append: Callable[[str], None] = first.append
    for event in interaction.events:
        chunk: Any = event.chunk
        kind = type(chunk)
        if kind is TextDelta:  # most chunks: ``_rich`` inlined for them
            if chunk.citation is not None:
                others.append(chunk)
            text = chunk.text
        elif kind is ReasoningDelta:
            if chunk.signature is not None:
                others.append(chunk)
            text = chunk.text
        else:
            if _rich(chunk):
                others.append(chunk)
            if kind is ToolCallDelta:
                text = chunk.arguments_delta
                if chunk.id is not None or chunk.name is not None:
                    others.append(chunk)
            else:
                if kind is BlockEnd:
                    block = chunk.block
                    streamed = "".join(blocks.get((chunk.index, _BLOCK_DELTA.get(type(block), ToolCallDelta)), ()))
                    if type(block) is ToolCallBlock:
                        others.append((block.id, block.name))
                        if block.arguments != streamed:
                            others.append(block.arguments)
                    elif isinstance(block, TextBlock | ReasoningBlock) and block.text != streamed:
                        others.append(block.text)
                    # any other block is rich: walked whole above
                elif kind is Finish and chunk.reason.detail is not None:
                    others.append(chunk.reason.detail)
                continue
        if chunk.index != last_index or kind is not last_kind:
            last_index, last_kind = chunk.index, kind
            append = blocks.setdefault((last_index, kind), []).append
        append(text)
    try:
        rest = _screen_encoder.encode(others).decode("utf-8", "surrogateescape")
    except OverflowError:  # an integer past msgpack's 64 bits: JSON spells out every string as well
        rest = _screen_fallback.encode(others).decode("utf-8", "surrogateescape")
    return "\x00".join(["".join(parts) for parts in blocks.values()] + [rest])


def _may_hold(interaction: Interaction, scan: Scanner) -> bool:
    """A cheap screen at C speed: can ``interaction`` hold a credential at all? Hits get the detailed walk."""
    return scan.may_hold(_screen_text(interaction))


def _all_texts(cassette: Cassette, scan: Scanner) -> Iterator[tuple[str, str]]:
    yield from _strings(msgspec.to_builtins(cassette.meta), "meta")
    for number, interaction in enumerate(cassette.interactions):
        if _may_hold(interaction, scan):
            yield from _texts(interaction, number)
    for number, run in enumerate(cassette.tool_runs):
        yield from _strings(msgspec.to_builtins(run), f"tool run #{number} ({run.name})")


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
    literals = [secret for secret in usable(secrets) if secret not in allowed]
    scan = scanner(literals, patterns=patterns)
    findings: list[str] = []
    for where, text in _all_texts(cassette, scan):
        for label, found, _, _ in scan.matches(text):
            if not label:
                findings.append(f"credential {mask(found)} in {where}")
            elif found not in allowed and not any(found in secret for secret in literals):
                findings.append(f"{label} {mask(found)} in {where}")
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


def _redact_value(value: Any, scan: Scanner) -> Any:
    if isinstance(value, str):
        return scan.redact(value)
    if isinstance(value, dict):
        return {
            scan.redact(key) if isinstance(key, str) else key: _redact_value(item, scan) for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redact_value(item, scan) for item in value]
    return value


def _redact_request(request: RecordedRequest, scan: Scanner) -> RecordedRequest:
    plain = msgspec.to_builtins(request)
    cleaned = _redact_value(plain, scan)
    if cleaned == plain:
        return request
    return RecordedRequest.from_options(msgspec.convert(cleaned, RecordedRequest))


def secrets_to_redact(
    redact: bool | Sequence[str], *, declared: Iterable[str] = (), allow: Iterable[str] = ()
) -> list[str]:
    """The literal secrets a recorder redacts, and so a replayer too (they must agree, or replays miss).

    ``redact``: False redacts nothing; True the ``declared`` credentials (an adapter's ``secrets``) and the
    credentials in the environment (``env_secrets``); a sequence adds those literals. ``allow`` lists values
    that stay as they are.
    """
    if redact is False:
        return []
    secrets = [*declared, *env_secrets().values()]
    if not isinstance(redact, bool):
        secrets.extend(redact)
    allowed = set(allow)
    return [secret for secret in secrets if secret not in allowed]


def redact_request(request: RecordedRequest, secrets: Iterable[str]) -> RecordedRequest:
    """``request`` with every occurrence of ``secrets`` replaced, as the recorder stores it.

    A replayer applies this to the live request so that a request recorded with a credential in it still
    matches its (redacted) recording.
    """
    scan = scanner(secrets, patterns=False)
    return _redact_request(request, scan) if scan.literals else request


def redact_interaction(interaction: Interaction, secrets: Sequence[str], *, patterns: bool = False) -> Interaction:
    """``interaction`` with every occurrence of ``secrets`` (and key patterns if asked) replaced, its recorded
    response metadata (``ResponseMeta``: headers, ids, provider fields) included."""
    scan = scanner(secrets, patterns=patterns)
    response = interaction.response
    if response is not None:
        text = _meta_encoder.encode(response).decode()
        cleaned = scan.redact(text)
        if cleaned != text:
            interaction = msgspec.structs.replace(interaction, response=_meta_decoder.decode(cleaned))
    return _redact_stream(interaction, scan)


_meta_encoder = msgspec.json.Encoder()
_meta_decoder = msgspec.json.Decoder(ResponseMeta)


def _redact_stream(interaction: Interaction, scan: Scanner) -> Interaction:
    if not _may_hold(interaction, scan):
        return interaction
    events = list(interaction.events)
    changed = False
    for (_, kind), positions in _blocks(events).items():
        pieces = scan.redact_pieces([_delta_text(events[p].chunk) for p in positions])  # type: ignore[arg-type]
        if pieces is None:
            continue
        changed = True
        field = "arguments_delta" if kind is ToolCallDelta else "text"
        for position, piece in zip(positions, pieces, strict=True):
            event = events[position]
            chunk = msgspec.structs.replace(event.chunk, **{field: piece})
            events[position] = msgspec.structs.replace(event, chunk=chunk)
    for position, event in enumerate(events):
        chunk = event.chunk
        new: Any = chunk
        if _rich(chunk):
            new = _redact_chunk(chunk, scan)
        elif type(chunk) is BlockEnd:
            block = chunk.block
            if type(block) is ToolCallBlock:
                new_block: Any = msgspec.structs.replace(
                    block,
                    arguments=scan.redact(block.arguments),
                    name=scan.redact(block.name),
                    id=scan.redact(block.id),
                )
            elif type(block) is TextBlock or type(block) is ReasoningBlock:
                new_block = msgspec.structs.replace(block, text=scan.redact(block.text))
            if new_block != block:
                new = msgspec.structs.replace(chunk, block=new_block)
        elif type(chunk) is ToolCallDelta and (chunk.name is not None or chunk.id is not None):
            # the id the same way as the block-end's, so the two still agree
            new = msgspec.structs.replace(
                chunk,
                name=None if chunk.name is None else scan.redact(chunk.name),
                id=None if chunk.id is None else scan.redact(chunk.id),
            )
        elif type(chunk) is Finish and chunk.reason.detail is not None:
            reason = msgspec.structs.replace(chunk.reason, detail=scan.redact(chunk.reason.detail))
            new = msgspec.structs.replace(chunk, reason=reason)
        if new is not chunk and new != chunk:
            events[position] = msgspec.structs.replace(event, chunk=new)
            changed = True
    request = _redact_request(interaction.request, scan)
    outcome = interaction.outcome
    if type(outcome) is Raised:
        exception_type = None if outcome.exception_type is None else scan.redact(outcome.exception_type)
        outcome = msgspec.structs.replace(outcome, message=scan.redact(outcome.message), exception_type=exception_type)
    elif type(outcome) is Cancelled and outcome.reason is not None:
        outcome = msgspec.structs.replace(outcome, reason=scan.redact(outcome.reason))
    if not changed and request is interaction.request and outcome == interaction.outcome:
        return interaction
    return msgspec.structs.replace(interaction, request=request, events=events, outcome=outcome)


def redact_tool_runs(tool_runs: Sequence[ToolRun], secrets: Sequence[str], *, patterns: bool = False) -> list[ToolRun]:
    """``tool_runs`` with every occurrence of ``secrets`` (and key patterns if asked) replaced, in every string."""
    scan = scanner(secrets, patterns=patterns)
    redacted = []
    for run in tool_runs:
        plain = msgspec.to_builtins(run)
        cleaned = _redact_value(plain, scan)
        redacted.append(run if cleaned == plain else msgspec.convert(cleaned, ToolRun))
    return redacted


def redact(
    cassette: Cassette | LazyCassette | PathLike, secrets: Iterable[str] = (), *, patterns: bool = True
) -> Cassette:
    """A copy of ``cassette`` with ``secrets`` (and, by default, key-shaped strings) replaced by ``[REDACTED]``.

    Streamed deltas are redacted on the reassembled block, so the deltas still concatenate to the
    (redacted) block-end and the stream stays valid.
    """
    cassette = as_cassette(cassette)
    secrets = usable(secrets)
    interactions = [redact_interaction(item, secrets, patterns=patterns) for item in cassette.interactions]
    plain = msgspec.to_builtins(cassette.meta)
    cleaned = _redact_value(plain, scanner(secrets, patterns=patterns))
    meta = cassette.meta if cleaned == plain else msgspec.convert(cleaned, CassetteMeta)
    tool_runs = redact_tool_runs(cassette.tool_runs, secrets, patterns=patterns)
    return msgspec.structs.replace(cassette, meta=meta, interactions=interactions, tool_runs=tool_runs)
