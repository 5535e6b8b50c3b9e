"""Saving and recovering never lose a recording: a killed save, a crashed or still-running journal, a failed run,
a save or close that failed and is tried again, and what a cassette prints to a terminal."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import msgspec
import pytest
from typer.testing import CliRunner

import chunktape._cassettes.codec as codec
import chunktape._cassettes.store as store
from chunktape import (
    Cancelled,
    Cassette,
    CassetteSession,
    ErrorCode,
    LlmError,
    RecordingAdapter,
    load_cassette,
    save_cassette,
    use_cassette,
)
from chunktape._cassettes.journal import journal_path
from chunktape._cassettes.store import temp_path
from chunktape.cli._app import app
from helpers import PacedAdapter, collect, interaction_of, interrupt, options, paced, text_stream, tool_stream
from test_codec import make_cassette


def _run(script: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter; a hang is killed (and fails the test) rather than stalling the suite."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        input=stdin,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_appending_save_after_a_killed_save_neither_hangs_nor_keeps_the_temp(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    save_cassette(make_cassette(1), path)
    temp_path(path).write_bytes(b"half a save")  # what a SIGKILL mid-save leaves
    done = _run(  # the interactions come on stdin: the process imports chunktape alone, not test_codec
        f"""
        import faulthandler, sys
        import msgspec
        from chunktape._cassettes.codec import load_cassette, open_cassette
        from chunktape._cassettes.store import append_interactions, cassette_lock
        from chunktape._cassettes.model import CassetteMeta, Interaction
        faulthandler.dump_traceback_later(20, exit=True)
        interactions = msgspec.json.decode(sys.stdin.read(), type=list[Interaction])
        append_interactions({str(path)!r}, interactions, CassetteMeta(), join=lambda meta: True)
        with cassette_lock({str(path)!r}):  # readers never wait for the writers' lock
            print(len(load_cassette({str(path)!r}).interactions), len(open_cassette({str(path)!r})))
        """,
        msgspec.json.encode(make_cassette(2).interactions).decode(),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "3"]
    assert sorted(os.listdir(tmp_path)) == ["c.msgpack"]


async def test_a_crashed_journal_under_warnings_as_errors_still_lets_the_stream_record(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    journal_path(path).write_bytes(b'["meta",{}]\n')  # what a SIGKILLed recording left
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("x"))), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert await collect(recorder.stream(options())) == text_stream("x")
    await recorder.aclose()
    assert len(load_cassette(path).interactions) == 1
    assert [name for name in os.listdir(tmp_path) if ".crashed-" in name]  # the earlier journal, set aside


async def _crashed_journal(path: Path, name: str, text: str) -> Path:
    """A journal at ``name`` beside ``path`` as a recording killed after one reply left it (unlocked)."""
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream(text))), path)
    await collect(recorder.stream(options(text)))
    journal = recorder.journal_path
    del recorder  # dropped unsaved: its journal is closed and unlocked, as a dead process's is
    return journal.rename(journal.with_name(name))


async def test_recover_refuses_the_journal_of_a_recording_still_running(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("one two three"))), path)
    stream = recorder.stream(options())
    await anext(stream)
    journal = recorder.journal_path
    result = CliRunner().invoke(app, ["recover", str(journal), "-o", str(tmp_path / "out.msgpack")])
    assert result.exit_code == 3
    assert "still being recorded by a live process" in result.output
    assert journal.exists()
    assert not (tmp_path / "out.msgpack").exists()
    assert [chunk async for chunk in stream][-1] == text_stream("one two three")[-1]
    await recorder.aclose()
    assert len(load_cassette(path).interactions) == 1


async def test_two_crashed_journals_recover_by_default_into_two_cassettes(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    first = await _crashed_journal(path, "c.msgpack.journal.crashed-20260101T000000000000Z", "first")
    second = await _crashed_journal(path, "c.msgpack.journal.crashed-20260101T000000000000Z-1", "second")
    third = await _crashed_journal(path, "c.msgpack.journal.1", "third")
    for journal in (first, second, third):
        result = CliRunner().invoke(app, ["recover", str(journal)])
        assert result.exit_code == 0, result.output
    outputs = sorted(name for name in os.listdir(tmp_path) if name.endswith(".msgpack"))
    assert outputs == [
        "c.recovered-1.msgpack",
        "c.recovered-20260101T000000000000Z-1.msgpack",
        "c.recovered-20260101T000000000000Z.msgpack",
    ]
    texts = {name: load_cassette(tmp_path / name).interactions[0].request.messages[0].content for name in outputs}
    assert sorted(map(str, texts.values())) == ["first", "second", "third"]


async def test_recover_refuses_a_default_output_another_live_recorder_will_write(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    crashed = await _crashed_journal(path, "c.msgpack.journal.held", "crashed")
    held = os.open(crashed, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # stands for the crashed recorder while it was still alive
    crashed.rename(journal_path(path))
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("live"))), path)
    stream = recorder.stream(options())
    await anext(stream)  # this recorder took c.msgpack.journal.1
    os.close(held)  # ... and now the first one has died
    result = CliRunner().invoke(app, ["recover", str(journal_path(path))])
    assert result.exit_code == 3
    assert "being recorded now by a live process" in result.output
    assert journal_path(path).exists()
    await stream.aclose()
    await recorder.aclose()


async def test_recover_append_reads_the_cassette_under_the_writers_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.msgpack"
    journal = await _crashed_journal(path, "c.msgpack.journal", "recovered")
    out = tmp_path / "out.msgpack"
    save_cassette(make_cassette(2), out)
    reads: list[bool] = []
    real_read = codec.read_file

    def read(read_path: Path) -> bytes:
        if read_path == out:
            folder = os.open(tmp_path, os.O_RDONLY)
            try:
                fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                reads.append(True)  # a writer holds the lock: this read is part of an appending save
            else:
                reads.append(False)
            finally:
                os.close(folder)
        return real_read(read_path)

    monkeypatch.setattr(codec, "read_file", read)
    result = CliRunner().invoke(app, ["recover", str(journal), "-o", str(out), "--append"])
    assert result.exit_code == 0, result.output
    assert reads == [True]
    assert len(load_cassette(out).interactions) == 3


KEY = "sk-proj-" + "A1b2C3d4" * 5


async def _session_run(path: Path, text: str, prompt: str, *, failed: bool | None = None) -> CassetteSession:
    session = use_cassette(path, live=lambda: PacedAdapter(paced(text_stream(text))), mode="new_episodes")
    await collect(session.stream(options(prompt)))
    with contextlib.suppress(LlmError):
        session.save(failed=failed)
    await session.aclose()
    return session


async def test_a_failed_recording_is_never_replaced_nor_removed_by_a_later_save(tmp_path: Path) -> None:
    path = tmp_path / "shared.msgpack"
    secret = await _session_run(path, f"here is your key {KEY}", "paid A")
    assert secret.written == tmp_path / "shared.failed.msgpack"
    assert stat.S_IMODE(os.stat(secret.written).st_mode) == 0o600
    failing = await _session_run(path, "a failing test's reply", "paid B", failed=True)
    assert failing.written == tmp_path / "shared.failed-2.msgpack"
    passing = await _session_run(path, "fine", "C")
    assert passing.written == path
    kept = {
        name: [item.request.messages[0].content for item in load_cassette(tmp_path / name).interactions]
        for name in ("shared.failed.msgpack", "shared.failed-2.msgpack", "shared.msgpack")
    }
    assert kept == {"shared.failed.msgpack": ["paid A"], "shared.failed-2.msgpack": ["paid B"], "shared.msgpack": ["C"]}


async def test_a_session_whose_only_call_was_cancelled_writes_no_cassette(tmp_path: Path) -> None:
    path = tmp_path / "good.msgpack"
    await _session_run(path, "paid answer", "hello")
    good = path.read_bytes()
    session = use_cassette(path, live=lambda: PacedAdapter(paced(text_stream("never seen"))), mode="all")
    stream = session.stream(options("hello"))
    await anext(stream)
    await stream.aclose()  # interrupted before the reply completed
    await session.aclose()
    assert path.read_bytes() == good
    assert session.written == tmp_path / "good.failed.msgpack"
    assert type(load_cassette(session.written).interactions[0].outcome) is Cancelled


def test_record_interrupted_before_any_chunk_keeps_the_good_cassette(tmp_path: Path) -> None:
    out = tmp_path / "good.msgpack"
    save_cassette(make_cassette(2), out)
    good = out.read_bytes()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(60)
        port = server.getsockname()[1]
        env = {**os.environ, "DEEPSEEK_API_KEY": "x" * 20, "NO_COLOR": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
        command = [sys.executable, "-m", "chunktape", "record", "-p", "Say hello", "-o", str(out)]
        process = subprocess.Popen(
            [*command, "--base-url", f"http://127.0.0.1:{port}/v1"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        connection, _ = server.accept()  # the request is out; no reply will come
        with connection:
            connection.recv(65536)
            _, stderr = interrupt(process, timeout=60)
    assert process.returncode == 130, stderr  # Ctrl-C, once it said what it kept
    assert "kept the failed recording in" in stderr
    assert out.read_bytes() == good
    kept = load_cassette(tmp_path / "good.failed.msgpack").interactions
    assert [type(item.outcome) for item in kept] == [Cancelled]


def _full_disk_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next cassette write fails with ENOSPC; the one after it finds room again."""
    real = store._write_atomic
    calls: list[Path] = []

    def write(path: Path, data: bytes, *mode: int | None) -> None:
        calls.append(path)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, data, *mode)

    monkeypatch.setattr(store, "_write_atomic", write)


@pytest.mark.parametrize("again", ["save", "aclose"])
async def test_a_session_save_that_failed_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, again: str
) -> None:
    path = tmp_path / "c.msgpack"
    session = use_cassette(path, live=lambda: PacedAdapter(paced(text_stream("paid for"))), mode="once")
    await collect(session.stream(options()))
    _full_disk_once(monkeypatch)
    with pytest.raises(LlmError) as caught:
        await session.aclose()
    assert caught.value.code is ErrorCode.CASSETTE_UNWRITABLE
    assert session.recorder is not None
    assert session.recorder.journal_path.exists()
    if again == "save":
        assert session.save() == path
    else:
        await session.aclose()
    assert session.written == path
    assert len(load_cassette(path).interactions) == 1
    assert not session.recorder.journal_path.exists()


async def test_a_recorder_aclose_that_failed_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.msgpack"
    recorder = RecordingAdapter(PacedAdapter(paced(text_stream("paid for"))), path)
    await collect(recorder.stream(options()))
    _full_disk_once(monkeypatch)
    with pytest.raises(LlmError):
        await recorder.aclose()
    await recorder.aclose()
    assert len(load_cassette(path).interactions) == 1
    assert not recorder.journal_path.exists()


_ESCAPES = "\x1b]52;c;ZWNobyBwd25lZA==\x07 \x1b[2J \x9b31m \r"


@pytest.mark.parametrize("command", [["play", "--instant"], ["show"], ["show", "--json"]], ids=lambda c: " ".join(c))
def test_nothing_printed_from_a_cassette_reaches_the_terminal_as_a_control_sequence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    path = tmp_path / "c.msgpack"
    chunks = [*text_stream(f"hi {_ESCAPES} there")[:-1], *tool_stream(f"f{_ESCAPES}", f'{{"a": "{_ESCAPES}"}}')]
    interaction = interaction_of(chunks, content=f"\x1b[31mred{_ESCAPES}")
    save_cassette(Cassette(interactions=[interaction]), path)
    result = CliRunner().invoke(app, [command[0], str(path), *command[1:]])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "hi" in result.output or "red" in result.output
    assert not set(result.output) & {"\x1b", "\x07", "\x9b", "\r"}


async def test_two_recordings_refused_for_a_secret_each_name_the_file_they_kept(tmp_path: Path) -> None:
    """Two writers of one cassette (xdist workers) both fail on a credential: each message names its own file,
    ``shared.failed.msgpack`` and ``shared.failed-2.msgpack``, and no other."""
    path = tmp_path / "shared.msgpack"
    messages = []
    for prompt, failed in (("worker A", True), ("worker B", True)):
        session = use_cassette(path, live=lambda: PacedAdapter(paced(text_stream(f"key {KEY}"))), mode="new_episodes")
        await collect(session.stream(options(prompt)))
        with pytest.raises(LlmError) as caught:
            session.save(failed=failed)
        assert caught.value.code is ErrorCode.SECRET_DETECTED
        messages.append(caught.value.message)
        await session.aclose()
    first, second = messages
    assert "shared.failed.msgpack" in first
    assert "shared.failed-2" not in first
    assert "shared.failed-2.msgpack" in second
    assert "shared.failed.msgpack" not in second
