"""What a review of the store found: each test fails on the tree it was written against."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

from chunktape import RecordingAdapter, load_cassette, save_cassette
from chunktape.cassettes.codec import journal_path, temp_path
from helpers import PacedAdapter, collect, options, paced, text_stream
from test_codec import make_cassette


def _run(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter; a hang is killed (and fails the test) rather than stalling the suite."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
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
    done = _run(
        f"""
        import faulthandler, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_codec import make_cassette
        from chunktape.cassettes.codec import append_interactions, cassette_lock, load_cassette, open_cassette
        from chunktape.cassettes.model import CassetteMeta
        faulthandler.dump_traceback_later(20, exit=True)
        append_interactions({str(path)!r}, make_cassette(2).interactions, CassetteMeta(), join=lambda meta: True)
        with cassette_lock({str(path)!r}):  # readers never wait for the writers' lock
            print(len(load_cassette({str(path)!r}).interactions), len(open_cassette({str(path)!r})))
        """
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
