"""What installing chunktape does to a user's own suite: nothing, unless a test uses it.

Each test builds a fresh virtualenv that holds exactly the distributions a ``pip install chunktape pytest`` would
bring (chunktape's dependencies and pytest's, read from the installed metadata, linked from this environment: no
network, no pip), so pytest finds only their entry points: neither pytest-asyncio nor looptime is there.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from chunktape import (
    BlockEnd,
    BlockStart,
    Cassette,
    Completed,
    Event,
    Finish,
    FinishReason,
    Interaction,
    Message,
    RecordedRequest,
    StreamChunk,
    TextBlock,
    TextDelta,
    save_cassette,
)
from installed import linked_python

PLAIN_SUITE = """
import asyncio


def test_sync_tmp(tmp_path):
    (tmp_path / "x").write_text("x")
    assert (tmp_path / "x").read_text() == "x"


def test_fails():
    assert 1 == 2


async def test_async_without_a_plugin():
    await asyncio.sleep(0)
"""

TAPE_SUITE = """
import json


def test_sync_client_replays(tape):
    client = tape.http_client(sync=True)
    reply = client.post(
        "http://127.0.0.1:9/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    )
    assert reply.status_code == 200
    assert "Bonjour" in reply.text


async def test_async_tape_needs_an_async_plugin(tape):
    pass
"""


def _outcomes(python: Path, project: Path, *args: str) -> dict[str, str]:
    """Each test's outcome in a pytest run of ``project`` by ``python``."""
    run = subprocess.run(
        [str(python), "-m", "pytest", "-rA", "-p", "no:cacheprovider", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={key: value for key, value in os.environ.items() if not key.startswith("PYTEST")},
    )
    lines = re.finditer(r"^(PASSED|FAILED|ERROR|SKIPPED) (\S+)", run.stdout, re.M)
    found = {match[2]: match[1] for match in lines}
    assert found, run.stdout + run.stderr
    return found


@pytest.fixture(scope="module")
def pythons(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("venvs")
    return {
        "pytest only": linked_python(root / "bare", ["pytest"]),
        "chunktape and pytest": linked_python(root / "with-chunktape", ["chunktape", "pytest"]),
    }


def test_the_environment_has_neither_pytest_asyncio_nor_looptime(pythons: dict[str, Path]) -> None:
    check = (
        "import importlib.util as u; print([m for m in ('pytest_asyncio', 'looptime', 'chunktape') if u.find_spec(m)])"
    )
    found = subprocess.run(
        [str(pythons["chunktape and pytest"]), "-c", check], capture_output=True, text=True, check=True
    ).stdout
    assert found.strip() == "['chunktape']"


def test_installing_chunktape_changes_no_result_of_a_plain_suite(pythons: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(PLAIN_SUITE)
    without = _outcomes(pythons["pytest only"], tmp_path)
    assert without["test_plain.py::test_sync_tmp"] == "PASSED"
    assert _outcomes(pythons["chunktape and pytest"], tmp_path) == without


def test_a_sync_test_replays_through_tape_without_an_async_plugin(pythons: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "cassettes" / "test_tape"
    folder.mkdir(parents=True)
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="text"),
        TextDelta(index=0, text="Bonjour"),
        BlockEnd(index=0, block=TextBlock(text="Bonjour")),
        Finish(reason=FinishReason(kind="stop")),
    ]
    request = RecordedRequest(model="m", messages=[Message(role="user", content="hi")])
    events = [Event(t_ns=position, chunk=chunk) for position, chunk in enumerate(chunks)]
    interaction = Interaction(request=request, events=events, outcome=Completed(t_ns=len(chunks)))
    save_cassette(Cassette(interactions=[interaction]), folder / "test_sync_client_replays.msgpack")
    (tmp_path / "test_tape.py").write_text(TAPE_SUITE)
    outcomes = _outcomes(pythons["chunktape and pytest"], tmp_path)
    assert outcomes["test_tape.py::test_sync_client_replays"] == "PASSED"
    # pytest's own verdict on an async test with no async plugin: chunktape adds nothing to it.
    assert outcomes["test_tape.py::test_async_tape_needs_an_async_plugin"] == "FAILED"
