"""Reading and writing cassette files: msgpack or JSON by suffix, atomic saves, a crash journal, migrations.

Loading is lazy: ``open_cassette`` decodes the header and every request but leaves each interaction's events
undecoded (a nested msgpack blob, or a slice of the JSON text) until that interaction is first played, so
matching one request in a large cassette does not pay for decoding all of its chunks. Every decode failure
is ``LlmError(CASSETTE_CORRUPT)`` naming the file and what is wrong; nothing else escapes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import mmap
import os
import stat
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeAlias, overload

import msgspec

from chunktape.cassettes.model import (
    FORMAT_VERSION,
    Cancelled,
    Cassette,
    CassetteMeta,
    Event,
    Interaction,
    Outcome,
    RecordedRequest,
    ResponseMeta,
    ToolRun,
)
from chunktape.errors import ErrorCode, LlmError
from chunktape.protocol import StreamChunk

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: saves stay atomic, concurrent writers are not serialised
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "MIGRATIONS",
    "CassetteSource",
    "CrashedJournalWarning",
    "Journal",
    "LazyCassette",
    "append_interactions",
    "as_cassette",
    "as_lazy",
    "cassette_lock",
    "encode_cassette",
    "fitting_name",
    "held_journal",
    "journal_path",
    "live_journal",
    "load_cassette",
    "open_cassette",
    "recover",
    "recovered_path",
    "save_cassette",
    "save_new",
    "shift_tool_runs",
    "temp_path",
]

PathLike: TypeAlias = str | os.PathLike[str]
CassetteSource: TypeAlias = Cassette | PathLike

Migration = Callable[[dict[str, Any]], dict[str, Any]]
MIGRATIONS: dict[int, Migration] = {}
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


_MSGPACK = _MsgpackFormat()
_JSON = _Format(msgspec.json)


def _format_for(path: Path) -> _Format:
    return _JSON if path.suffix.lower() == ".json" else _MSGPACK


def _corrupt(path: Path, what: str) -> LlmError:
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
            raise _corrupt(self._path or Path("<memory>"), f"interaction #{index} request: {exc}") from exc
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
        self._format: _Format = _MSGPACK

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
            raise _corrupt(self.path or Path("<memory>"), f"interaction #{index} events: {exc}") from exc
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


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise LlmError(f"{path} does not exist", ErrorCode.CASSETTE_NOT_FOUND) from None
    except IsADirectoryError:
        raise LlmError(
            f"{path} is a directory, not a cassette file", ErrorCode.CASSETTE_NOT_FOUND, hint="give a cassette's path"
        ) from None
    except OSError as exc:
        raise _corrupt(path, f"cannot be read: {exc.strerror or exc}") from exc


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
        raise _corrupt(path, f"not valid {fmt.name}: {exc}") from exc
    while version < FORMAT_VERSION:
        migration = MIGRATIONS.get(version)
        if migration is None:
            raise _corrupt(path, f"format version {version} is not supported (no migration to {version + 1})")
        try:
            document = migration(document)
        except Exception as exc:
            raise _corrupt(path, f"migration from version {version} failed: {exc}") from exc
        version += 1
        if isinstance(document, dict):
            document["version"] = version
    try:
        return msgspec.convert(document, Cassette, from_attributes=False)
    except Exception as exc:
        raise _corrupt(path, f"after migration: {exc}") from exc


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
            raise _corrupt(path, f"not a {fmt.name} cassette: {inner}") from inner
        _check_version(path, envelope.version)
        if envelope.version < FORMAT_VERSION:
            return None
        raise _corrupt(path, f"{exc}") from exc
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
    return LazyCassette._from_stored(path, skeleton.meta, stored, _JSON, skeleton.tool_runs)


def open_cassette(path: PathLike) -> LazyCassette:
    """Open a cassette for matching: events stay undecoded until an interaction is played."""
    path = Path(path)
    data = _read(path)
    fmt = _format_for(path)
    if fmt is _JSON:
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
    data = _read(path)
    fmt = _format_for(path)
    document = _decode(path, data, fmt.full, fmt)
    if document is None:
        return _migrate(path, data, fmt, fmt.envelope.decode(data).version)
    try:
        return fmt.to_cassette(document)
    except Exception as exc:  # a msgpack events blob that does not decode
        raise _corrupt(path, f"{exc}") from exc


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


# -- saving ------------------------------------------------------------------------------------


def encode_cassette(cassette: Cassette, path: PathLike) -> bytes:
    """The bytes ``save_cassette`` would write to ``path`` (encoding chosen by its suffix)."""
    return _format_for(Path(path)).encode(cassette)


@contextlib.contextmanager
def cassette_lock(path: PathLike) -> Iterator[None]:
    """Serialise writers of cassettes in one folder across processes (pytest-xdist workers).

    The lock is an ``flock`` on the folder itself, so no lock file is left next to the cassettes.
    """
    folder = Path(path).parent
    folder.mkdir(parents=True, exist_ok=True)
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
"""Create a file that did not exist: never open one someone planted, never follow a link at the name."""


def _name_hash(path: Path) -> str:
    """8 hex digits naming ``path``'s file: short names derived from a cassette stay attributable to it."""
    return hashlib.sha256(os.fsencode(path.name)).hexdigest()[:8]


def temp_path(path: PathLike) -> Path:
    """The temp file a save of ``path`` writes before its ``os.replace``: ``.ct-<8 hex>.tmp`` beside it.

    Fixed and short, so a cassette name of up to 255 characters still saves, and derived from the cassette's
    name, so the temp file a killed save left is found (and removed) by the next save of that cassette. Readers
    leave it alone: removing it needs the writers' lock, which a reader must never wait for (an appending save
    reads the cassette while holding it).
    Writers of one folder hold ``cassette_lock``, so a name per cassette never has two live owners.
    """
    path = Path(path)
    return path.with_name(f".ct-{_name_hash(path)}.tmp")


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort: some filesystems cannot fsync a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    """Temp file in the same folder, fsync, ``os.replace``, fsync the folder: readers see the old file or the new
    one, and the new one survives a power loss once this returns. Call it under ``cassette_lock``. ``mode``
    (e.g. 0o600) is set before the file appears at ``path``."""
    temp = temp_path(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)  # left by a killed save: under the lock nobody else is writing it (unlink never follows)
    fd = os.open(temp, _NEW_FILE, 0o600)
    try:
        # A cassette gets the usual permissions, or keeps its own.
        if mode is None:
            try:
                mode = path.stat().st_mode & 0o777
            except FileNotFoundError:
                mode = 0o666 & ~_UMASK
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_folder(path.parent)


@contextlib.contextmanager
def _writing(path: Path, what: str = "cassette") -> Iterator[None]:
    """Turn an OS error while writing ``path`` (folder is a file, path is a folder, no permission, disk full)
    into ``CASSETTE_UNWRITABLE`` naming the path and the error."""
    try:
        yield
    except OSError as exc:
        raise _unwritable(path, exc, what) from exc


def _unwritable(path: Path, exc: OSError, what: str = "cassette") -> LlmError:
    return LlmError(
        f"cannot write the {what} {path}: {exc.strerror or exc}"
        + (f" ({exc.filename})" if exc.filename and Path(exc.filename) != path else ""),
        ErrorCode.CASSETTE_UNWRITABLE,
        cause=exc,
    )


def save_cassette(cassette: Cassette, path: PathLike) -> None:
    """Write ``cassette`` atomically (``.json``: pretty JSON; anything else: msgpack).

    An OS error (the folder is a file, the path is a folder, no permission, ...) is ``CASSETTE_UNWRITABLE``.
    """
    path = Path(path)
    data = encode_cassette(cassette, path)
    with _writing(path), cassette_lock(path):
        _write_atomic(path, data)


def save_new(cassette: Cassette, paths: Iterable[Path], *, mode: int | None = None) -> Path:
    """Write ``cassette`` atomically to the first of ``paths`` (names in one folder) where no file is yet, and
    return it: chosen under the writers' lock, so two writers never pick one name and no file is replaced.
    ``CASSETTE_UNWRITABLE`` if every name is taken."""
    names = iter(paths)
    first = next(names)
    with _writing(first), cassette_lock(first):
        for path in itertools.chain([first], names):
            if not os.path.lexists(path):
                _write_atomic(path, encode_cassette(cassette, path), mode)
                return path
    raise LlmError(
        f"cannot write {first} or any name after it: all are taken", ErrorCode.CASSETTE_UNWRITABLE, hint="remove some"
    )


def append_interactions(
    path: PathLike,
    interactions: Sequence[Interaction],
    meta: CassetteMeta,
    *,
    join: Callable[[CassetteMeta], bool] | None = None,
    tool_runs: Sequence[ToolRun] = (),
) -> Cassette:
    """Add interactions to the cassette at ``path`` (created if missing) under the lock; returns what was written.

    Re-reading under the lock means two processes appending to one cassette both keep their interactions.
    ``join`` decides, under the same lock, from the existing file's meta, whether to add to it (True) or to
    replace it with ``meta`` and ``interactions`` (False): how a re-recording's first writer is told apart
    from later writers of the same run. An unreadable file is then replaced, not joined. ``tool_runs`` are
    added too, their ``after_interaction`` shifted past the interactions already in the file.
    """
    path = Path(path)
    with _writing(path), cassette_lock(path):
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        existing = None
        if path.exists():
            if join is None:
                existing = load_cassette(path)
            else:
                with contextlib.suppress(LlmError):
                    existing = load_cassette(path)
                if existing is not None and not join(existing.meta):
                    existing = None
        if existing is not None:
            shifted = shift_tool_runs(tool_runs, len(existing.interactions))
            cassette = Cassette(
                meta=existing.meta,
                interactions=[*existing.interactions, *interactions],
                tool_runs=[*existing.tool_runs, *shifted],
            )
        else:
            cassette = Cassette(meta=meta, interactions=list(interactions), tool_runs=list(tool_runs))
        _write_atomic(path, encode_cassette(cassette, path))
    return cassette


def shift_tool_runs(tool_runs: Sequence[ToolRun], by: int) -> list[ToolRun]:
    """``tool_runs`` as they read once appended after ``by`` interactions: each still names its own interaction."""
    if not by:
        return list(tool_runs)
    return [
        run if run.after_interaction < 0 else msgspec.structs.replace(run, after_interaction=run.after_interaction + by)
        for run in tool_runs
    ]


# -- the crash journal ---------------------------------------------------------------------------


class _JMeta(msgspec.Struct, frozen=True, tag="meta", array_like=True):
    meta: CassetteMeta


class _JBegin(msgspec.Struct, frozen=True, tag="begin", array_like=True):
    id: int
    request: RecordedRequest
    started_at: datetime | None
    attempt: int


class _JEvent(msgspec.Struct, frozen=True, tag="event", array_like=True, gc=False):
    id: int
    t_ns: int
    chunk: StreamChunk


class _JEnd(msgspec.Struct, frozen=True, tag="end", array_like=True):
    id: int
    outcome: Outcome


class _JTool(msgspec.Struct, frozen=True, tag="tool", array_like=True):
    run: ToolRun


_JRecord: TypeAlias = _JMeta | _JBegin | _JEvent | _JEnd | _JTool
_journal_encoder = msgspec.json.Encoder()
_encode_into = _journal_encoder.encode_into
_journal_decoder = msgspec.json.Decoder(_JRecord)
_JOURNAL_HEAD = b'["meta",'
"""How every journal starts: its first record is the meta record (msgspec writes no spaces)."""

_NAME_MAX = 255
_JOURNAL_SUFFIX = ".journal"
_ASIDE_ROOM = len(".999") + len(".crashed-20260101T000000000000Z-999")
"""What a journal's name may grow by: a number (another live recorder) and a crashed-stamp when set aside."""


def fitting_name(path: PathLike, room: int) -> str:
    """``path``'s file name, or (when fewer than ``room`` bytes of the filesystem's 255 would be left for what
    is added to it) the name cut and given 8 hex digits of its hash: any name the filesystem takes gets files
    beside it whose names derive from it."""
    path = Path(path)
    raw = os.fsencode(path.name)
    if len(raw) + room <= _NAME_MAX:
        return path.name
    return f"{raw[: _NAME_MAX - room - 9].decode('utf-8', 'ignore')}~{_name_hash(path)}"


def journal_path(cassette_path: PathLike) -> Path:
    """Where the journal of a cassette being recorded lives: ``<cassette file>.journal`` (a name too long for
    that, and for the suffixes a journal set aside gets, is cut: see ``fitting_name``)."""
    path = Path(cassette_path)
    return path.with_name(fitting_name(path, len(_JOURNAL_SUFFIX) + _ASIDE_ROOM) + _JOURNAL_SUFFIX)


class CrashedJournalWarning(UserWarning):
    """A new recording found the journal of an earlier one that crashed; it was moved aside, not overwritten."""


def _cassette_of(journal: Path) -> Path:
    """The cassette a journal belongs to (``c.msgpack.journal`` -> ``c.msgpack``)."""
    return journal.with_name(journal.name.removesuffix(_JOURNAL_SUFFIX))


def _set_aside(candidate: Path, cassette: Path) -> None:
    """Move an unrecovered journal out of the way (never truncate it) and say how to recover it."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    for number in range(1000):
        aside = candidate.with_name(f"{candidate.name}.crashed-{stamp}" + (f"-{number}" if number else ""))
        if not os.path.lexists(aside):
            break
    os.rename(candidate, aside)
    output = recovered_path(aside, cassette)
    with contextlib.suppress(CrashedJournalWarning):  # a warnings-as-errors filter must not break the new stream
        warnings.warn(
            f"{candidate} held the journal of an earlier recording of {cassette} that stopped without saving (a"
            f" crash?); it was moved to {aside}: run `chunktape recover {aside} -o {output}` to get what it received",
            CrashedJournalWarning,
            stacklevel=5,
        )


def recovered_path(journal: PathLike, cassette: PathLike | None = None) -> Path:
    """Where ``chunktape recover`` writes a journal by default, so two journals never share an output: a
    cassette's own journal (``c.msgpack.journal``) goes to the cassette; another one (a second recorder's
    ``.journal.1``, one set aside as ``.journal.crashed-<stamp>``) to ``c.recovered-<1 or stamp>.msgpack``."""
    journal = Path(journal)
    base, found, rest = journal.name.rpartition(_JOURNAL_SUFFIX)
    if not (found and base):
        return journal.with_suffix(".msgpack")
    owner = Path(cassette) if cassette is not None else journal.with_name(base)
    tag = rest.lstrip(".").replace(".crashed-", "-").removeprefix("crashed-")
    if not tag:
        return owner
    return owner.with_name(f"{owner.stem}.recovered-{tag}{owner.suffix}")


def _open_journal(path: Path) -> int | None:
    """An fd to read (and lock) the journal at ``path``, never through a link; None if it cannot be opened."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


@contextlib.contextmanager
def held_journal(path: PathLike) -> Iterator[bool]:
    """Hold the lock of a journal being recovered, so no new recorder claims it or sets it aside meanwhile.

    Yields False (holding nothing) when a live recorder owns it: its journal must be left alone. A file that
    cannot be opened yields True: ``recover`` says what is wrong with it.
    """
    fd = _open_journal(Path(path))
    if fd is None:
        yield True
        return
    try:
        yield _try_lock(fd)
    finally:
        os.close(fd)  # releases the lock


def live_journal(cassette: PathLike, *, besides: PathLike | None = None) -> Path | None:
    """A journal of ``cassette`` that a live recorder holds now (``besides``, one this process holds, aside):
    that recorder will write the cassette when it saves, so nothing else should."""
    first = journal_path(cassette)
    skip = os.path.abspath(besides) if besides is not None else None
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(first.parent or ".")):
            if name != first.name and not (name.startswith(f"{first.name}.") and name[len(first.name) + 1 :].isdigit()):
                continue
            candidate = first.with_name(name)
            fd = None if os.path.abspath(candidate) == skip else _open_journal(candidate)
            if fd is None:
                continue
            try:
                if not _try_lock(fd):
                    return candidate
            finally:
                os.close(fd)
    return None


def _still_at(path: Path, fd: int) -> bool:
    """Whether the file open as ``fd`` is still the one at ``path``."""
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _try_lock(fd: int) -> bool:
    """Take the exclusive lock on an open journal without waiting; False if another holds it."""
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _not_a_journal_file(candidate: Path, what: str) -> LlmError:
    return LlmError(
        f"{candidate} is {what}; chunktape only writes a journal into a file it creates itself",
        ErrorCode.CASSETTE_UNWRITABLE,
        hint="remove it (or record to another cassette path)",
    )


def _clear(candidate: Path, cassette: Path) -> bool:
    """Deal with a file already at ``candidate``: False when it is free to claim again, True when a live
    recorder holds it. A crashed journal is moved aside, an empty leftover removed; a link or anything but a
    regular file is never opened for writing (``CASSETTE_UNWRITABLE``)."""
    try:
        fd = os.open(candidate, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False  # gone meanwhile
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(candidate):
            raise _not_a_journal_file(candidate, f"a symbolic link (to {os.readlink(candidate)})") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _not_a_journal_file(candidate, "not a regular file")
        if not _try_lock(fd):
            return True
        if not _still_at(candidate, fd):  # unlinked (or replaced) between our open and our lock
            return False
        if os.pread(fd, 1, 0) not in (b"", b"\x00"):  # a NUL start: space reserved, nothing written yet
            _set_aside(candidate, cassette)
        else:
            os.unlink(candidate)  # created by a recorder that died before its first write: nothing to keep
        return False
    finally:
        os.close(fd)


def _claim_journal(path: Path, cassette: Path) -> tuple[Path, int]:
    """Create ``path`` (or ``path.1``, ``path.2``, ... if another live recorder holds it) and lock it.

    The file is always one this call created (``O_EXCL | O_NOFOLLOW``), so a journal is never written through
    a link or into a file someone else put there. Each journal has one owner, who holds an ``flock`` on it;
    the kernel drops the lock when its owner dies. A journal found unlocked but not empty is what a crashed
    recording left: it is moved aside (``CrashedJournalWarning``), never truncated, and a fresh one is started.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    attempt = 0
    for _ in range(3000):  # each pass claims, moves on to the next name, or clears a leftover
        if attempt >= 1000:
            break
        candidate = path if attempt == 0 else path.with_name(f"{path.name}.{attempt}")
        try:
            fd = os.open(candidate, _NEW_JOURNAL, 0o600)  # it holds the stream before redaction
        except FileExistsError:
            if _clear(candidate, cassette):
                attempt += 1
            continue
        if _try_lock(fd) and _still_at(candidate, fd):
            os.fchmod(fd, 0o600)  # whatever the umask
            return candidate, fd
        os.close(fd)  # another recorder is clearing it as an empty leftover: start again
    raise LlmError(f"no free journal next to {path}", ErrorCode.INVALID_CONFIG)  # pragma: no cover


_NEW_JOURNAL = (_NEW_FILE & ~os.O_WRONLY) | os.O_RDWR
"""A journal is created as any new file is, but readable too: it is written through a mapping."""

_os_write = os.write
"""The write path's one system call, a module global so tests can inject a failing disk (ENOSPC, EIO)."""
_fallocate = getattr(os, "posix_fallocate", None)
"""Reserves a window of the journal before it is mapped (a module global so tests can make it fail)."""

_WINDOW = 1 << 20
"""How much of the journal is reserved and mapped at a time (a multiple of the page size)."""


class Journal:
    """Append-only JSON lines, each record stored before ``begin``/``event``/``end`` returns, so a SIGKILL loses
    nothing already received.

    Records are copied into a ``MAP_SHARED`` window of the file, 1 MiB at a time, each window reserved first with
    ``posix_fallocate``: a full disk (or a quota) is then a clean error at reserve time, never a SIGBUS on a store.
    Where a window cannot be reserved (little room left, a filesystem without fallocate), the rest of the journal
    is written with one ``write()`` per record. Either way the record is in the kernel's page cache once the call
    returns and reaches the file even if the process is killed the next instant (the reserved, unwritten tail is
    NULs, which ``recover`` ignores; ``close`` trims it). Nothing is fsynced: a process crash loses nothing, a
    power loss can lose the tail. Writes are serialised by a lock (one journal may be shared by threads). The
    first failed write raises ``CASSETTE_UNWRITABLE`` naming the path and leaves the journal as it was (at worst a
    torn last line, which ``recover`` drops); later writes do nothing, as do writes after ``close``. The journal
    is deleted once the cassette is saved.
    """

    __slots__ = ("_buffer", "_end", "_fd", "_lock", "_map", "_pos", "_start", "error", "path")

    def __init__(self, path: PathLike, meta: CassetteMeta, *, cassette: PathLike | None = None) -> None:
        """Claim a journal at ``path``; ``CASSETTE_UNWRITABLE`` if it cannot be created or its first record
        written (then nothing is left behind)."""
        path = Path(path)
        self._fd = -1
        with _writing(path, "journal"):
            self.path, self._fd = _claim_journal(path, Path(cassette) if cassette else _cassette_of(path))
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self.error: LlmError | None = None
        self._map: mmap.mmap | None = None
        self._pos = self._start = 0
        self._end = -1  # where the mapped window ends; -1: writing with write()
        self._map_window(0)
        try:
            self._write(_JMeta(meta))
        except LlmError:
            self.close(remove=True)
            raise

    def _map_window(self, start: int) -> None:
        """Reserve and map the window at ``start``; where that fails, go on with ``write()`` from ``_pos``."""
        if self._map is not None:
            self._map.close()
            self._map, self._end = None, -1
        try:
            if _fallocate is None:
                raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))
            _fallocate(self._fd, start, _WINDOW)
            self._map = mmap.mmap(self._fd, _WINDOW, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=start)
        except (OSError, ValueError):  # ENOSPC, EDQUOT, EOPNOTSUPP, EINVAL, ...: the write path needs no room ahead
            os.lseek(self._fd, self._pos, os.SEEK_SET)
            return
        self._start, self._end = start, start + _WINDOW

    def _write(self, record: _JRecord) -> None:
        with self._lock:
            buffer = self._buffer
            _encode_into(record, buffer)
            buffer.append(10)
            pos = self._pos
            end = pos + len(buffer)
            window = self._map
            if end <= self._end and window is not None:  # the common case: one copy into the mapped window
                start = self._start
                window[pos - start : end - start] = buffer
                self._pos = end
                return
            if self._fd < 0 or self.error is not None:
                return
            try:
                self._spill(buffer)
            except OSError as exc:
                self.error = _unwritable(self.path, exc, "journal")
                raise self.error from exc

    def _spill(self, buffer: bytearray) -> None:
        """Store a record that does not fit in the mapped window: what fits, then the next window (or ``write()``)."""
        with memoryview(buffer) as view:
            done = 0
            while self._map is not None:
                part = min(len(view) - done, self._end - self._pos)
                offset = self._pos - self._start
                self._map[offset : offset + part] = view[done : done + part]
                self._pos += part
                done += part
                if done == len(view):
                    return
                self._map_window(self._end)
            while done < len(view):  # a short write: the rest goes right after it
                written = _os_write(self._fd, view[done:])
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += written
                self._pos += written

    def begin(self, id: int, request: RecordedRequest, started_at: datetime | None, attempt: int) -> None:
        self._write(_JBegin(id, request, started_at, attempt))

    def event(self, id: int, t_ns: int, chunk: StreamChunk) -> None:
        self._write(_JEvent(id, t_ns, chunk))

    def end(self, id: int, outcome: Outcome) -> None:
        self._write(_JEnd(id, outcome))

    def tool(self, run: ToolRun) -> None:
        self._write(_JTool(run))

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def __del__(self) -> None:
        """A recorder dropped unsaved leaves its journal as a crash does (closed, unlocked), not open until exit."""
        fd = getattr(self, "_fd", -1)
        if fd >= 0:
            os.close(fd)

    def close(self, *, remove: bool) -> None:
        """Close the file, trimmed to what was written; ``remove`` deletes it while still holding its lock.

        Unlinking before closing (which drops the lock) matters: a new recorder that opened this file just
        before the unlink then either fails to lock it or, once it has the lock, sees it is no longer at the
        path (``_claim_journal`` checks) and opens a fresh one, instead of writing into a deleted file.
        """
        with self._lock:
            fd, self._fd = self._fd, -1
            mapped, self._map, self._end = self._map, None, -1
        if fd < 0:
            return
        try:
            if mapped is not None:
                mapped.close()
            if remove and _still_at(self.path, fd):  # never delete a file someone else put at our path
                os.unlink(self.path)
            elif not remove:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._pos)  # the reserved tail holds nothing
        finally:
            os.close(fd)


def _what_it_is(data: bytes) -> str:
    """What a file that is not a journal holds, for the error that refuses it."""
    if not data.strip():
        return "an empty file" if not data else "blank"
    for fmt in (_MSGPACK, _JSON):
        try:
            fmt.envelope.decode(data)
        except Exception:  # msgspec raises DecodeError/ValidationError: not this format
            continue
        return f"a {fmt.name} cassette"
    try:
        data.decode()
    except UnicodeDecodeError:
        return "binary data"
    return "text that does not start with a journal's meta record"


def recover(path: PathLike) -> Cassette:
    """Rebuild a cassette from a journal left by a crashed recording.

    Every interaction without a recorded end is marked ``Cancelled`` (cut short); a torn final line is
    dropped. A file that is not a journal (a cassette, an empty file, anything else) is ``CASSETTE_CORRUPT``
    saying what it is. Run the result through ``redaction.check`` before saving it: the journal is not redacted.
    """
    path = Path(path)
    data = _read(path)
    if not (data.startswith(_JOURNAL_HEAD) or (data and _JOURNAL_HEAD.startswith(data))):
        raise _corrupt(path, f"this is {_what_it_is(data)}, not a chunktape journal")
    data = data.split(b"\x00", 1)[0]  # JSON never holds a raw NUL: an old (mapped) journal's unwritten tail
    lines = data.split(b"\n")
    meta = CassetteMeta()
    begun: dict[int, _JBegin] = {}
    events: dict[int, list[Event]] = {}
    outcomes: dict[int, Outcome] = {}
    tool_runs: list[ToolRun] = []
    last = len(lines) - 1
    for number, line in enumerate(lines):
        if not line:
            continue
        try:
            record = _journal_decoder.decode(line)
        except Exception as exc:
            if number == last:
                break  # the write the crash interrupted
            raise _corrupt(path, f"journal line {number + 1}: {exc}") from exc
        match record:
            case _JMeta():
                meta = record.meta
            case _JBegin():
                begun[record.id] = record
                events[record.id] = []
            case _JEvent():
                if record.id not in events:
                    raise _corrupt(path, f"journal line {number + 1}: event for unknown interaction {record.id}")
                events[record.id].append(Event(t_ns=record.t_ns, chunk=record.chunk))
            case _JEnd():
                outcomes[record.id] = record.outcome
            case _JTool():
                tool_runs.append(record.run)
    interactions = []
    for id, begin in begun.items():
        recorded = events[id]
        outcome = outcomes.get(id) or Cancelled(
            t_ns=recorded[-1].t_ns if recorded else 0,
            reason="cut short: the recording process stopped mid-stream (recovered from its journal)",
        )
        interactions.append(
            Interaction(
                request=begin.request,
                events=recorded,
                outcome=outcome,
                started_at=begin.started_at,
                attempt=begin.attempt,
            )
        )
    return Cassette(meta=meta, interactions=interactions, tool_runs=tool_runs)
