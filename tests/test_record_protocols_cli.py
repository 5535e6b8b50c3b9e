"""``chunktape record --protocol anthropic|responses|chat`` (or the protocol the base URL says) records a live
session against each protocol's API: here the loopback stand-in provider, answering in that protocol."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from chunktape import ReasoningBlock, TextBlock, load_cassette, validate
from chunktape._protocol import BlockEnd
from chunktape.cli import app
from chunktape.cli._record import _protocol
from fake_provider import FakeProvider, FakeResponse
from protocol_streams import messages_stream, responses_stream

KEY = "sk-clitest-0123456789abcdefghijklmnop"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("CLI_PROTOCOL_KEY", KEY)
    return CliRunner()


@pytest.mark.parametrize(
    ("protocol", "body", "route", "base"),
    [
        ("anthropic", messages_stream, "/v1/messages", ""),
        ("responses", responses_stream, "/v1/responses", "/v1"),
    ],
)
def test_record_a_prompt_on_each_protocol(
    protocol: str, body: object, route: str, base: str, runner: CliRunner, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(FakeResponse(body=body()))  # type: ignore[operator]
    out = tmp_path / f"{protocol}.json"
    args = ["record", "--protocol", protocol, "--base-url", fake_provider.url + base, "--api-key-env"]
    args += ["CLI_PROTOCOL_KEY", "-m", "model-x", "-p", "Weather in Paris?", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Checking Paris." in result.stdout
    seen = fake_provider.requests[0]
    assert seen.path == route
    if protocol == "anthropic":
        assert seen.headers["x-api-key"] == KEY
        assert seen.headers["anthropic-version"] == "2023-06-01"
        assert seen.json["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    else:
        assert seen.headers["authorization"] == f"Bearer {KEY}"
        assert seen.json["input"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert KEY not in out.read_text()
    (interaction,) = load_cassette(out).interactions
    validate(interaction.chunks)
    blocks = [chunk.block for chunk in interaction.chunks if type(chunk) is BlockEnd]
    assert [type(block) for block in blocks][:2] == [ReasoningBlock, TextBlock]
    assert json.loads(blocks[-1].arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert load_cassette(out).meta.adapter == ("anthropic" if protocol == "anthropic" else "openai-responses")


@pytest.mark.parametrize(
    ("given", "base_url", "chosen"),
    [
        (None, None, "chat"),
        (None, "https://api.deepseek.com", "chat"),
        (None, "https://api.anthropic.com", "anthropic"),
        (None, "https://proxy.test/v1/messages", "anthropic"),
        (None, "https://api.openai.com/v1/responses", "responses"),
        ("responses", "https://api.openai.com/v1", "responses"),
        ("chat", "https://api.anthropic.com", "chat"),
    ],
)
def test_the_protocol_is_given_or_inferred_from_the_base_url(
    given: str | None, base_url: str | None, chosen: str
) -> None:
    assert _protocol(given, base_url) == chosen


def test_an_unknown_protocol_is_a_usage_error_listing_the_valid_ones(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["record", "--protocol", "grpc", "-p", "x", "-o", str(tmp_path / "x.json")])
    assert result.exit_code == 2
    assert "chat, anthropic, responses" in result.stderr
