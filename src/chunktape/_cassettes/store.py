"""Writing cassette files: atomic replace (temp file, fsync, ``os.replace``), the writers' lock, appending
saves, saves that never replace a file, and the names of files kept beside a cassette."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import msgspec

from chunktape._cassettes.codec import PathLike, encode_cassette, load_cassette
from chunktape._cassettes.model import Cassette, CassetteMeta, Interaction, ToolRun
from chunktape._errors import ErrorCode, LlmError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: saves stay atomic, concurrent writers are not serialised
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "NEW_FILE",
    "append_interactions",
    "cassette_lock",
    "check_writable",
    "failed_path",
    "fitting_name",
    "save_cassette",
    "save_new",
    "shift_tool_runs",
    "temp_path",
    "try_lock",
    "unwritable",
    "writing",
]


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
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
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
    fd = os.open(temp, NEW_FILE, 0o600)
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
def writing(path: Path, what: str = "cassette") -> Iterator[None]:
    """Turn an OS error while writing ``path`` (folder is a file, path is a folder, no permission, disk full)
    into ``CASSETTE_UNWRITABLE`` naming the path and the error."""
    try:
        yield
    except OSError as exc:
        raise unwritable(path, exc, what) from exc


def unwritable(path: Path, exc: OSError, what: str = "cassette") -> LlmError:
    """``CASSETTE_UNWRITABLE`` for ``path`` (a ``what``), naming the OS error and, if it differs, the file it hit."""
    return LlmError(
        f"cannot write the {what} {path}: {exc.strerror or exc}"
        + (f" ({exc.filename})" if exc.filename and Path(exc.filename) != path else ""),
        ErrorCode.CASSETTE_UNWRITABLE,
        cause=exc,
    )


def check_writable(path: PathLike, what: str = "cassette") -> None:
    """Refuse at once (``CASSETTE_UNWRITABLE``) a cassette path that no save could write: a directory, a path
    under a regular file, a folder without write permission; a folder still missing is fine (saving creates it).
    For a recording that runs long (the proxy), so the user learns it before the session, not after."""
    path = Path(path)
    if path.is_dir():
        raise unwritable(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path)), what)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise unwritable(path, NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder)), what)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise unwritable(path, PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(folder)), what)


def save_cassette(cassette: Cassette, path: PathLike) -> None:
    """Write ``cassette`` atomically (``.json``: pretty JSON; anything else: msgpack).

    An OS error (the folder is a file, the path is a folder, no permission, ...) is ``CASSETTE_UNWRITABLE``.
    """
    path = Path(path)
    data = encode_cassette(cassette, path)
    with writing(path), cassette_lock(path):
        _write_atomic(path, data)


def save_new(cassette: Cassette, paths: Iterable[Path], *, mode: int | None = None) -> Path:
    """Write ``cassette`` atomically to the first of ``paths`` (names in one folder) where no file is yet, and
    return it: chosen under the writers' lock, so two writers never pick one name and no file is replaced.
    ``CASSETTE_UNWRITABLE`` if every name is taken."""
    names = iter(paths)
    first = next(names)
    with writing(first), cassette_lock(first):
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
    with writing(path), cassette_lock(path):
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


def try_lock(fd: int) -> bool:
    """Take the exclusive lock on an open journal without waiting; False if another holds it."""
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


_NAME_MAX = 255


def fitting_name(path: PathLike, room: int) -> str:
    """``path``'s file name, or (when fewer than ``room`` bytes of the filesystem's 255 would be left for what
    is added to it) the name cut and given 8 hex digits of its hash: any name the filesystem takes gets files
    beside it whose names derive from it."""
    path = Path(path)
    raw = os.fsencode(path.name)
    if len(raw) + room <= _NAME_MAX:
        return path.name
    return f"{raw[: _NAME_MAX - room - 9].decode('utf-8', 'ignore')}~{_name_hash(path)}"


def failed_path(cassette: Path, number: int = 1) -> Path:
    """Where a recording that must not replace ``cassette`` is kept: ``<name>.failed<suffix>`` beside it, or
    ``<name>.failed-<number><suffix>`` for the ``number``-th one kept (an earlier one is never replaced)."""
    tail = f".failed{cassette.suffix}" if number == 1 else f".failed-{number}{cassette.suffix}"
    stem = fitting_name(cassette.with_name(cassette.stem), len(tail))
    return cassette.with_name(stem + tail)
