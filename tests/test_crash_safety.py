"""SIGKILL a recording process at random points: nothing the consumer received is lost.

A helper process imports chunktape once and forks one recorder per trial (so 20 trials cost one interpreter
start). Each recorder streams a few interactions (text, reasoning and tool calls, split anywhere) and reports
every chunk its consumer receives to this process through a pipe, flushed, before asking for the next one.
The test kills it with SIGKILL after a random number of reports; whatever it reported must then be in the
cassette recovered from its journal (or in the saved cassette, if the kill came after the save), in order,
and every recovered interaction must validate (the one cut short as a valid prefix: no finish, maybe an
open block).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from chunktape import Cancelled, Cassette, Completed, load_cassette, recover, validate
from chunktape._cassettes import journal_path

TRIALS = 20
SEED = 20260108

_ZYGOTE = textwrap.dedent(
    """
    import asyncio, os, random, signal, sys
    sys.path.insert(0, {tests!r})
    from helpers import PacedAdapter, options, text_stream, tool_stream
    from chunktape import RecordingAdapter

    def plan(seed):
        rng = random.Random(seed)
        streams = []
        for number in range(rng.randint(1, 4)):
            if rng.random() < 0.5:
                streams.append(text_stream(*(f"{{seed}}.{{number}}.{{k}} " for k in range(rng.randint(1, 30)))))
            else:
                arguments = '{{"path": "/tmp/' + "x" * rng.randint(0, 40) + '", "n": ' + str(number) + '}}'
                cuts = sorted(rng.sample(range(1, len(arguments)), rng.randint(1, 5)))
                pieces = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)])]
                streams.append(tool_stream("write_file", *pieces, call_id=f"call_{{number}}"))
        return streams

    async def record(folder, seed):
        streams = plan(seed)
        rng = random.Random(seed)
        report = os.fdopen(1, "w", buffering=1, closefd=False)
        async with RecordingAdapter(PacedAdapter(lambda request: [
            (rng.random() * 0.002, chunk) for chunk in streams[int(request.messages[0].content)]
        ]), os.path.join(folder, "c.msgpack")) as recorder:
            for number in range(len(streams)):
                async for chunk in recorder.stream(options(str(number))):
                    report.write(f"got {{number}} {{type(chunk).__name__}}\\n")
                    report.flush()
        report.write("saved\\n")
        report.flush()
        while True:  # wait for the SIGKILL, so the parent never signals a pid that was already reaped
            signal.pause()

    for line in sys.stdin:
        folder, seed = line.split()
        pid = os.fork()
        if pid == 0:
            asyncio.run(record(folder, int(seed)))
            os._exit(0)
        print(f"pid {{pid}}", flush=True)
        os.waitpid(pid, 0)
        print("reaped", flush=True)
    """
)


def _recovered(folder: Path) -> Cassette:
    """What survived: the journal if it is still there (the save had not finished), else the saved cassette."""
    path = folder / "c.msgpack"
    journal = journal_path(path)
    if journal.exists() and journal.stat().st_size == 0:
        return Cassette()  # killed between creating the journal and reserving it: nothing was written, or received
    if journal.exists():
        return recover(journal)
    if path.exists():
        return load_cassette(path)
    return Cassette()  # killed before the first stream() call began: nothing was received either


def test_sigkill_at_random_points_loses_no_received_event(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    script = _ZYGOTE.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    zygote = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    assert zygote.stdin is not None
    assert zygote.stdout is not None
    outcomes = {"cut short": 0, "saved": 0}
    try:
        for trial in range(TRIALS):
            folder = tmp_path / f"trial{trial}"
            folder.mkdir()
            kill_after = rng.randint(0, 60)
            zygote.stdin.write(f"{folder} {SEED + trial}\n")
            zygote.stdin.flush()
            received: list[tuple[int, str]] = []
            pid = killed = None
            for line in zygote.stdout:
                word, *rest = line.split()
                if word == "pid":
                    pid = int(rest[0])
                elif word == "got":
                    received.append((int(rest[0]), rest[1]))
                elif word == "reaped":
                    break
                if pid is not None and killed is None and (len(received) >= kill_after or word == "saved"):
                    os.kill(pid, signal.SIGKILL)
                    killed = len(received)

            cassette = _recovered(folder)
            for interaction in cassette.interactions:
                if isinstance(interaction.outcome, Completed):
                    validate(interaction.chunks)
                else:
                    assert isinstance(interaction.outcome, Cancelled)
                    # cut short, possibly inside a block: every chunk it holds is a valid continuation
                    validate(interaction.chunks, require_finish=False)
            recorded = [
                (int(interaction.request.messages[0].content or ""), type(chunk).__name__)
                for interaction in cassette.interactions
                for chunk in interaction.chunks
            ]
            assert recorded[: len(received)] == received, f"trial {trial}: killed after {killed} reports"
            outcomes["saved" if (folder / "c.msgpack").exists() else "cut short"] += 1
            assert not list(folder.glob(".*.tmp"))
    finally:
        zygote.stdin.close()
        zygote.wait(timeout=30)
        zygote.stdout.close()
    assert outcomes["cut short"] >= TRIALS // 2, outcomes  # most kills land mid-recording
