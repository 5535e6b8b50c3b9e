"""Cassette formats: msgpack or JSON by suffix, typed decoding (lazy or full), migrations, encoding.

Loading is lazy: ``open_cassette`` decodes the header and every request but leaves each interaction's events
undecoded (a nested msgpack blob, or a slice of the JSON text) until that interaction is first played, so
matching one request in a large cassette does not pay for decoding all of its chunks. Every decode failure
is ``LlmError(CASSETTE_CORRUPT)`` naming the file and what is wrong; nothing else escapes. Writing files is
``store``'s job, the crash journal ``journal``'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias, overload

import msgspec

from chunktape._cassettes.model import (
    FORMAT_VERSION,
    Cassette,
    CassetteMeta,
    Event,
    Interaction,
    Outcome,
    RecordedRequest,
    ResponseMeta,
    ToolRun,
)
from chunktape._errors import ErrorCode, LlmError
from chunktape._limits import UnreadableFile, read_user_file

__all__ = [
    "CassetteSource",
    "JSON_FORMAT",
    "LazyCassette",
    "MIGRATIONS",
    "MSGPACK_FORMAT",
    "as_cassette",
    "as_lazy",
    "corrupt",
    "encode_cassette",
    "load_cassette",
    "open_cassette",
    "read_file",
]

PathLike: TypeAlias = str | os.PathLike[str]
CassetteSource: TypeAlias = Cassette | PathLike

Migration = Callable[[dict[str, Any]], dict[str, Any]]


def _v1_to_v2(document: dict[str, Any]) -> dict[str, Any]:
    """Version 1 -> 2: version 2 only adds (chunk types, optional fields with defaults), so a version-1 document
    is a version-2 one unchanged; what changes is the version a file written again says (2)."""
    return document


MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2}
"""``MIGRATIONS[n]`` turns a decoded version-``n`` cassette (plain dicts) into version ``n + 1``."""


# -- on-disk shapes used only for decoding -----------------------------------------------------


class _Envelope(msgspec.Struct, kw_only=True):
    """Just the version: read on its own only when the typed pass fails, or to pick migrations."""

    version: int


class _StoredInteraction(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """JSON: an interaction whose request and events stay raw JSON until they are needed."""

    request: msgspec.Raw
    events: msgspec.Raw
    outcome: Outcome
    started_at: datetime | None = None
    attempt: int = 1
    response: ResponseMeta | None = None


class _PackedInteraction(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """msgpack: an interaction whose events are one nested msgpack blob.

    A ``bin`` blob is skipped in O(1) while matching, so opening a large cassette costs its requests, not its
    chunks; the blob decodes to exactly the ``events`` list the JSON form holds inline.
    """

    request: RecordedRequest
    events: bytes
    outcome: Outcome
    started_at: datetime | None = None
    attempt: int = 1
    response: ResponseMeta | None = None


class _PackedView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Lazy: the request undecoded, the events as a zero-copy view into the file's bytes (a msgpack blob, or a
    JSON array's text)."""

    request: msgspec.Raw
    events: memoryview
    outcome: Outcome
    started_at: datetime | None = None
    attempt: int = 1
    response: ResponseMeta | None = None


class _PackedCassette(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A whole msgpack cassette; ``meta`` and ``interactions`` default as in every other decoder (fuzzing found
    ``load_cassette`` refusing a file that ``open_cassette`` accepted)."""

    version: int
    meta: CassetteMeta = msgspec.field(default_factory=CassetteMeta)
    interactions: list[_PackedInteraction] = []
    tool_runs: list[ToolRun] = []


_Stored: TypeAlias = _StoredInteraction | _PackedView


class _LazyJson(msgspec.Struct, kw_only=True, rename="camel"):
    """One pass over a JSON cassette: requests decoded, events left raw. ``version`` is required."""

    version: int
    meta: CassetteMeta = msgspec.field(default_factory=CassetteMeta)
    interactions: list[_StoredInteraction] = []
    tool_runs: list[ToolRun] = []


class _LazyPacked(msgspec.Struct, kw_only=True, rename="camel"):
    """One pass over a msgpack cassette: requests decoded, event blobs viewed in place."""

    version: int
    meta: CassetteMeta = msgspec.field(default_factory=CassetteMeta)
    interactions: list[_PackedView] = []
    tool_runs: list[ToolRun] = []


class _SkeletonInteraction(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """JSON with each events array cut out and replaced by its number (see ``_open_sliced``)."""

    request: msgspec.Raw
    events: int
    outcome: Outcome
    started_at: datetime | None = None
    attempt: int = 1
    response: ResponseMeta | None = None


class _Skeleton(msgspec.Struct, kw_only=True, rename="camel"):
    version: int
    meta: CassetteMeta = msgspec.field(default_factory=CassetteMeta)
    interactions: list[_SkeletonInteraction] = []
    tool_runs: list[ToolRun] = []


_skeleton_decoder = msgspec.json.Decoder(_Skeleton)


class _FullJson(msgspec.Struct, kw_only=True, rename="camel"):
    """A whole JSON cassette in one typed pass (``Cassette`` itself defaults ``version``; a file may not)."""

    version: int
    meta: CassetteMeta = msgspec.field(default_factory=CassetteMeta)
    interactions: list[Interaction] = []
    tool_runs: list[ToolRun] = []


class _CassetteOut(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """What is written: ``tool_runs`` only when there are some, so a cassette without them is byte for byte
    what an older chunktape writes (and reads)."""

    version: int
    meta: CassetteMeta
    interactions: list[Any]
    tool_runs: list[ToolRun] = []


class _Format:
    """The typed encoder and decoders for one encoding, built once and reused."""

    name = "JSON"

    def __init__(self, module: Any) -> None:
        self._encoder = module.Encoder()
        self.envelope = module.Decoder(_Envelope)
        self.events = module.Decoder(list[Event])
        self.request = module.Decoder(RecordedRequest)
        self.plain = module.Decoder()
        self.lazy: Any = module.Decoder(_LazyJson)
        self.full: Any = module.Decoder(_FullJson)

    def encode(self, cassette: Cassette) -> bytes:
        out = _CassetteOut(
            version=cassette.version,
            meta=cassette.meta,
            interactions=cassette.interactions,
            tool_runs=cassette.tool_runs,
        )
        data: bytes = msgspec.json.format(self._encoder.encode(out), indent=2)
        return data + b"\n"

    def to_cassette(self, document: Any) -> Cassette:
        """The ``Cassette`` for what ``self.full`` decoded."""
        return Cassette(
            version=document.version,
            meta=document.meta,
            interactions=document.interactions,
            tool_runs=document.tool_runs,
        )


class _MsgpackFormat(_Format):
    name = "msgpack"

    def __init__(self) -> None:
        super().__init__(msgspec.msgpack)
        self.lazy = msgspec.msgpack.Decoder(_LazyPacked)
        self.full = msgspec.msgpack.Decoder(_PackedCassette)

    def encode(self, cassette: Cassette) -> bytes:
        encode = self._encoder.encode
        packed = _CassetteOut(
            version=cassette.version,
            tool_runs=cassette.tool_runs,
            meta=cassette.meta,
            interactions=[
                _PackedInteraction(
                    request=item.request,
                    events=encode(item.events),
                    outcome=item.outcome,
                    started_at=item.started_at,
                    attempt=item.attempt,
                    response=item.response,
                )
                for item in cassette.interactions
            ],
        )
        data: bytes = encode(packed)
        return data

    def to_cassette(self, document: Any) -> Cassette:
        packed: _PackedCassette = document
        decode = self.events.decode
        interactions = [
            Interaction(
                request=item.request,
                events=decode(item.events),
                outcome=item.outcome,
                started_at=item.started_at,
                attempt=item.attempt,
                response=item.response,
            )
            for item in packed.interactions
        ]
        return Cassette(version=packed.version, meta=packed.meta, interactions=interactions, tool_runs=packed.tool_runs)


MSGPACK_FORMAT = _MsgpackFormat()
JSON_FORMAT = _Format(msgspec.json)


def _format_for(path: Path) -> _Format:
    return JSON_FORMAT if path.suffix.lower() == ".json" else MSGPACK_FORMAT


def corrupt(path: Path, what: str) -> LlmError:
    """``CASSETTE_CORRUPT`` for ``path``, saying ``what`` is wrong with it: the one shape of that error."""
    return LlmError(f"{path}: {what}", ErrorCode.CASSETTE_CORRUPT)


# -- loading -----------------------------------------------------------------------------------


class LazyRequests(Sequence[RecordedRequest]):
    """The recorded requests of an opened cassette, each decoded the first time it is looked at.

    Matching stops at the first unplayed match, so opening a large cassette to replay its first interaction
    decodes one request, not all of them. A request that does not decode is ``CASSETTE_CORRUPT``.
    """

    __slots__ = ("_decoder", "_items", "_path")

    def __init__(self, items: list[RecordedRequest | msgspec.Raw], decoder: Any, path: Path | None) -> None:
        self._items = items
        self._decoder = decoder
        self._path = path

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> RecordedRequest: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordedRequest]: ...

    def __getitem__(self, index: int | slice) -> RecordedRequest | list[RecordedRequest]:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self._items)))]
        item = self._items[index]
        if type(item) is RecordedRequest:
            return item
        try:
            decoded: RecordedRequest = self._decoder.decode(item)
        except Exception as exc:  # msgspec raises DecodeError/ValidationError; anything else is corruption too
            raise corrupt(self._path or Path("<memory>"), f"interaction #{index} request: {exc}") from exc
        self._items[index] = decoded
        return decoded


class LazyCassette:
    """A cassette ready to match: header decoded, each request and each interaction's events on first use."""

    __slots__ = ("_decoded", "_format", "_stored", "meta", "path", "requests", "tool_runs", "version")

    def __init__(self, cassette: Cassette, path: Path | None = None) -> None:
        self.path = path
        self.version = cassette.version
        self.meta = cassette.meta
        self.tool_runs = cassette.tool_runs
        self.requests = LazyRequests([interaction.request for interaction in cassette.interactions], None, path)
        self._decoded: list[Interaction | None] = list(cassette.interactions)
        self._stored: list[_Stored] = []
        self._format: _Format = MSGPACK_FORMAT

    @classmethod
    def _from_stored(
        cls, path: Path, meta: CassetteMeta, stored: list[_Stored], fmt: _Format, tool_runs: list[ToolRun]
    ) -> LazyCassette:
        lazy = cls(Cassette(meta=meta, tool_runs=tool_runs), path)
        lazy.requests = LazyRequests([item.request for item in stored], fmt.request, path)
        lazy._decoded = [None] * len(stored)
        lazy._stored = stored
        lazy._format = fmt
        return lazy

    def __len__(self) -> int:
        return len(self.requests)

    def interaction(self, index: int) -> Interaction:
        """The interaction at ``index``, decoding its events the first time it is asked for."""
        decoded = self._decoded[index]
        if decoded is not None:
            return decoded
        stored = self._stored[index]
        try:
            events = self._format.events.decode(stored.events)
        except Exception as exc:  # msgspec raises DecodeError/ValidationError; anything else is corruption too
            raise corrupt(self.path or Path("<memory>"), f"interaction #{index} events: {exc}") from exc
        decoded = Interaction(
            request=self.requests[index],
            events=events,
            outcome=stored.outcome,
            started_at=stored.started_at,
            attempt=stored.attempt,
            response=stored.response,
        )
        self._decoded[index] = decoded
        return decoded

    def to_cassette(self) -> Cassette:
        """Decode everything into a plain ``Cassette``."""
        interactions = [self.interaction(index) for index in range(len(self))]
        return Cassette(version=FORMAT_VERSION, meta=self.meta, interactions=interactions, tool_runs=self.tool_runs)


def read_file(path: Path) -> bytes:
    """The bytes of a cassette or journal, or the error that says why there are none: missing or a folder
    (``CASSETTE_NOT_FOUND``); a device, FIFO or socket, over ``max_file_bytes()``, or unreadable
    (``CASSETTE_CORRUPT``): ``read_user_file``'s one rule, decided before anything is read."""
    try:
        return read_user_file(path)
    except UnreadableFile as exc:
        if exc.reason == "missing":
            raise LlmError(f"{path} does not exist", ErrorCode.CASSETTE_NOT_FOUND) from None
        if exc.reason == "directory":
            raise LlmError(
                f"{path} is a directory, not a cassette file",
                ErrorCode.CASSETTE_NOT_FOUND,
                hint="give a cassette's path",
            ) from None
        raise LlmError(str(exc), ErrorCode.CASSETTE_CORRUPT, hint="give a cassette file") from None


def _check_version(path: Path, version: int) -> None:
    if version > FORMAT_VERSION:
        raise LlmError(
            f"{path} has format version {version}; this chunktape reads up to {FORMAT_VERSION}",
            ErrorCode.CASSETTE_VERSION,
        )


def _migrate(path: Path, data: bytes, fmt: _Format, version: int) -> Cassette:
    """Run ``MIGRATIONS`` from ``version`` up to ``FORMAT_VERSION`` on the plain decoded document."""
    try:
        document = fmt.plain.decode(data)
        for interaction in document.get("interactions", ()) if isinstance(document, dict) else ():
            if isinstance(interaction, dict) and isinstance(interaction.get("events"), bytes):
                interaction["events"] = fmt.plain.decode(interaction["events"])
    except Exception as exc:
        raise corrupt(path, f"not valid {fmt.name}: {exc}") from exc
    while version < FORMAT_VERSION:
        migration = MIGRATIONS.get(version)
        if migration is None:
            raise corrupt(path, f"format version {version} is not supported (no migration to {version + 1})")
        try:
            document = migration(document)
        except Exception as exc:
            raise corrupt(path, f"migration from version {version} failed: {exc}") from exc
        version += 1
        if isinstance(document, dict):
            document["version"] = version
    try:
        return msgspec.convert(document, Cassette, from_attributes=False)
    except Exception as exc:
        raise corrupt(path, f"after migration: {exc}") from exc


def _decode(path: Path, data: bytes, decoder: Any, fmt: _Format) -> Any:
    """Decode in one typed pass; None means "an older version: migrate". Failures are explained.

    Only when the typed pass fails is the version looked at on its own, so a newer file whose shape
    changed reports ``CASSETTE_VERSION`` rather than ``CASSETTE_CORRUPT``.
    """
    try:
        document = decoder.decode(data)
    except Exception as exc:
        try:
            envelope: _Envelope = fmt.envelope.decode(data)
        except Exception as inner:
            raise corrupt(path, f"not a {fmt.name} cassette: {inner}") from inner
        _check_version(path, envelope.version)
        if envelope.version < FORMAT_VERSION:
            return None
        raise corrupt(path, f"{exc}") from exc
    _check_version(path, document.version)
    return None if document.version < FORMAT_VERSION else document


# The layout ``_Format.encode`` writes (msgspec's indent=2): each interaction's events array opens at the end of
# a line reading ``      "events": [`` and closes on a line reading ``      ]`` after its last event's ``}``. A
# JSON string never holds a raw newline, so neither line can occur inside text.
_EVENTS_OPEN = b'\n      "events": ['
_EVENTS_CLOSE = b"\n      ]"


def _open_sliced(path: Path, data: bytes) -> LazyCassette | None:
    """Open a JSON cassette in the layout we write without tokenising its events; None: use the full scan.

    The ``[`` of every events array is found with ``memchr`` (``[`` is rare outside them), its closing line
    by a short backward search from the next one, and each array is replaced by its number in a small
    "skeleton" of the document, decoded by a typed decoder that insists on exactly one number per
    interaction, in order. The arrays are decoded (and checked) when their interaction is first played, as
    a msgpack cassette's blobs are. A file edited into another layout, another version, or anything
    unexpected falls back to the full scan, which reports errors exactly as before.
    """
    find = data.find
    opens: list[int] = []
    reach = len(_EVENTS_OPEN) - 1
    bracket = find(b"[")
    while bracket >= 0:
        if data[bracket - reach : bracket + 1] == _EVENTS_OPEN:
            opens.append(bracket)
        bracket = find(b"[", bracket + 1)
    if not opens:
        return None
    view = memoryview(data)
    parts: list[bytes | memoryview] = []
    slices: list[memoryview] = []
    position = 0
    for number, start in enumerate(opens):
        if data[start + 1 : start + 2] == b"]":
            end = start + 1
        else:
            limit = opens[number + 1] if number + 1 < len(opens) else len(data)
            close = data.rfind(_EVENTS_CLOSE, start, limit)
            if close < 0 or data[close - 1 : close] != b"}":
                return None
            end = close + len(_EVENTS_CLOSE) - 1
        parts += [view[position:start], str(number).encode()]
        slices.append(view[start : end + 1])
        position = end + 1
    parts.append(view[position:])
    try:
        skeleton = _skeleton_decoder.decode(b"".join(parts))
    except Exception:  # anything unexpected: let the full scan decide (and explain)
        return None
    numbers = [item.events for item in skeleton.interactions]
    if skeleton.version != FORMAT_VERSION or numbers != list(range(len(slices))):
        return None
    stored: list[_Stored] = [
        _PackedView(
            request=item.request,
            events=slices[item.events],
            outcome=item.outcome,
            started_at=item.started_at,
            attempt=item.attempt,
            response=item.response,
        )
        for item in skeleton.interactions
    ]
    return LazyCassette._from_stored(path, skeleton.meta, stored, JSON_FORMAT, skeleton.tool_runs)


def open_cassette(path: PathLike) -> LazyCassette:
    """Open a cassette for matching: events stay undecoded until an interaction is played."""
    path = Path(path)
    data = read_file(path)
    fmt = _format_for(path)
    if fmt is JSON_FORMAT:
        sliced = _open_sliced(path, data)
        if sliced is not None:
            return sliced
    document = _decode(path, data, fmt.lazy, fmt)
    if document is None:
        return LazyCassette(_migrate(path, data, fmt, fmt.envelope.decode(data).version), path)
    return LazyCassette._from_stored(path, document.meta, document.interactions, fmt, document.tool_runs)


def load_cassette(path: PathLike) -> Cassette:
    """Read and fully decode a cassette (``.json`` is JSON, anything else msgpack)."""
    path = Path(path)
    data = read_file(path)
    fmt = _format_for(path)
    document = _decode(path, data, fmt.full, fmt)
    if document is None:
        return _migrate(path, data, fmt, fmt.envelope.decode(data).version)
    try:
        return fmt.to_cassette(document)
    except Exception as exc:  # a msgpack events blob that does not decode
        raise corrupt(path, f"{exc}") from exc


def as_cassette(source: Cassette | LazyCassette | PathLike) -> Cassette:
    """Whatever a user passed (a ``Cassette``, a path, an opened cassette), fully decoded."""
    if isinstance(source, Cassette):
        return source
    if isinstance(source, LazyCassette):
        return source.to_cassette()
    return load_cassette(source)


def as_lazy(source: Cassette | LazyCassette | PathLike) -> LazyCassette:
    """Whatever a user passed (a ``Cassette``, a path, an opened cassette), ready to match."""
    if isinstance(source, LazyCassette):
        return source
    if isinstance(source, Cassette):
        return LazyCassette(source)
    return open_cassette(source)


# -- encoding ----------------------------------------------------------------------------------


def encode_cassette(cassette: Cassette, path: PathLike) -> bytes:
    """The bytes ``save_cassette`` would write to ``path`` (encoding chosen by its suffix). A msgpack cassette holding
    an integer past 64 bits (a field of a request or answer that arrived unchecked) is ``CASSETTE_UNWRITABLE``, with
    JSON, which stores any integer, as the way out; nothing is written."""
    try:
        return _format_for(Path(path)).encode(cassette)
    except OverflowError as exc:
        raise LlmError(
            f"cannot write the cassette {path} as msgpack: it holds an integer outside -2**63..2**64-1 ({exc})",
            ErrorCode.CASSETTE_UNWRITABLE,
            hint="write it with a .json suffix (JSON stores any integer), or remove that number from what is recorded",
        ) from None
