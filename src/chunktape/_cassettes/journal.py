"""The crash journal: every record of a recording stored as it arrives, its claim and lock, and ``recover``."""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
import threading
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeAlias

import msgspec

from chunktape._cassettes.codec import JSON_FORMAT, MSGPACK_FORMAT, PathLike, corrupt, read_file
from chunktape._cassettes.model import (
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
from chunktape._cassettes.store import NEW_FILE, fitting_name, try_lock, unwritable, writing
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import StreamChunk

__all__ = [
    "CrashedJournalWarning",
    "Journal",
    "held_journal",
    "journal_path",
    "live_journal",
    "recover",
    "recovered_path",
]


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
    """How an interaction ended, and the response metadata known by then (``RecordingTransport``'s). A trailing
    field with a default: an end record without it (every journal before it was added) still decodes, and an older
    chunktape ignores it."""

    id: int
    outcome: Outcome
    response: ResponseMeta | None = None


class _JTool(msgspec.Struct, frozen=True, tag="tool", array_like=True):
    run: ToolRun


_JRecord: TypeAlias = _JMeta | _JBegin | _JEvent | _JEnd | _JTool
_journal_encoder = msgspec.json.Encoder()
_encode_into = _journal_encoder.encode_into
_journal_decoder = msgspec.json.Decoder(_JRecord)
_JOURNAL_HEAD = b'["meta",'
"""How every journal starts: its first record is the meta record (msgspec writes no spaces)."""

_JOURNAL_SUFFIX = ".journal"
_ASIDE_ROOM = len(".999") + len(".crashed-20260101T000000000000Z-999")
"""What a journal's name may grow by: a number (another live recorder) and a crashed-stamp when set aside."""


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
        yield try_lock(fd)
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
                if not try_lock(fd):
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
        if not try_lock(fd):
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
        if try_lock(fd) and _still_at(candidate, fd):
            os.fchmod(fd, 0o600)  # whatever the umask
            return candidate, fd
        os.close(fd)  # another recorder is clearing it as an empty leftover: start again
    raise LlmError(f"no free journal next to {path}", ErrorCode.INVALID_CONFIG)  # pragma: no cover


_NEW_JOURNAL = (NEW_FILE & ~os.O_WRONLY) | os.O_RDWR
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
        with writing(path, "journal"):
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
        lock = self._lock
        lock.acquire()  # not ``with``: its __enter__/__exit__ cost as much again, once per chunk
        try:
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
                self.error = unwritable(self.path, exc, "journal")
                raise self.error from exc
        finally:
            lock.release()

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
        # ``_write``'s common case, inlined: it runs once per chunk.
        lock = self._lock
        lock.acquire()
        try:
            buffer = self._buffer
            _encode_into(_JEvent(id, t_ns, chunk), buffer)
            buffer.append(10)
            pos = self._pos
            end = pos + len(buffer)
            window = self._map
            if end <= self._end and window is not None:
                start = self._start
                window[pos - start : end - start] = buffer
                self._pos = end
                return
        finally:
            lock.release()
        self._write(_JEvent(id, t_ns, chunk))  # past the window, or written with write(): the full path

    def end(self, id: int, outcome: Outcome, response: ResponseMeta | None = None) -> None:
        self._write(_JEnd(id, outcome, response))

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
    for fmt in (MSGPACK_FORMAT, JSON_FORMAT):
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

    Every interaction without a recorded end is marked ``Cancelled`` (cut short); a torn final line is dropped; a
    journal whose space was reserved but whose first record was never written (the recording was killed as it
    began) holds nothing, and gives an empty cassette. A file that is not a journal (a cassette, an empty file,
    anything else) is ``CASSETTE_CORRUPT`` saying what it is. Run the result through ``redaction.check`` before
    saving it: the journal is not redacted.
    """
    path = Path(path)
    whole = read_file(path)
    data = whole.split(b"\x00", 1)[0]  # JSON never holds a raw NUL: a reserved window's unwritten tail
    if whole and not data:  # reserved, then killed before its first record: a journal with nothing in it
        return Cassette()
    if not (data.startswith(_JOURNAL_HEAD) or (data and _JOURNAL_HEAD.startswith(data))):
        raise corrupt(path, f"this is {_what_it_is(whole)}, not a chunktape journal")
    lines = data.split(b"\n")
    meta = CassetteMeta()
    begun: dict[int, _JBegin] = {}
    events: dict[int, list[Event]] = {}
    ends: dict[int, _JEnd] = {}
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
            raise corrupt(path, f"journal line {number + 1}: {exc}") from exc
        match record:
            case _JMeta():
                meta = record.meta
            case _JBegin():
                begun[record.id] = record
                events[record.id] = []
            case _JEvent():
                if record.id not in events:
                    raise corrupt(path, f"journal line {number + 1}: event for unknown interaction {record.id}")
                events[record.id].append(Event(t_ns=record.t_ns, chunk=record.chunk))
            case _JEnd():
                ends[record.id] = record
            case _JTool():
                tool_runs.append(record.run)
    interactions = []
    for id, begin in begun.items():
        recorded = events[id]
        end = ends.get(id)
        outcome = (
            end.outcome
            if end is not None
            else Cancelled(
                t_ns=recorded[-1].t_ns if recorded else 0,
                reason="cut short: the recording process stopped mid-stream (recovered from its journal)",
            )
        )
        interactions.append(
            Interaction(
                request=begin.request,
                events=recorded,
                outcome=outcome,
                started_at=begin.started_at,
                attempt=begin.attempt,
                response=end.response if end is not None else None,
            )
        )
    return Cassette(meta=meta, interactions=interactions, tool_runs=tool_runs)
