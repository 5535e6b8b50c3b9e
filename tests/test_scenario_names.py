"""Scenario names become a URL path segment and a response header: bad ones are refused when the file loads."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from chunktape import ErrorCode, LlmError
from chunktape.http._server.scenarios import Scenario, load_scenarios, parse_scenarios

BAD_NAMES = [
    pytest.param("a/b", "'/'", id="slash"),
    pytest.param("..", "'..'", id="dot-dot"),
    pytest.param("up..down", "'..'", id="dot-dot-inside"),
    pytest.param("a\\b", "'\\'", id="backslash"),
    pytest.param("evil\r\nX-Injected: 1", "'\\r'", id="crlf"),
    pytest.param("tab\there", "'\\t'", id="tab"),
    pytest.param("nul\x00", "'\\x00'", id="nul"),
    pytest.param("line\u2028separator", "'\\u2028'", id="unicode-line-separator"),
]


@pytest.mark.parametrize(("name", "shown"), BAD_NAMES)
def test_a_bad_scenario_name_is_invalid_config_naming_it(tmp_path: Path, name: str, shown: str) -> None:
    path = tmp_path / "scenarios.json"
    path.write_bytes(msgspec.json.encode({"scenarios": [{"name": name, "cassette": "c.msgpack"}]}))
    with pytest.raises(LlmError) as caught:
        load_scenarios(path)
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    message = caught.value.message
    assert str(path) in message
    assert repr(name) in message
    assert "field `name`" in message
    assert shown in message


def test_a_bad_name_in_toml_is_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "scenarios.toml"
    path.write_text('[[scenarios]]\nname = "../../etc"\ncassette = "c.msgpack"\n', encoding="utf-8")
    with pytest.raises(LlmError, match=r"scenario '\.\./\.\./etc' \(#1\): field `name`") as caught:
        load_scenarios(path)
    assert caught.value.code is ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize("name", ["测试", "rate-limited twice", "matrix[http-429]", "v1.2", "ünïcødé-😀"])
def test_printable_names_of_any_script_are_accepted(name: str) -> None:
    (scenario,) = parse_scenarios({"scenarios": [{"name": name, "cassette": "c.msgpack"}]})
    assert scenario.name == name


def test_a_scenario_built_in_code_is_checked_the_same_way() -> None:
    with pytest.raises(LlmError, match="field `name`") as caught:
        Scenario(name="x\ny", cassette="c.msgpack")
    assert caught.value.code is ErrorCode.INVALID_CONFIG
