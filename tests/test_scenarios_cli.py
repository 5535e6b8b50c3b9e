"""``chunktape scenarios``: the JSON Schema of scenario files, and ``check`` with one line per problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import msgspec
import pytest
from typer.testing import CliRunner

from chunktape.cli._app import app
from chunktape.faults import STANDARD_FAULTS, Fault
from chunktape.http._server.scenarios import ScenarioFile, load_scenarios

DEMO = Path(__file__).resolve().parent.parent / "cassettes" / "demo-session.msgpack"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


def test_schema_names_every_fault_type_and_field(runner: CliRunner) -> None:
    result = runner.invoke(app, ["scenarios", "schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    defs = schema["$defs"]
    assert defs["ScenarioEntry"]["required"] == ["name", "cassette"]
    fields = {"name", "cassette", "faults", "each", "timing", "description", "match_on"}
    assert set(defs["ScenarioEntry"]["properties"]) == fields
    tags = {
        definition["properties"]["type"]["enum"][0]
        for definition in defs.values()
        if "type" in definition.get("properties", {})
    }
    expected = {cls.__struct_config__.tag for cls in get_args(Fault)}
    assert expected <= tags
    assert set(defs["HttpError"]["properties"]) == {"type", "id", "status", "retry_after", "message"}
    assert "http-429" in json.dumps(defs["ScenarioEntry"])  # the catalogue ids are listed


def test_check_prints_one_line_per_problem_and_exits_1(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "scenarios.toml"
    path.write_text(
        f"""
[[scenarios]]
name = "bad-status"
cassette = "{DEMO}"
faults = [{{ type = "http-error", status = 99 }}]

[[scenarios]]
name = "a/b"
cassette = "{DEMO}"

[[scenarios]]
name = "missing"
cassette = "nowhere.msgpack"

[[scenarios]]
name = "missing-matrix"
cassette = "nowhere.msgpack"
each = "standard"

[[scenarios]]
name = "also-missing"
cassette = "elsewhere.msgpack"

[[scenarios]]
name = "fine"
cassette = "{DEMO}"
each = "standard"
"""
    )
    result = runner.invoke(app, ["scenarios", "check", str(path)])
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 4, result.stdout  # one line per missing cassette, however many scenarios replay it
    assert "'bad-status' (#1): field `faults[0]`" in lines[0]
    assert "'a/b' (#2): field `name`" in lines[1]
    nowhere = tmp_path / "nowhere.msgpack"
    assert lines[2] == (
        f"{path}: cassette {nowhere} does not exist ({len(STANDARD_FAULTS) + 1} scenarios: 'missing', "
        f"'missing-matrix[http-429]', 'missing-matrix[http-500]' and {len(STANDARD_FAULTS) - 2} more); record it with "
        f"`chunktape proxy --upstream URL -o {nowhere}` (your agent through a recording proxy) or "
        f"`chunktape record -o {nowhere}`"
    )
    assert f"cassette {tmp_path / 'elsewhere.msgpack'} does not exist (scenario: 'also-missing')" in lines[3]


def test_check_passes_a_valid_file_and_it_decodes_against_the_schema(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "scenarios.json"
    document = {
        "scenarios": [
            {
                "name": "flaky",
                "cassette": str(DEMO),
                "faults": ["http-429", {"type": "always", "fault": {"type": "http-error", "status": 503}}],
            }
        ]
    }
    path.write_text(json.dumps(document))
    result = runner.invoke(app, ["scenarios", "check", str(path)])
    assert result.exit_code == 0, result.output
    assert "1 scenario(s), all valid" in result.stdout
    assert [scenario.name for scenario in load_scenarios(path)] == ["flaky"]
    msgspec.convert(document, ScenarioFile)  # the schema's types accept what the loader accepts


def test_the_docs_document_every_fault_type_and_field() -> None:
    section = (Path(__file__).resolve().parent.parent / "docs" / "scenario-files.md").read_text(encoding="utf-8")
    for cls in get_args(Fault):
        assert f"| `{cls.__struct_config__.tag}` |" in section, cls.__name__
        row = section.split(f"| `{cls.__struct_config__.tag}` |", 1)[1].split("\n", 1)[0]
        for field in cls.__struct_fields__:
            if field != "id":
                assert f"`{field}`" in row, (cls.__name__, field)
    for ident in STANDARD_FAULTS:
        assert f"`{ident}`" in section or ident.startswith("corrupt-"), ident
