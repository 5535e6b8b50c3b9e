"""Per test in a 200-test suite: the ``tape`` fixture, and the openai SDK on ``tape.http_client()``
(``ReplayTransport``), vs pytest-recording replaying the same streams through the openai SDK.

Three generated suites of ``TESTS`` tests (4 modules), each test replaying its own one-stream cassette in record
mode ``none``: ``tape`` streams the adapter (async test, pytest-asyncio); ``transport`` drives a sync
``openai.OpenAI`` on ``tape.http_client(sync=True)``; ``pytest-recording`` drives the same SDK under
``@pytest.mark.vcr``, its YAML cassettes recorded by pytest-recording itself from chunktape's replay server on
127.0.0.1 (so both hold the same streams; nothing listens when they replay). Each suite runs in its own pytest
process, the three taking turns; the figure is the summed setup + call + teardown time per test (what a test
costs once pytest is up), median of the rounds; the detail also gives each suite's wall time.

pytest-recording (PyPI) is installed at bench time into ``benchmarks/.work/pytest-recording`` (ignored by git,
never in the virtualenv) and put on that one suite's ``PYTHONPATH``; ``--quick`` installs nothing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _peers
from bench_core import Row, print_table, recorded, text_stream

from chunktape import (
    Cassette,
    GenerateOptions,
    Interaction,
    Message,
    save_cassette,
)
from chunktape.http import ReplayServer, render_sse

PEER = _peers.PYTEST_RECORDING.package
TESTS = 200
MODULES = 4
PIECES = 50
SUITES = ("bare", "mock", "tape", "transport", PEER)
"""``bare``: the same async tests draining a bare generator of the same prebuilt chunks, no fixture: what pytest and
pytest-asyncio themselves cost per test here (the floor under the tape fixture's figure). ``mock``: the SDK tests on
one shared client whose transport is httpx2's ``MockTransport`` answering every request with the same prebuilt SSE
body, no matching, no cassette: what the openai SDK and pytest cost per test (the floor under both SDK suites)."""
URL_ENV = "BENCH_SUITE_URL"
OUT_ENV = "BENCH_SUITE_OUT"

CONFTEST = f'''
import json, os, pytest

_seconds = []


def pytest_runtest_logreport(report):
    _seconds.append(report.duration)


def pytest_sessionfinish(session):
    plugins = sorted(name for name, _ in session.config.pluginmanager.list_name_plugin() if name)
    with open(os.environ["{OUT_ENV}"], "w") as out:
        json.dump({{"seconds": sum(_seconds), "tests": session.testscollected, "plugins": plugins}}, out)
'''
SHARED = {
    "bare": """
from chunktape import BlockEnd, BlockStart, Finish, FinishReason, TextBlock, TextDelta, TokenUsage, UsageChunk

_PIECES = [f"piece{i} " for i in range(50)]
CHUNKS = [
    BlockStart(index=0, block_type="text"),
    *(TextDelta(index=0, text=piece) for piece in _PIECES),
    BlockEnd(index=0, block=TextBlock(text="".join(_PIECES))),
    UsageChunk(usage=TokenUsage(input_tokens=5, output_tokens=50)),
    Finish(reason=FinishReason(kind="stop")),
]
""",
    # One SDK client per session on each side, built the same way (one httpx2.Client, one openai.OpenAI on it):
    # a test pays for replaying its stream, not for constructing a client.
    "transport": '''
import httpx2, openai, pytest


class _Current(httpx2.BaseTransport):
    """The session's client sends each request to the running test's tape."""

    transport = None

    def handle_request(self, request):
        return self.transport.handle_request(request)


_CURRENT = _Current()


@pytest.fixture(scope="session")
def shared_sdk():
    with httpx2.Client(transport=_CURRENT) as http:
        with openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test", max_retries=0, http_client=http) as sdk:
            yield sdk


@pytest.fixture
def sdk(tape, shared_sdk):
    _CURRENT.transport = tape.transport(sync=True)
    yield shared_sdk
    _CURRENT.transport = None
''',
    "mock": """
import pathlib, httpx2, openai, pytest

_BODY = (pathlib.Path(__file__).parent / "body.sse").read_bytes()


def _answer(request):
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=_BODY)


@pytest.fixture(scope="session")
def sdk():
    with httpx2.Client(transport=httpx2.MockTransport(_answer)) as http:
        with openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test", max_retries=0, http_client=http) as sdk:
            yield sdk
""",
    PEER: f'''
import httpx2, openai, os, pytest


@pytest.fixture(scope="session")
def sdk():
    with httpx2.Client() as http:
        base_url = os.environ["{URL_ENV}"] + "/v1"
        with openai.OpenAI(base_url=base_url, api_key="test", max_retries=0, http_client=http) as sdk:
            yield sdk
''',
}
HEAD = {
    "bare": "from chunktape import TextDelta\nfrom conftest import CHUNKS\n",
    "tape": "from chunktape import GenerateOptions, Message, TextDelta\n",
    "transport": "",
    "mock": "",
    PEER: "import pytest\n",
}
TEST = {
    "bare": """
async def test_{n}():
    async def stream():
        for chunk in CHUNKS:
            yield chunk
    text = "".join([chunk.text async for chunk in stream() if isinstance(chunk, TextDelta)])
    assert text.startswith("piece0 ")
""",
    "tape": """
async def test_{n}(tape):
    options = GenerateOptions(model="m", messages=[Message(role="user", content="question {n}")])
    text = "".join([chunk.text async for chunk in tape.stream(options) if isinstance(chunk, TextDelta)])
    assert text.startswith("piece0 ")
""",
    "transport": """
def test_{n}(sdk):
    stream = sdk.chat.completions.create(
        model="m", messages=[{{"role": "user", "content": "question {n}"}}], stream=True)
    text = "".join(part.choices[0].delta.content or "" for part in stream if part.choices)
    assert text.startswith("piece0 ")
""",
    "mock": """
def test_{n}(sdk):
    stream = sdk.chat.completions.create(
        model="m", messages=[{{"role": "user", "content": "question {n}"}}], stream=True)
    text = "".join(part.choices[0].delta.content or "" for part in stream if part.choices)
    assert text.startswith("piece0 ")
""",
    PEER: """
@pytest.mark.vcr
def test_{n}(sdk):
    stream = sdk.chat.completions.create(
        model="m", messages=[{{"role": "user", "content": "question {n}"}}], stream=True)
    text = "".join(part.choices[0].delta.content or "" for part in stream if part.choices)
    assert text.startswith("piece0 ")
""",
}


def _interaction(n: int) -> Interaction:
    options = GenerateOptions(model="m", messages=[Message(role="user", content=f"question {n}")])
    return recorded(options, text_stream([f"piece{i} " for i in range(PIECES)], usage=5), step_ns=1000)


def write_suite(root: Path, suite: str, tests: int) -> Path:
    """A suite folder of ``tests`` tests in ``MODULES`` modules; for the chunktape suites, each test's cassette."""
    folder = root / suite
    folder.mkdir()
    (folder / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    (folder / "conftest.py").write_text(CONFTEST + SHARED.get(suite, ""))
    (folder / "body.sse").write_bytes(render_sse(_interaction(0)))
    per = -(-tests // MODULES)
    for module in range(MODULES):
        numbers = range(module * per, min(tests, (module + 1) * per))
        name = f"test_m{module}"
        (folder / f"{name}.py").write_text(HEAD[suite] + "".join(TEST[suite].format(n=n) for n in numbers))
        if suite in ("tape", "transport"):
            for n in numbers:
                path = folder / "cassettes" / name / f"test_{n}.msgpack"
                save_cassette(Cassette(interactions=[_interaction(n)]), path)
    return folder


def run_suite(folder: Path, env: dict[str, str], *args: str) -> tuple[float, float, int]:
    """Runs one suite in its own pytest process: its test seconds (setup + call + teardown), wall seconds, tests."""
    out = folder / "times.json"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", *args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, env={**env, OUT_ENV: str(out)}, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the {folder.name} suite failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    figures = json.loads(out.read_text())
    # Each suite sees its own plugins only: pytest-recording where it replays, neither peer in ours (both peers
    # register --record-mode; cassetter's is never on a suite's path).
    peers = {peer.plugin for peer in _peers.PIP_PEERS} & set(figures["plugins"])
    expected = {_peers.PYTEST_RECORDING.plugin} if folder.name == PEER else set()
    if peers != expected:
        raise RuntimeError(f"the {folder.name} suite loaded the peer plugins {sorted(peers)}, not {sorted(expected)}")
    return figures["seconds"], wall, figures["tests"]


def measure(quick: bool = False) -> tuple[dict[str, dict[str, float]], str | None]:
    """Per suite: ms per test and wall seconds (medians of the rounds); and why the peer is missing, if it is."""
    tests, rounds = (8, 1) if quick else (TESTS, 3)
    missing = _peers.ensure(_peers.PYTEST_RECORDING, install=not quick)
    base = _peers.env(None)
    suites = [name for name in SUITES if name != PEER or missing is None]
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in suites}
    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        folders = {name: write_suite(root, name, tests) for name in suites}
        peer_env = _peers.env(_peers.PYTEST_RECORDING)
        if missing is None:
            source = Cassette(interactions=[_interaction(n) for n in range(tests)])
            with ReplayServer(source, allow_repeats=True) as server:
                peer_env[URL_ENV] = server.url
                run_suite(folders[PEER], peer_env, "--record-mode=once")
        for _ in range(rounds):
            for name in suites:
                env, mode = (peer_env, "--record-mode=none") if name == PEER else (base, "--tape-mode=none")
                seconds, wall, count = run_suite(folders[name], env, mode)
                if count != tests:
                    raise RuntimeError(f"the {name} suite ran {count} tests, not {tests}")
                runs[name].append((seconds / tests * 1e3, wall))
    figures = {
        name: {
            "ms per test": statistics.median(ms for ms, _ in values),
            "wall s": statistics.median(wall for _, wall in values),
        }
        for name, values in runs.items()
    }
    return figures, missing


NAMES = {
    "tape": ("per test in a 200-test suite: tape fixture vs pytest-recording + openai SDK", 5.0),
    "transport": ("per test in a 200-test suite: openai SDK on tape.transport() vs pytest-recording", 1.5),
}


def main(quick: bool = False) -> list[Row]:
    figures, missing = measure(quick)
    rows = []
    for name, (title, target) in NAMES.items():
        ours = figures[name]
        detail = f"{ours['ms per test']:.2f} ms per test (suite wall {ours['wall s']:.2f} s)"
        floors = {
            "tape": ("a bare async test, no fixture", "bare"),
            "transport": ("the SDK on a MockTransport", "mock"),
        }
        floor = f"; {floors[name][0]}: {figures[floors[name][1]]['ms per test']:.2f} ms"
        if missing is not None:
            rows.append(Row(title, "peer unavailable", f">= {target:g}x", None, f"{detail}{floor}; {missing}"))
            continue
        peer = figures[PEER]
        ratio = peer["ms per test"] / ours["ms per test"]
        detail += f" vs {peer['ms per test']:.2f} ms (wall {peer['wall s']:.2f} s){floor}"
        rows.append(Row(title, f"{ratio:.2f}x", f">= {target:g}x", ratio >= target, detail))
    return rows


if __name__ == "__main__":
    print_table(main(quick="--quick" in sys.argv))
