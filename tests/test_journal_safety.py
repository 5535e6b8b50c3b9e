"""The journal never kills the process, never loses what was received, never writes through a planted link.

A full disk is tested twice: by injecting ``ENOSPC`` into the journal's write path (the one it takes when no
window can be reserved; always runs), and for real on a 64 KiB tmpfs (skips only where mounting is impossible).
The recorder's promise is in its docstring: a journal that cannot be created is ``CASSETTE_UNWRITABLE`` before
the inner adapter is called; a journal write that fails mid-stream never breaks the caller's stream, and the save
then writes everything or raises.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chunktape import Cancelled, ErrorCode, LlmError, RecordingAdapter, load_cassette, recover
from chunktape._cassettes import journal as journal_module
from chunktape._cassettes import journal_path
from chunktape._protocol import StreamChunk
from chunktape._recorder import JournalWriteWarning
from helpers import GatedAdapter, PacedAdapter, collect, options, paced, text_stream

PIECES = [f"piece {n} " for n in range(200)]
CHUNKS = text_stream(*PIECES)


def failing_writes(after: int, error: int = errno.ENOSPC) -> Callable[[int, Any], int]:
    """A stand-in for ``os.write`` that lets ``after`` writes through, then fails with ``error``."""
    calls = 0

    def write(fd: int, data: Any) -> int:
        nonlocal calls
        calls += 1
        if calls > after:
            raise OSError(error, os.strerror(error))
        return os.write(fd, data)

    return write


def saved_whole(recorder: RecordingAdapter) -> None:
    """Save (again): the cassette holds every chunk and nothing else is left beside it."""
    recorder.save()
    assert load_cassette(recorder.path).interactions[0].chunks == CHUNKS
    assert os.listdir(recorder.path.parent) == [recorder.path.name]


# -- a full disk, injected ---------------------------------------------------------------------------


async def test_a_journal_write_failing_mid_stream_keeps_the_stream_and_everything_received(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.msgpack"
    monkeypatch.setattr(journal_module, "_fallocate", None)  # no room to reserve: the write() path
    monkeypatch.setattr(journal_module, "_os_write", failing_writes(after=40))  # meta, begin, then 38 events
    recorder = RecordingAdapter(PacedAdapter(paced(CHUNKS)), path)
    with pytest.warns(JournalWriteWarning, match=r"c\.msgpack\.journal.*No space left on device"):
        received = await collect(recorder.stream(options()))
    assert received == CHUNKS  # the caller's stream went on
    assert recorder.interactions[0].chunks == CHUNKS  # and memory kept every chunk
    (journaled,) = recover(journal_path(path)).interactions
    assert journaled.chunks == CHUNKS[:38]  # the journal kept what it had, nothing torn

    monkeypatch.undo()  # the disk has room again
    saved_whole(recorder)


async def test_a_disk_still_full_at_save_raises_unwritable_and_keeps_journal_and_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.json"
    monkeypatch.setattr(journal_module, "_fallocate", None)  # no room to reserve: the write() path
    monkeypatch.setattr(journal_module, "_os_write", failing_writes(after=10))
    real_fsync = os.fsync

    def full_fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    recorder = RecordingAdapter(PacedAdapter(paced(CHUNKS)), path)
    with pytest.warns(JournalWriteWarning):
        assert await collect(recorder.stream(options())) == CHUNKS
    monkeypatch.setattr(os, "fsync", full_fsync)
    with pytest.raises(LlmError) as caught:
        await recorder.aclose()
    assert caught.value.code is ErrorCode.CASSETTE_UNWRITABLE
    assert str(path) in str(caught.value)
    assert not path.exists()
    assert recover(journal_path(path)).interactions[0].chunks == CHUNKS[:8]  # left in place
    monkeypatch.setattr(os, "fsync", real_fsync)
    saved_whole(recorder)  # space freed: the recording held in memory is written whole


async def test_no_space_for_the_first_record_is_unwritable_before_the_inner_adapter_is_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.msgpack"
    monkeypatch.setattr(journal_module, "_fallocate", None)  # no room to reserve: the write() path
    monkeypatch.setattr(journal_module, "_os_write", failing_writes(after=0))
    inner = PacedAdapter(paced(CHUNKS))
    recorder = RecordingAdapter(inner, path)
    with pytest.raises(LlmError) as caught:
        await collect(recorder.stream(options()))
    assert caught.value.code is ErrorCode.CASSETTE_UNWRITABLE
    assert str(journal_path(path)) in str(caught.value)
    assert inner.calls == 0
    assert os.listdir(tmp_path) == []  # the empty journal it created is gone
    assert recorder.interactions == []


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def dribble(fd: int, data: Any) -> int:
        return os.write(fd, bytes(data[:7]))

    monkeypatch.setattr(journal_module, "_fallocate", None)  # no room to reserve: the write() path
    monkeypatch.setattr(journal_module, "_os_write", dribble)
    path = tmp_path / "c.msgpack"
    recorder = RecordingAdapter(PacedAdapter(paced(CHUNKS)), path)
    asyncio.run(collect(recorder.stream(options())))
    assert recover(journal_path(path)).interactions[0].chunks == CHUNKS
    asyncio.run(recorder.aclose())


# -- a full disk, for real -------------------------------------------------------------------------------


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Mount 64 KiB tmpfs folders (``ro=True``: read-only); skips only where mounting is impossible."""
    mounted: list[Path] = []

    def mount(name: str = "tiny", *, ro: bool = False) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        flags = "size=64k,mode=0700" + (",ro" if ro else "")
        try:
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", flags, "tmpfs", str(folder)], capture_output=True, text=True
            )
        except FileNotFoundError:
            pytest.skip("no mount command here")
        if done.returncode != 0:
            reason = done.stderr.lower()
            if "permission denied" in reason or "not permitted" in reason or "must be superuser" in reason:
                pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
            pytest.fail(f"mount failed: {done.stderr}")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=True)


_FULL_DISK = textwrap.dedent(
    """
    import asyncio, os, sys, warnings
    sys.path.insert(0, {tests!r})
    from helpers import PacedAdapter, collect, options, paced, text_stream
    from chunktape import LlmError, RecordingAdapter, load_cassette
    warnings.simplefilter("ignore")
    folder = {folder!r}
    with open(os.path.join(folder, "filler"), "wb") as filler:
        filler.write(b"x" * 44 * 1024)
    chunks = text_stream(*(f"piece {{n}} " for n in range(400)))
    recorder = RecordingAdapter(PacedAdapter(paced(chunks)), os.path.join(folder, "c.msgpack"))
    received = asyncio.run(collect(recorder.stream(options())))
    print("received", len(received), received == chunks)
    try:
        asyncio.run(recorder.aclose())
        print("saved")
    except LlmError as error:
        print("save", error.code.value, str(error))
    os.unlink(os.path.join(folder, "filler"))
    recorder.save()
    print("saved", load_cassette(os.path.join(folder, "c.msgpack")).interactions[0].chunks == chunks)
    """
)


def test_a_real_full_disk_never_kills_the_recorder_nor_loses_a_chunk(tiny_tmpfs: Callable[..., Path]) -> None:
    """The mapped journal died of SIGBUS here; now the stream goes on and the journal keeps a clean prefix."""
    folder = tiny_tmpfs()
    script = _FULL_DISK.format(tests=str(Path(__file__).parent), folder=str(folder))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    received, failed_save, saved = done.stdout.splitlines()
    assert received == f"received {len(text_stream(*(f'piece {n} ' for n in range(400))))} True"
    assert failed_save.startswith("save CASSETTE_UNWRITABLE")
    assert str(folder / "c.msgpack") in failed_save
    assert saved == "saved True"
    assert sorted(os.listdir(folder)) == ["c.msgpack"]


def test_a_real_full_disk_keeps_the_journal_prefix(tiny_tmpfs: Callable[..., Path]) -> None:
    folder = tiny_tmpfs()
    (folder / "filler").write_bytes(b"x" * 56 * 1024)
    path = folder / "c.msgpack"
    recorder = RecordingAdapter(PacedAdapter(paced(CHUNKS)), path)
    with pytest.warns(JournalWriteWarning, match="No space left on device"):
        assert asyncio.run(collect(recorder.stream(options()))) == CHUNKS
    (journaled,) = recover(journal_path(path)).interactions
    assert 0 < len(journaled.chunks) < len(CHUNKS)
    assert journaled.chunks == CHUNKS[: len(journaled.chunks)]
    assert isinstance(journaled.outcome, Cancelled)
    (folder / "filler").unlink()
    asyncio.run(recorder.aclose())
    assert load_cassette(path).interactions[0].chunks == CHUNKS


# -- unwritable places ---------------------------------------------------------------------------------


def _unwritable(recorder: RecordingAdapter, inner: PacedAdapter) -> LlmError:
    with pytest.raises(LlmError) as caught:
        asyncio.run(collect(recorder.stream(options())))
    assert caught.value.code is ErrorCode.CASSETTE_UNWRITABLE
    assert inner.calls == 0  # raised before the provider was asked
    assert recorder.interactions == []
    return caught.value


def test_a_parent_that_is_a_file_is_unwritable(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    path = tmp_path / "notes.txt" / "c.msgpack"
    inner = PacedAdapter(paced(CHUNKS))
    error = _unwritable(RecordingAdapter(inner, path), inner)
    assert str(journal_path(path)) in str(error)


def test_a_folder_that_refuses_even_root_is_unwritable(tmp_path: Path) -> None:
    path = Path("/sys") / f"chunktape-{tmp_path.name}.msgpack"  # sysfs refuses new files, to root too
    inner = PacedAdapter(paced(CHUNKS))
    error = _unwritable(RecordingAdapter(inner, path), inner)
    assert str(journal_path(path)) in str(error)
    assert "Permission denied" in str(error)


def test_a_read_only_mount_is_unwritable(tiny_tmpfs: Callable[..., Path]) -> None:
    folder = tiny_tmpfs("readonly", ro=True)
    inner = PacedAdapter(paced(CHUNKS))
    error = _unwritable(RecordingAdapter(inner, folder / "c.msgpack"), inner)
    assert "Read-only file system" in str(error)


def test_permission_denied_is_unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin of the tests above that needs neither root nor a special filesystem: EACCES injected."""
    real_open = os.open

    def refusing_open(target: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(target).endswith(".journal"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        return real_open(target, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    path = tmp_path / "c.msgpack"
    inner = PacedAdapter(paced(CHUNKS))
    error = _unwritable(RecordingAdapter(inner, path), inner)
    assert str(journal_path(path)) in str(error)
    assert "Permission denied" in str(error)


# -- links -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dangling", [True, False], ids=["dangling-link", "link-to-a-file"])
def test_a_planted_journal_link_is_never_written_through(tmp_path: Path, dangling: bool) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "loot"
    if not dangling:
        target.write_bytes(b"")
    path = tmp_path / "cassettes" / "c.msgpack"
    path.parent.mkdir()
    journal_path(path).symlink_to(target)
    inner = PacedAdapter(paced(CHUNKS, gap=0.0), secrets=["sk-secret-value"])
    recorder = RecordingAdapter(inner, path)
    error = _unwritable(recorder, inner)
    assert "symbolic link" in str(error)
    assert str(journal_path(path)) in str(error)
    assert target.exists() is not dangling
    assert not dangling or os.listdir(elsewhere) == []
    assert dangling or target.read_bytes() == b""
    assert journal_path(path).is_symlink()  # left for its owner to look at


# -- the recorder closed under a running stream ------------------------------------------------------------


async def test_a_chunk_after_the_recorder_was_closed_still_reaches_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    inner = GatedAdapter(CHUNKS)
    recorder = RecordingAdapter(inner, path)
    stream = recorder.stream(options())
    first = await anext(stream)
    await recorder.aclose()  # saved while the stream is still running
    (saved,) = load_cassette(path).interactions
    assert saved.chunks == [first]
    assert isinstance(saved.outcome, Cancelled)
    inner.release.set()
    rest: list[StreamChunk] = [chunk async for chunk in stream]  # once a TypeError from the closed journal
    assert [first, *rest] == CHUNKS
    assert recorder.interactions[0].chunks == CHUNKS  # kept in memory: save() again writes it whole
    saved_whole(recorder)


# -- threads ------------------------------------------------------------------------------------------------


def test_threads_sharing_one_recorder_write_one_journal_with_every_interaction(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    streams = {str(n): text_stream(*(f"{n}.{k} " for k in range(30))) for n in range(8)}
    inner = PacedAdapter(lambda request: paced(streams[request.messages[0].content or ""], gap=0.0005))
    recorder = RecordingAdapter(inner, path)
    start = threading.Barrier(8)
    received: dict[str, list[StreamChunk]] = {}
    errors: list[BaseException] = []

    async def record(name: str) -> list[StreamChunk]:
        start.wait()  # all eight loops call stream() at once
        return await collect(recorder.stream(options(name)))

    def run(name: str) -> None:
        try:
            received[name] = asyncio.run(record(name))
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(name,)) for name in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert received == streams
    assert sorted(os.listdir(tmp_path)) == ["c.msgpack.journal"]  # one journal
    journaled = recover(journal_path(path)).interactions
    assert {item.request.messages[0].content: item.chunks for item in journaled} == streams
    assert sorted(item.request.messages[0].content or "" for item in recorder.interactions) == sorted(streams)
    asyncio.run(recorder.aclose())
    saved = load_cassette(path).interactions
    assert len(saved) == 8
    assert {item.request.messages[0].content: item.chunks for item in saved} == streams
    assert sorted(os.listdir(tmp_path)) == ["c.msgpack"]
