"""The Node SDKs against ``chunktape serve``, as an agent in another language uses it: openai-node and Anthropic's
TypeScript SDK (pinned, installed by ``make test`` into ``.node-clients/``) record an agent with one tool against a
scripted provider, replay it under the default match, and meet faults the way they meet a provider's: a 429 or a
529 retried by the SDK, a stall before the first byte that fires the SDK's own timeout, whose retry gets the
answer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from chunktape import load_cassette
from helpers import serving

pytestmark = pytest.mark.xdist_group("node-clients")  # one worker installs and records for all of them

ROOT = Path(__file__).resolve().parent.parent
NODE = Path(__file__).resolve().parent / "node"
CLIENTS = Path(os.environ.get("NODE_CLIENTS", ROOT / ".node-clients"))
INSTALL = ROOT / "scripts" / "install_node_clients.sh"
TURNS = """
[[turns]]
when = "weather"
text = "Let me check."
tool_calls = [{ name = "get_weather", arguments = { city = "Paris" } }]

[[turns]]
text = "It is sunny in Paris."
"""


@pytest.fixture(scope="module")
def node_modules() -> Path:
    """The pinned Node SDKs; installed now (as ``make test`` does) if missing and npm is there, else a skip."""
    modules = CLIENTS / "node_modules"
    if not (modules / "openai").is_dir() or not (modules / "@anthropic-ai" / "sdk").is_dir():
        said = subprocess.run(["sh", str(INSTALL)], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
        if not (modules / "openai").is_dir():
            pytest.skip(f"the Node SDKs cannot be installed here: {said.stdout.strip() or said.stderr.strip()}")
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed here")
    return modules


def agent(node_modules: Path, script: str, base: str, *, retries: int = 0, timeout_ms: int = 20_000) -> dict[str, Any]:
    """What the Node agent ``script`` printed: its answer, or the SDK's error."""
    env = {
        **os.environ,
        "NODE_PATH": str(node_modules),
        "BASE": base,
        "RETRIES": str(retries),
        "TIMEOUT_MS": str(timeout_ms),
    }
    done = subprocess.run(
        ["node", str(NODE / script)], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


OPENAI = pytest.param("openai_agent.cjs", "/v1", id="openai-node")
ANTHROPIC = pytest.param("anthropic_agent.cjs", "", id="anthropic-node")


@pytest.fixture(scope="module")
def recorded(node_modules: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each SDK's agent recorded against the scripted provider: ``serve --script turns.toml --record``."""
    folder = tmp_path_factory.mktemp("node")
    script = folder / "turns.toml"
    script.write_text(TURNS, encoding="utf-8")
    cassettes: dict[str, Path] = {}
    for name, route in (("openai_agent.cjs", "/v1"), ("anthropic_agent.cjs", "")):
        cassette = folder / f"{name}.msgpack"
        with serving("--script", script, "--record", cassette) as served:
            assert agent(node_modules, name, served.url + route)["answer"] == "It is sunny in Paris."
        cassettes[name] = cassette
    return cassettes


@pytest.mark.parametrize(("script", "route"), [OPENAI, ANTHROPIC])
def test_a_node_agent_records_and_replays_through_serve(
    node_modules: Path, recorded: dict[str, Path], script: str, route: str
) -> None:
    interactions = load_cassette(recorded[script]).interactions
    assert len(interactions) == 2
    assert [m.role for m in interactions[1].request.messages][-2:] == ["assistant", "tool"]
    with serving(recorded[script]) as served:
        result = agent(node_modules, script, served.url + route)
    assert result["answer"] == "It is sunny in Paris.", result
    assert result["turns"] == 2


@pytest.mark.parametrize(
    ("script", "route", "fault"),
    [
        pytest.param("openai_agent.cjs", "/v1", "http-429", id="openai-node-429"),
        pytest.param("anthropic_agent.cjs", "", "http-529", id="anthropic-node-529"),
    ],
)
def test_the_sdks_own_retry_gets_past_an_http_error(
    node_modules: Path, recorded: dict[str, Path], script: str, route: str, fault: str
) -> None:
    with serving(recorded[script], "--fault", fault) as served:
        failed = agent(node_modules, script, served.url + route, retries=0)
    assert "error" in failed, failed
    with serving(recorded[script], "--fault", fault) as served:
        result = agent(node_modules, script, served.url + route, retries=2)
    assert result["answer"] == "It is sunny in Paris.", result


STALL_BEFORE_THE_FIRST_BYTE = json.dumps({"type": "stall", "after_chunks": 0, "seconds": 30})
"""The Node SDKs' ``timeout`` covers the wait for the response (a stall after the first chunk they wait out, as they
would a provider's): the stall that fires it holds back the headers."""


@pytest.mark.parametrize(("script", "route"), [OPENAI, ANTHROPIC])
def test_a_stall_fires_the_sdks_timeout_and_its_retry_gets_the_answer(
    node_modules: Path, recorded: dict[str, Path], script: str, route: str
) -> None:
    with serving(recorded[script], "--fault", STALL_BEFORE_THE_FIRST_BYTE) as served:
        failed = agent(node_modules, script, served.url + route, retries=0, timeout_ms=1500)
        assert failed.get("error") == "APIConnectionTimeoutError", failed
    with serving(recorded[script], "--fault", STALL_BEFORE_THE_FIRST_BYTE) as served:
        result = agent(node_modules, script, served.url + route, retries=2, timeout_ms=1500)
    assert result["answer"] == "It is sunny in Paris.", result
