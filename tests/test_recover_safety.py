"""``recover`` only turns journals into cassettes: anything else is refused by name and never deleted.

The CLI runs in process (typer's runner: exit code, stdout and stderr as a shell sees them) for ``-o``, ``--force``
and ``--append``; one recover runs as a real process, as a user runs it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chunktape import Cassette, ErrorCode, LlmError, RecordingAdapter, load_cassette, recover, save_cassette
from chunktape._cassettes import journal_path
from chunktape.cli import app
from helpers import PacedAdapter, collect, options, paced, text_stream
from test_codec import make_cassette

CLI = [sys.executable, "-m", "chunktape"]


def chunktape(*args: str | os.PathLike[str], process: bool = False) -> subprocess.CompletedProcess[str]:
    """``chunktape ARGS`` in process, or as a real process with ``process``."""
    argv = list(map(str, args))
    if process:
        env = {**os.environ, "NO_COLOR": "1"}
        env.pop("CHUNKTAPE_DEBUG", None)
        return subprocess.run([*CLI, *argv], capture_output=True, text=True, env=env, timeout=60, check=False)
    result = CliRunner().invoke(app, argv, env={"NO_COLOR": "1", "CHUNKTAPE_DEBUG": None})
    return subprocess.CompletedProcess(argv, result.exit_code, result.stdout, result.stderr)


def journal_of_a_crash(folder: Path) -> Path:
    """A journal as a recording that never saved leaves it."""
    path = folder / "crashed.msgpack"
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("kept"))), path)
    asyncio.run(collect(recorder.stream(options("before the crash"))))
    return journal_path(path)  # the recorder is dropped unsaved


@pytest.mark.parametrize(
    ("name", "content", "what"),
    [
        ("good.msgpack", None, "a msgpack cassette"),
        ("good.json", None, "a JSON cassette"),
        ("empty.journal", b"", "an empty file"),
        ("garbage.journal", b"\x93\x00\xff\xfe garbage", "binary data"),
        ("notes.journal", b"just some text", "text that does not start with a journal's meta record"),
    ],
)
def test_recover_refuses_what_is_not_a_journal_naming_it(
    tmp_path: Path, name: str, content: bytes | None, what: str
) -> None:
    path = tmp_path / name
    if content is None:
        save_cassette(make_cassette(2), path)
    else:
        path.write_bytes(content)
    with pytest.raises(LlmError) as caught:
        recover(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert f"this is {what}, not a chunktape journal" in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_journal_reserved_but_never_written_is_a_journal_with_nothing_in_it(tmp_path: Path) -> None:
    """A SIGKILL between the reservation of a journal's first window and its first record leaves NULs only."""
    path = tmp_path / "reserved.journal"
    path.write_bytes(b"\x00" * 4096)
    assert recover(path).interactions == []


def test_a_journal_torn_in_its_first_write_is_still_a_journal(tmp_path: Path) -> None:
    """A guard for the check above: a SIGKILL during the first write leaves a journal with nothing in it."""
    path = tmp_path / "torn.journal"
    path.write_bytes(b'["me')
    assert recover(path).interactions == []


@pytest.mark.parametrize(
    "flags",
    [["-o", "out.msgpack"], ["-o", "out.msgpack", "--force"], ["--append", "-o", "other.msgpack"]],
    ids=["output", "force", "append"],
)
def test_recover_of_a_cassette_exits_non_zero_and_deletes_nothing(tmp_path: Path, flags: list[str]) -> None:
    good = tmp_path / "good.msgpack"
    save_cassette(make_cassette(3), good)
    before = good.read_bytes()
    other = tmp_path / "other.msgpack"
    save_cassette(make_cassette(1), other)
    other_before = other.read_bytes()
    if "--force" in flags:
        save_cassette(make_cassette(1), tmp_path / "out.msgpack")
    out_before = (tmp_path / "out.msgpack").read_bytes() if "--force" in flags else None

    done = chunktape("recover", good, *[str(tmp_path / f) if f.endswith(".msgpack") else f for f in flags])
    assert done.returncode == 3, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("chunktape: error: [CASSETTE_CORRUPT]")
    assert "this is a msgpack cassette, not a chunktape journal" in line
    assert "recovered" not in done.stdout
    assert good.read_bytes() == before  # never deleted
    assert other.read_bytes() == other_before
    out = tmp_path / "out.msgpack"
    assert (out.read_bytes() if out.exists() else None) == out_before


@pytest.mark.parametrize("mode", ["output", "force", "append"])
def test_recover_of_a_journal_writes_the_cassette_then_deletes_the_journal(tmp_path: Path, mode: str) -> None:
    journal = journal_of_a_crash(tmp_path)
    expected = recover(journal).interactions
    out = tmp_path / "out.msgpack"
    existing = make_cassette(2)
    flags: list[str] = []
    if mode != "output":
        save_cassette(existing, out)
        flags = ["--force"] if mode == "force" else ["--append"]

    done = chunktape("recover", journal, "-o", out, *flags, process=mode == "output")
    assert done.returncode == 0, done.stderr
    assert not journal.exists()
    interactions = load_cassette(out).interactions
    if mode == "append":
        assert interactions == [*existing.interactions, *expected]
    else:
        assert interactions == expected
    assert interactions[-1].chunks == text_stream("kept")


def test_a_journal_is_kept_when_its_cassette_cannot_be_written(tmp_path: Path) -> None:
    journal = journal_of_a_crash(tmp_path)
    before = journal.read_bytes()
    (tmp_path / "file").write_text("a file, not a folder")
    done = chunktape("recover", journal, "-o", tmp_path / "file" / "out.msgpack")
    assert done.returncode == 3
    assert "[CASSETTE_UNWRITABLE]" in done.stderr
    assert journal.read_bytes() == before


def test_recover_never_writes_over_the_journal_it_reads(tmp_path: Path) -> None:
    """A journal renamed to look like a cassette, recovered onto itself: it must not be deleted afterwards."""
    journal = journal_of_a_crash(tmp_path)
    renamed = journal.rename(tmp_path / "odd.msgpack")
    before = renamed.read_bytes()
    done = chunktape("recover", renamed, "-o", renamed, "--force")
    assert done.returncode == 3
    assert "is the journal itself" in done.stderr
    assert renamed.read_bytes() == before


def test_a_cassette_given_for_its_journal_is_named_and_left_alone(tmp_path: Path) -> None:
    """``recover c.msgpack`` (the cassette, not ``c.msgpack.journal``): one line naming the journal to give."""
    cassette = tmp_path / "c.msgpack"
    save_cassette(Cassette(interactions=[]), cassette)
    before = cassette.read_bytes()
    done = chunktape("recover", cassette, process=True)
    assert done.returncode == 3
    assert done.stderr.strip().splitlines() == [
        f"chunktape: error: {cassette} is not named as a journal: give its recording's journal "
        f"({cassette}.journal), or --output if this file is one"
    ]
    assert cassette.read_bytes() == before
