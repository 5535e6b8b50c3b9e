"""``chunktape record --chat --tools``: every tool call is answered (typed, or by ``--tools-module``) before the
conversation goes on, against a loopback provider that enforces OpenAI's message rules and answers 400 otherwise."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from typer.testing import CliRunner, Result

from chunktape import load_cassette
from chunktape.cli import app
from fake_provider import FakeProvider, FakeResponse, chunk, sse, tool_delta

KEY = "sk-recordtools-0123456789abcdefghijklmnop"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def message_rule_violation(messages: list[dict[str, Any]]) -> str | None:
    """OpenAI's rule: an assistant turn's tool calls are each answered by a tool message, before anything else."""
    pending: list[str] = []
    for position, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return f"messages[{position}]: a tool message must answer a preceding tool call"
            pending.remove(message["tool_call_id"])
            continue
        if pending:
            return (
                f"messages[{position}]: an assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                f"{', '.join(pending)}"
            )
        if role == "assistant":
            pending = [call["id"] for call in message.get("tool_calls") or []]
    return None


class RuleCheckingProvider(FakeProvider):
    """The fake provider, refusing (400, as OpenAI does) a conversation that breaks the tool-message rule."""

    def __init__(self) -> None:
        super().__init__()
        self.rejected: list[str] = []

    async def _handle(self, request: Request) -> Response:
        body = json.loads(await request.body())
        problem = message_rule_violation(body.get("messages", []))
        if problem is None:
            return await super()._handle(request)
        self.rejected.append(problem)
        error = {"message": problem, "type": "invalid_request_error", "param": "messages", "code": None}
        return JSONResponse({"error": error}, status_code=400)


@pytest.fixture(scope="module")
def provider() -> Iterator[RuleCheckingProvider]:
    server = RuleCheckingProvider()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def strict(provider: RuleCheckingProvider) -> RuleCheckingProvider:
    provider.reset()
    provider.rejected.clear()
    return provider


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setenv("RECORD_TOOLS_API_KEY", KEY)
    return CliRunner()


def _tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(TOOLS))
    return path


def _tool_call(call_id: str = "call_paris") -> FakeResponse:
    return FakeResponse(
        body=sse(
            chunk({"role": "assistant", "content": ""}),
            chunk(tool_delta(0, "", id=call_id, name="get_weather")),
            chunk(tool_delta(0, '{"city": ')),
            chunk(tool_delta(0, '"Paris"}')),
            chunk({}, finish_reason="tool_calls"),
        )
    )


def _reply(text: str) -> FakeResponse:
    return FakeResponse(body=sse(chunk({"role": "assistant", "content": text}), chunk({}, finish_reason="stop")))


def _record(runner: CliRunner, provider: FakeProvider, out: Path, *args: str, input: str | None = None) -> Result:
    argv = ["record", "--base-url", provider.url, "--api-key-env", "RECORD_TOOLS_API_KEY", "-o", str(out), *args]
    return runner.invoke(app, argv, input=input)


def test_the_rule_checker_refuses_a_user_message_after_unanswered_tool_calls() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    user = {"role": "user", "content": "hi"}
    assert message_rule_violation([user, assistant, user]) is not None
    assert (
        message_rule_violation([user, assistant, {"role": "tool", "tool_call_id": "c1", "content": "x"}, user]) is None
    )


def test_chat_asks_for_each_tool_result_and_the_provider_accepts_every_request(
    runner: CliRunner, strict: RuleCheckingProvider, tmp_path: Path
) -> None:
    strict.enqueue(_tool_call(), _reply("It is sunny in Paris."), _reply("You are welcome."))
    out = tmp_path / "chat.json"
    typed = "Weather in Paris?\nsunny, 21C\nthanks\n/exit\n"
    result = _record(runner, strict, out, "--chat", "--tools", str(_tools_file(tmp_path)), input=typed)
    assert result.exit_code == 0, result.output
    assert strict.rejected == []
    assert len(strict.requests) == 3
    second = strict.requests[1].json["messages"]
    assert [message["role"] for message in second] == ["user", "assistant", "tool"]
    assert second[2] == {"role": "tool", "tool_call_id": "call_paris", "content": "sunny, 21C"}
    assert [message["role"] for message in strict.requests[2].json["messages"]][-2:] == ["assistant", "user"]
    assert 'get_weather({"city":"Paris"}) result>' in result.output
    cassette = load_cassette(out)
    assert len(cassette.interactions) == 3
    [run] = cassette.tool_runs
    assert (run.name, run.arguments, run.content, run.call_id, run.after_interaction) == (
        "get_weather",
        {"city": "Paris"},
        "sunny, 21C",
        "call_paris",
        0,
    )
    played = runner.invoke(app, ["play", str(out), "--instant"])
    assert played.exit_code == 0, played.output
    assert "-> get_weather: sunny, 21C" in played.output


def test_end_of_input_at_a_tool_prompt_sends_nothing_more(
    runner: CliRunner, strict: RuleCheckingProvider, tmp_path: Path
) -> None:
    strict.enqueue(_tool_call())
    out = tmp_path / "chat.json"
    result = _record(runner, strict, out, "--chat", "--tools", str(_tools_file(tmp_path)), input="Weather?\n")
    assert result.exit_code == 0, result.output
    assert len(strict.requests) == 1
    cassette = load_cassette(out)
    assert len(cassette.interactions) == 1
    assert cassette.tool_runs == []


def test_tools_module_computes_the_results(
    runner: CliRunner, strict: RuleCheckingProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"weather_tools_{uuid.uuid4().hex}"
    (tmp_path / f"{module}.py").write_text(
        "def get_weather(city):\n    return {'city': city, 'sky': 'sunny'}\n\nTOOLS = {'get_weather': get_weather}\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI puts the cwd on it; undo that afterwards
    strict.enqueue(_tool_call(), _reply("Sunny."))
    out = tmp_path / "prompt.json"
    tools = str(_tools_file(tmp_path))
    result = _record(
        runner, strict, out, "-p", "Weather in Paris?", "--tools", tools, "--tools-module", f"{module}:TOOLS"
    )
    assert result.exit_code == 0, result.output
    assert strict.rejected == []
    assert strict.requests[1].json["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_paris",
        "content": '{"city":"Paris","sky":"sunny"}',
    }
    [run] = load_cassette(out).tool_runs
    assert run.result == {"city": "Paris", "sky": "sunny"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tools-module", "x:TOOLS"], "--tools-module needs --tools FILE"),
        (["--tools", "TOOLS_FILE", "--tools-module", "no_colon"], "expected pkg.module:NAME"),
        (["--tools", "TOOLS_FILE", "--tools-module", "json:dumps"], "must be a mapping of tool names to callables"),
        (["--tools", "TOOLS_FILE", "--tools-module", "no_such_module_xyz:T"], "cannot import no_such_module_xyz"),
    ],
)
def test_a_bad_tools_module_is_one_line_and_a_non_zero_exit(
    runner: CliRunner, strict: RuleCheckingProvider, tmp_path: Path, args: list[str], message: str
) -> None:
    args = [str(_tools_file(tmp_path)) if arg == "TOOLS_FILE" else arg for arg in args]
    result = _record(runner, strict, tmp_path / "x.json", "-p", "hi", *args)
    assert result.exit_code != 0
    (line,) = result.stderr.strip().splitlines()
    assert message in line
    assert strict.requests == []
