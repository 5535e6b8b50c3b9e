"""The journal is written through reserved, mapped windows, and falls back to ``write()`` where none can be reserved.

Speed itself is a benchmark (``benchmarks/bench_core.py``), never a timed test; these tests hold the safety of
the fast path: records that straddle windows, a reservation failing mid-stream (full disk, no fallocate), and
the reserved tail trimmed on close.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

import pytest

from chunktape import RecordingAdapter, recover
from chunktape._cassettes import journal as journal_module
from chunktape._cassettes import journal_path
from chunktape._cassettes.model import CassetteMeta
from chunktape._recorder import JournalWriteWarning
from helpers import PacedAdapter, collect, options, paced, text_stream

CHUNKS = text_stream(*(f"piece {n} " for n in range(300)))


def _reserving(monkeypatch: pytest.MonkeyPatch, windows: int, error: int = errno.ENOSPC) -> list[int]:
    """Small windows (one page), of which ``windows`` can be reserved; the next reservation fails with ``error``."""
    monkeypatch.setattr(journal_module, "_WINDOW", mmap.PAGESIZE)
    real = os.posix_fallocate
    reserved: list[int] = []

    def fallocate(fd: int, offset: int, length: int) -> None:
        if len(reserved) >= windows:
            raise OSError(error, os.strerror(error))
        reserved.append(offset)
        real(fd, offset, length)

    monkeypatch.setattr(journal_module, "_fallocate", fallocate)
    return reserved


async def test_records_straddling_mapped_windows_are_journaled_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reserved = _reserving(monkeypatch, windows=1000)
    path = tmp_path / "c.msgpack"
    recorder = RecordingAdapter(PacedAdapter(paced(CHUNKS)), path)
    assert await collect(recorder.stream(options())) == CHUNKS
    assert len(reserved) > 3  # the stream crossed several windows
    assert recover(recorder.journal_path).interactions[0].chunks == CHUNKS
    await recorder.aclose()


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EOPNOTSUPP])
async def test_a_window_that_cannot_be_reserved_mid_stream_falls_back_to_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int
) -> None:
    _reserving(monkeypatch, windows=2, error=error)
    path = tmp_path / "c.msgpack"
    recorder = RecordingAdapter(PacedAdapter(paced(CHUNKS)), path)
    assert await collect(recorder.stream(options())) == CHUNKS
    assert recover(recorder.journal_path).interactions[0].chunks == CHUNKS
    await recorder.aclose()


async def test_no_room_to_reserve_nor_to_write_keeps_a_clean_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _reserving(monkeypatch, windows=2)

    def full(fd: int, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal_module, "_os_write", full)
    path = tmp_path / "c.msgpack"
    recorder = RecordingAdapter(PacedAdapter(paced(CHUNKS)), path)
    with pytest.warns(JournalWriteWarning, match="No space left on device"):
        assert await collect(recorder.stream(options())) == CHUNKS
    (journaled,) = recover(journal_path(path)).interactions
    assert 0 < len(journaled.chunks) < len(CHUNKS)
    assert journaled.chunks == CHUNKS[: len(journaled.chunks)]  # what fit, nothing torn
    monkeypatch.undo()
    await recorder.aclose()
    assert os.listdir(tmp_path) == ["c.msgpack"]


def test_a_closed_journal_is_trimmed_to_what_was_written(tmp_path: Path) -> None:
    journal = journal_module.Journal(tmp_path / "c.msgpack.journal", CassetteMeta())
    assert os.path.getsize(journal.path) >= journal_module._WINDOW  # its meta record, and room reserved ahead
    journal.close(remove=False)
    data = journal.path.read_bytes()
    assert data.endswith(b"\n")
    assert b"\x00" not in data
    assert recover(journal.path).interactions == []
