"""Scenario files: TOML and JSON, expansion over the catalogue, and errors naming the scenario and field."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

import chunktape.http._server.scenarios as scenarios_module
from chunktape._errors import ErrorCode, LlmError
from chunktape._replayer.timing import Timing
from chunktape.faults import STANDARD_FAULTS, Disconnect, FailFirst, HttpError, Stall
from chunktape.faults._plan import FaultPlan
from chunktape.http._server.scenarios import Scenario, load_scenarios, parse_scenarios
from fault_support import first_request

TOML = """
[[scenarios]]
name = "rate-limited-twice"
cassette = "cassettes/agent.msgpack"
description = "two 429s, then the answer"
faults = [{ type = "fail-first", n = 2, fault = { type = "http-error", status = 429, retry_after = 1.5 } }]

[[scenarios]]
name = "slow-and-broken"
cassette = "/abs/agent.json"
timing = { mode = "recorded", speed = 2.0 }
faults = ["stall-30s", { type = "disconnect", after_chunks = 3 }]

[[scenarios]]
name = "matrix"
cassette = "cassettes/agent.msgpack"
each = "standard"
"""

DOCUMENT = {
    "scenarios": [
        {
            "name": "rate-limited-twice",
            "cassette": "cassettes/agent.msgpack",
            "description": "two 429s, then the answer",
            "faults": [
                {"type": "fail-first", "n": 2, "fault": {"type": "http-error", "status": 429, "retry_after": 1.5}}
            ],
        },
        {
            "name": "slow-and-broken",
            "cassette": "/abs/agent.json",
            "timing": {"mode": "recorded", "speed": 2.0},
            "faults": ["stall-30s", {"type": "disconnect", "after_chunks": 3}],
        },
        {"name": "matrix", "cassette": "cassettes/agent.msgpack", "each": "standard"},
    ]
}


def _check(scenarios: list[Scenario], folder: Path) -> None:
    first, second = scenarios[0], scenarios[1]
    assert first == Scenario(
        name="rate-limited-twice",
        cassette=str(folder / "cassettes/agent.msgpack"),
        faults=(FailFirst(n=2, fault=HttpError(status=429, retry_after=1.5)),),
        description="two 429s, then the answer",
    )
    assert second.cassette == "/abs/agent.json"
    assert second.timing == Timing(kind="recorded", speed=2.0)
    assert second.faults == (STANDARD_FAULTS["stall-30s"], Disconnect(after_chunks=3))
    matrix = scenarios[2:]
    assert [scenario.name for scenario in matrix] == [f"matrix[{name}]" for name in STANDARD_FAULTS]
    assert [scenario.faults for scenario in matrix] == [(fault,) for fault in STANDARD_FAULTS.values()]


def test_public_names_are_sorted() -> None:
    assert scenarios_module.__all__ == sorted(scenarios_module.__all__)


def test_load_toml(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.toml"
    path.write_text(TOML)
    _check(load_scenarios(path), tmp_path)


def test_load_json(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.json"
    path.write_text(json.dumps(DOCUMENT))
    _check(load_scenarios(str(path)), tmp_path)


def test_toml_and_json_agree(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(TOML)
    (tmp_path / "a.json").write_text(json.dumps(DOCUMENT))
    assert load_scenarios(tmp_path / "a.toml") == load_scenarios(tmp_path / "a.json")


def test_loaded_faults_drive_a_fault_plan(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps(DOCUMENT))
    scenario = load_scenarios(tmp_path / "s.json")[0]
    plan = FaultPlan(scenario.faults)
    picks = []
    for _ in range(3):
        active = plan.select(first_request())
        picks.append(None if active is None else active.fault_id)
    assert picks == ["http-429", "http-429", None]


def test_scenarios_encode_back_to_json() -> None:
    scenarios = parse_scenarios(DOCUMENT)
    encoded = msgspec.json.decode(msgspec.json.encode({"scenarios": scenarios[:2]}))
    assert parse_scenarios(encoded) == scenarios[:2]


def test_each_with_an_explicit_list_adds_to_the_shared_faults() -> None:
    scenarios = parse_scenarios(
        {
            "scenarios": [
                {
                    "name": "slow",
                    "cassette": "c.msgpack",
                    "faults": [{"type": "latency", "between_s": 0.1}],
                    "each": ["http-503", {"type": "stall", "after_chunks": 2, "seconds": 5}],
                }
            ]
        }
    )
    assert [scenario.name for scenario in scenarios] == ["slow[http-503]", "slow[stall-5s-after-2-chunks]"]
    assert scenarios[1].faults[1] == Stall(after_chunks=2, seconds=5)
    assert len(scenarios[0].faults) == 2


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (
            {"scenarios": [{"name": "a", "cassette": "c", "fautls": []}]},
            "scenario 'a' (#1): Object contains unknown field `fautls`",
        ),
        ({"scenarios": [{"cassette": "c"}]}, "scenario #1: Object missing required field `name`"),
        ({"scenarios": [{"name": "a"}]}, "scenario 'a' (#1): Object missing required field `cassette`"),
        (
            {
                "scenarios": [
                    {"name": "ok", "cassette": "c"},
                    {
                        "name": "b",
                        "cassette": "c",
                        "faults": ["http-429", {"type": "stall", "after_chunks": -1, "seconds": 1}],
                    },
                ]
            },
            "scenario 'b' (#2): field `faults[1]`: Expected `int` >= 0 - at `$.after_chunks`",
        ),
        (
            {"scenarios": [{"name": "a", "cassette": "c", "faults": ["http-999"]}]},
            "scenario 'a' (#1): field `faults[0]`: unknown standard fault 'http-999'; valid ids: http-429",
        ),
        (
            {"scenarios": [{"name": "a", "cassette": "c", "faults": [{"type": "explode"}]}]},
            "field `faults[0]`: Invalid value 'explode' - at `$.type` (valid fault types:",
        ),
        (
            {"scenarios": [{"name": "a", "cassette": "c", "faults": [{"type": "http-error", "status": 42}]}]},
            "field `faults[0]`: Expected `int` >= 100 - at `$.status`",
        ),
        (
            {"scenarios": [{"name": "a", "cassette": "c", "faults": [{"type": "chaos", "rate": 1.5, "faults": []}]}]},
            "at `$.rate`",
        ),
        (
            {"scenarios": [{"name": "a", "cassette": "c", "faults": [{"type": "disconnect"}]}]},
            "scenario 'a' (#1): field `faults[0]`: Disconnect.after_chunks exactly one of",
        ),
        (
            {"scenarios": [{"name": "a", "cassette": "c", "timing": {"mode": "warp"}}]},
            "scenario 'a' (#1): Invalid enum value 'warp' - at `$.timing.mode`",
        ),
        (
            {"scenarios": [{"name": "a", "cassette": "c", "each": []}]},
            "scenario 'a' (#1): field `each` lists no faults",
        ),
        (
            {"scenarios": [{"name": "a", "cassette": "c"}, {"name": "a", "cassette": "d"}]},
            "scenario 'a' (#2): field `name`: duplicate scenario name 'a'",
        ),
        ({"scenarios": []}, "defines no scenarios"),
        ({"version": 99, "scenarios": [{"name": "a", "cassette": "c"}]}, "version 99 is newer"),
        ({"scenario": []}, "unknown field `scenario`"),
        ([1, 2], "expected a table with a 'scenarios' list"),
    ],
)
def test_errors_name_the_scenario_and_the_field(document: object, expected: str) -> None:
    with pytest.raises(LlmError) as caught:
        parse_scenarios(document)
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert expected in str(caught.value)


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(LlmError, match=r"end in \.toml or \.json"):
        load_scenarios(tmp_path / "s.yaml")
    with pytest.raises(LlmError, match="cannot read the scenario file"):
        load_scenarios(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[[scenarios]\nname = ")
    with pytest.raises(LlmError, match="not valid TOML") as caught:
        load_scenarios(broken)
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"scenarios": [{"name": "x", "cassette": "c", "faults": [{"type": "truncate"}]}]}))
    with pytest.raises(LlmError, match=r"bad\.json: scenario 'x' \(#1\): field `faults\[0\]`"):
        load_scenarios(bad)
