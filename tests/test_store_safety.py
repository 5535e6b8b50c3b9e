"""Saving never leaves debris nor writes through a planted link, and any cassette name the filesystem takes saves.

A save writes ``.ct-<8 hex of the cassette's name>.tmp`` beside the cassette (short, so a 255-character name
still fits; derived from the name, so what a killed save left is found again and removed by the next save of
that cassette; readers leave it, as they never take the writers' lock).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from chunktape import RecordingAdapter, load_cassette, open_cassette, recover, save_cassette
from chunktape._cassettes import journal_path
from chunktape._cassettes.model import CassetteMeta
from chunktape._cassettes.store import append_interactions, temp_path
from helpers import PacedAdapter, collect, options, paced, text_stream
from test_codec import make_cassette

# The cassette to save comes on stdin (``make_cassette(2)`` as msgpack), so the process imports chunktape alone,
# not test_codec with pytest and hypothesis.
_KILLED_MID_SAVE = textwrap.dedent(
    """
    import os, signal, sys
    import msgspec
    from chunktape import Cassette, save_cassette

    def die(fd):
        os.kill(os.getpid(), signal.SIGKILL)  # after the temp file is written, before its rename

    cassette = msgspec.msgpack.decode(sys.stdin.buffer.read(), type=Cassette)
    os.fsync = die
    save_cassette(cassette, {path!r})
    """
)


def kill_mid_save(path: Path) -> None:
    """Run a save in a process that is SIGKILLed between writing its temp file and renaming it."""
    script = _KILLED_MID_SAVE.format(path=str(path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cassette = msgspec.msgpack.encode(make_cassette(2))
    done = subprocess.run([sys.executable, "-c", script], input=cassette, env=env, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL


@pytest.mark.parametrize("then", ["save", "append"])
def test_the_temp_file_a_killed_save_left_is_removed_by_the_next_save(tmp_path: Path, then: str) -> None:
    path = tmp_path / "c.json"
    save_cassette(make_cassette(1), path)
    kill_mid_save(path)
    left = [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
    assert len(left) == 1  # the debris the kill left
    if then == "save":
        save_cassette(make_cassette(3), path)
        assert len(load_cassette(path).interactions) == 3
    else:
        append_interactions(path, make_cassette(2).interactions, CassetteMeta())
        assert len(load_cassette(path).interactions) == 3
    assert os.listdir(tmp_path) == ["c.json"]


def test_opening_or_loading_leaves_a_killed_saves_temp_file_to_the_next_save(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    save_cassette(make_cassette(1), path)
    kill_mid_save(path)
    assert len(open_cassette(path)) == 1
    assert len(load_cassette(path).interactions) == 1
    assert len(os.listdir(tmp_path)) == 2  # readers do not take the writers' lock, so they do not clean up


def test_a_temp_name_is_short_and_fixed_per_cassette(tmp_path: Path) -> None:
    long = tmp_path / ("x" * 255)
    assert len(temp_path(long).name) == len(".ct-12345678.tmp")
    assert temp_path(tmp_path / "a.msgpack") == temp_path(tmp_path / "a.msgpack")
    assert temp_path(tmp_path / "a.msgpack") != temp_path(tmp_path / "b.msgpack")
    assert temp_path(tmp_path / "a.msgpack").parent == tmp_path


@pytest.mark.parametrize("length", [242, 250, 255])
async def test_a_cassette_name_of_up_to_255_characters_records_and_saves(tmp_path: Path, length: int) -> None:
    name = "n" * (length - len(".msgpack")) + ".msgpack"
    path = tmp_path / name
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("long"))), path)
    assert await collect(recorder.stream(options())) == text_stream("long")
    assert len(recorder.journal_path.name) <= 255
    assert recover(recorder.journal_path).interactions[0].chunks == text_stream("long")
    await recorder.aclose()
    assert load_cassette(path).interactions[0].chunks == text_stream("long")
    assert os.listdir(tmp_path) == [name]


def test_journal_names_of_long_cassettes_stay_distinct(tmp_path: Path) -> None:
    first, second = (tmp_path / ("n" * 240 + tail) for tail in ("a.json", "b.json"))
    assert journal_path(first) != journal_path(second)
    assert journal_path(tmp_path / "c.msgpack") == tmp_path / "c.msgpack.journal"  # short names as before


def test_a_planted_temp_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"precious")
    path = tmp_path / "cassettes" / "c.msgpack"
    path.parent.mkdir()
    temp_path(path).symlink_to(target)
    save_cassette(make_cassette(1), path)
    assert target.read_bytes() == b"precious"
    assert len(load_cassette(path).interactions) == 1
    assert os.listdir(path.parent) == ["c.msgpack"]


def test_a_sigkilled_recording_then_saved_again_leaves_only_the_cassette(tmp_path: Path) -> None:
    """The whole loop: a kill mid-save, then the next recording of that cassette saves cleanly."""
    path = tmp_path / "c.msgpack"
    kill_mid_save(path)
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("again"))), path)
    asyncio.run(collect(recorder.stream(options())))
    asyncio.run(recorder.aclose())
    assert os.listdir(tmp_path) == ["c.msgpack"]
