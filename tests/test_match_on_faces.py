"""``match_on`` in every face: a scenario file's ``match_on`` (validated, reaching its route's replay options, in
``chunktape scenarios schema|check``), the plugin's ``tape_match_on`` ini (marker > ini > default), beside the
marker and ``serve --match-on`` that had it already."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import httpx2
import pytest
from typer.testing import CliRunner

from chunktape import ErrorCode, LlmError, Timing, save_cassette
from chunktape.cli._app import app
from chunktape.http import ReplayServer
from chunktape.http._server.scenarios import load_scenarios, scenario_schema
from helpers import cassette_of, interaction_of, run_pytest, text_stream


def _cassette(path: Path) -> Path:
    """One interaction: model ``m``, the user says ``hi``, the answer is ``x``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_cassette(cassette_of(interaction_of(text_stream("x"), content="hi", model="m")), path)
    return path


def _scenarios(tmp_path: Path, **match_on: str | list[str]) -> Path:
    """One scenario per keyword (its name) with that ``match_on``, and ``strict`` without one."""
    _cassette(tmp_path / "agent.msgpack")
    entries: list[dict[str, object]] = [{"name": "strict", "cassette": "agent.msgpack"}]
    entries += [{"name": name, "cassette": "agent.msgpack", "match_on": value} for name, value in match_on.items()]
    path = tmp_path / "scenarios.json"
    path.write_text(json.dumps({"scenarios": entries}))
    return path


def test_a_scenarios_match_on_reaches_its_route(tmp_path: Path) -> None:
    path = _scenarios(tmp_path, loose="model", listed=["model", "tools"])
    assert [scenario.match_on for scenario in load_scenarios(path)] == [None, ("model",), ("model", "tools")]
    other = {"model": "m", "messages": [{"role": "user", "content": "something else"}], "stream": False}
    with (
        ReplayServer(scenarios=path, timing=Timing.instant()) as server,
        httpx2.Client() as client,
    ):
        assert server.scenarios["loose"].replay_options.match_on == ("model",)
        assert server.scenarios["strict"].replay_options.match_on == server.replay_options.match_on
        loose = client.post(f"{server.url}/scenarios/loose/v1/chat/completions", json=other)
        assert loose.status_code == 200
        assert loose.json()["choices"][0]["message"]["content"] == "x"
        strict = client.post(f"{server.url}/scenarios/strict/v1/chat/completions", json=other)
        assert strict.headers["x-chunktape-error"] == "CASSETTE_MISMATCH"


def test_a_bad_match_on_in_a_scenario_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    path = _scenarios(tmp_path, bad="model,nonsense")
    with pytest.raises(LlmError) as refused:
        load_scenarios(path)
    assert refused.value.code is ErrorCode.INVALID_CONFIG
    assert "scenario 'bad' (#2): field `match_on`: unknown matcher 'nonsense'" in refused.value.message
    result = CliRunner().invoke(app, ["scenarios", "check", str(path)])
    assert result.exit_code == 1
    assert "field `match_on`: unknown matcher 'nonsense'; valid matchers:" in result.output


def test_the_schema_documents_match_on() -> None:
    entry = scenario_schema()["$defs"]["ScenarioEntry"]["properties"]["match_on"]
    assert "model" in json.dumps(entry)
    assert "messages" in json.dumps(entry)


INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = error
addopts = -p no:cacheprovider -p no:hypothesispytest
{extra}
"""

TESTS = """
import pytest

from chunktape import GenerateOptions, Message

OTHER = GenerateOptions(model="m", messages=[Message(role="user", content="something else")])


async def test_ini(tape):
    assert [chunk async for chunk in tape.stream(OTHER)]


@pytest.mark.tape(name="test_ini", match_on="model,messages")
async def test_marker_wins(tape):
    assert [chunk async for chunk in tape.stream(OTHER)]
"""


def _project(pytester: pytest.Pytester, extra: str) -> None:
    pytester.makefile(".ini", pytest=INI.format(extra=extra))
    pytester.makepyfile(test_faces=textwrap.dedent(TESTS))
    _cassette(pytester.path / "cassettes" / "test_faces" / "test_ini.msgpack")


def test_the_ini_sets_match_on_and_the_marker_wins(pytester: pytest.Pytester) -> None:
    _project(pytester, "tape_match_on = model")
    result = run_pytest(pytester, "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_ini PASSED*", "*test_marker_wins FAILED*", "*CASSETTE_MISMATCH*"])


def test_without_the_ini_the_default_matchers_apply(pytester: pytest.Pytester) -> None:
    _project(pytester, "")
    run_pytest(pytester).assert_outcomes(failed=2)


def test_a_bad_ini_match_on_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester, "tape_match_on = model, nonsense")
    result = run_pytest(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*tape_match_on*unknown matcher 'nonsense'*"])
