"""Many streams at once through one recorder and one replayer; many processes sharing one cassette."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chunktape import (
    GenerateOptions,
    RecordingAdapter,
    ReplayAdapter,
    StreamChunk,
    TextDelta,
    load_cassette,
    validate,
)
from helpers import PacedAdapter, Step, collect, options, text_stream

STREAMS = 200


def _interleaved(request: GenerateOptions) -> list[Step]:
    """Eight chunks tagged with the request's number, each after a zero sleep: every stream yields to the others."""
    number = int(request.messages[0].content or "0")
    return [(0.0, chunk) for chunk in text_stream(*(f"{number}/{piece} " for piece in range(4)))]


def _own(number: int, chunks: list[StreamChunk]) -> bool:
    return all(chunk.text.startswith(f"{number}/") for chunk in chunks if isinstance(chunk, TextDelta))


async def test_two_hundred_concurrent_streams_record_and_replay_without_loss_or_interleaving(tmp_path: Path) -> None:
    path = tmp_path / "many.msgpack"
    async with RecordingAdapter(PacedAdapter(_interleaved), path) as recorder:
        received = await asyncio.gather(*(collect(recorder.stream(options(str(n)))) for n in range(STREAMS)))

    interactions = load_cassette(path).interactions
    assert len(interactions) == STREAMS
    assert sorted(int(item.request.messages[0].content or "") for item in interactions) == list(range(STREAMS))
    for interaction in interactions:
        number = int(interaction.request.messages[0].content or "")
        assert interaction.chunks == received[number]
        assert _own(number, interaction.chunks)
        validate(interaction.chunks)
        times = [event.t_ns for event in interaction.events]
        assert times == sorted(times)

    replay = ReplayAdapter(path)
    order = [(n * 37) % STREAMS for n in range(STREAMS)]  # a different order than recorded
    replayed = await asyncio.gather(*(collect(replay.stream(options(str(n)))) for n in order))
    for number, chunks in zip(order, replayed, strict=True):
        assert chunks == received[number]
    replay.assert_all_played()
    assert os.listdir(tmp_path) == ["many.msgpack"]


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {tests!r})
    from helpers import PacedAdapter, collect, options, paced, text_stream
    from chunktape import use_cassette

    worker, path = int(sys.argv[1]), sys.argv[2]

    def live():
        return PacedAdapter(lambda request: paced(text_stream("reply " + request.messages[0].content)))

    async def main():
        for session in range({sessions}):
            async with use_cassette(path, live=live, mode="new_episodes") as tape:
                for call in range(2):
                    question = f"w{{worker}} s{{session}} c{{call}}"
                    assert await collect(tape.stream(options(question))) == text_stream("reply " + question)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("name", ["shared.msgpack", "shared.json"])
def test_four_processes_recording_new_episodes_into_one_cassette_keep_everything(tmp_path: Path, name: str) -> None:
    sessions = 5
    folder = tmp_path / "tapes"
    path = folder / name
    script = _WRITER.format(tests=str(Path(__file__).parent), sessions=sessions)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    workers = [subprocess.Popen([sys.executable, "-c", script, str(n), str(path)], env=env) for n in range(4)]
    assert [worker.wait(timeout=120) for worker in workers] == [0, 0, 0, 0]

    interactions = load_cassette(path).interactions
    questions = sorted(interaction.request.messages[0].content or "" for interaction in interactions)
    expected = sorted(f"w{w} s{s} c{c}" for w in range(4) for s in range(sessions) for c in range(2))
    assert questions == expected  # none lost, none twice
    for interaction in interactions:
        assert interaction.chunks == text_stream(f"reply {interaction.request.messages[0].content}")
        validate(interaction.chunks)
    assert os.listdir(folder) == [name]  # no temp files, no journals


async def test_two_new_episodes_sessions_creating_one_cassette_keep_both(tmp_path: Path) -> None:
    """Both start before the file exists (two xdist workers, say): the second save must not replace the first."""
    path = tmp_path / "c.msgpack"

    def live() -> PacedAdapter:
        return PacedAdapter(lambda request: [(0.0, chunk) for chunk in text_stream(f"{request.messages[0].content}")])

    from chunktape import use_cassette

    first = use_cassette(path, live=live, mode="new_episodes")
    second = use_cassette(path, live=live, mode="new_episodes")
    await collect(first.stream(options("one")))
    await collect(second.stream(options("two")))
    await first.aclose()
    await second.aclose()
    assert [item.request.messages[0].content for item in load_cassette(path).interactions] == ["one", "two"]
