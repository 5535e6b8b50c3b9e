"""The ``chunktape`` command line: every command through ``CliRunner``, the main ones as real processes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import msgspec
import pytest
import yaml
from typer.testing import CliRunner, Result

from chunktape import (
    Cancelled,
    Cassette,
    Completed,
    Event,
    FinishReason,
    Interaction,
    RecordingAdapter,
    load_cassette,
    save_cassette,
)
from chunktape._protocol import Finish
from chunktape._report.analysis import check_cassette, diff_cassettes
from chunktape.cli import app
from chunktape.faults import STANDARD_FAULTS
from chunktape.providers import ScriptedAdapter, ScriptedTurn
from chunktape.wire._openai_chat import options_to_openai_request
from fake_provider import FakeProvider, FakeResponse, chunk, deepseek_reasoning_then_text, sse
from helpers import interaction_of, interrupt, options, text_stream

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "cassettes"
DEMO = EXAMPLES / "demo-session.msgpack"
DUMMY_KEY = "sk-clitest-0123456789abcdefghijklmnop"
COMMANDS = [
    "record",
    "play",
    "show",
    "check",
    "convert",
    "diff",
    "report",
    "redact",
    "recover",
    "import-vcr",
    "serve",
    "demo",
]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("CHUNKTAPE_DEBUG", raising=False)
    return CliRunner()


def run(runner: CliRunner, *args: str | os.PathLike[str], input: str | None = None) -> Result:
    return runner.invoke(app, [str(arg) for arg in args], input=input)


def one_error_line(result: Result) -> str:
    """The error output is exactly one line, starting with ``chunktape: error:``, and no traceback."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("chunktape: error: ")
    assert "Traceback" not in result.output
    return lines[0]


def write(path: Path, *interactions: Interaction) -> Path:
    save_cassette(Cassette(interactions=list(interactions)), path)
    return path


# -- help and errors -------------------------------------------------------------------------------


def test_help_lists_every_command_and_the_exit_codes(runner: CliRunner) -> None:
    result = run(runner, "--help")
    assert result.exit_code == 0
    for command in COMMANDS:
        assert command in result.stdout
    assert "Exit codes" in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(runner: CliRunner, command: str) -> None:
    result = run(runner, command, "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split()).replace("│", "").replace("  ", " ")
    assert "Example: chunktape " + command in text
    assert text.index("Example: chunktape") > text.index("--help"), "the example comes last, after the options"
    assert "<bool>" not in text  # a flag is shown as a flag, never as an option taking a bool


def test_the_top_level_help_ends_with_an_example(runner: CliRunner) -> None:
    text = " ".join(run(runner, "--help").stdout.split())
    assert "--debug" in text
    assert "<bool>" not in text
    assert text.endswith("Example: chunktape demo --out . && chunktape show --timeline demo-session.msgpack")


def test_usage_errors_are_one_line_and_exit_2(runner: CliRunner) -> None:
    result = run(runner, "show")
    assert result.exit_code == 2
    assert "Missing argument" in one_error_line(result)
    result = run(runner, "play", DEMO, "--bogus")
    assert result.exit_code == 2
    assert "--bogus" in one_error_line(result)


@pytest.mark.parametrize("command", ["show", "play", "convert", "diff", "redact"])
def test_a_missing_file_is_one_line_and_exit_3(runner: CliRunner, tmp_path: Path, command: str) -> None:
    missing = tmp_path / "nope.msgpack"
    extra = [tmp_path / "out.json"] if command in ("convert", "diff") else []
    result = run(runner, command, missing, *extra)
    assert result.exit_code == 3
    line = one_error_line(result)
    assert "CASSETTE_NOT_FOUND" in line
    assert str(missing) in line


def test_not_a_cassette_is_one_line_and_exit_3(runner: CliRunner, tmp_path: Path) -> None:
    bogus = tmp_path / "notes.msgpack"
    bogus.write_text("just some text\n")
    result = run(runner, "show", bogus)
    assert result.exit_code == 3
    assert "CASSETTE_CORRUPT" in one_error_line(result)


def test_error_hints_name_the_next_cli_step(runner: CliRunner, tmp_path: Path) -> None:
    missing = run(runner, "show", tmp_path / "missing.msgpack")
    assert "; check the path; `chunktape record -o FILE` records a new cassette" in one_error_line(missing)
    journal = run(runner, "recover", tmp_path / "missing.msgpack.journal")
    assert "a recording that ended normally leaves no journal" in one_error_line(journal)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("a: [\n")
    vcr = run(runner, "import-vcr", bad_yaml, "-o", tmp_path / "out.msgpack")
    assert vcr.exit_code == 3
    assert "give a vcrpy YAML cassette of chat-completions traffic" in one_error_line(vcr)
    corrupt = tmp_path / "notes.json"
    corrupt.write_text("{}")
    shown = run(runner, "show", corrupt)
    assert "`chunktape check FILE` says what is wrong" in one_error_line(shown)
    for result in (missing, journal, vcr, shown):
        assert "--tape-mode" not in result.stderr
    assert "recover" not in vcr.stderr


def test_debug_shows_the_traceback(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, "--debug", "show", tmp_path / "nope.msgpack")
    assert result.exit_code == 3
    assert "Traceback" in result.stderr
    assert "chunktape: error: " in result.stderr


def test_version(runner: CliRunner) -> None:
    result = run(runner, "--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("chunktape ")


# -- show, check, convert, diff ----------------------------------------------------------------------


def test_show_prints_a_row_per_interaction(runner: CliRunner) -> None:
    result = run(runner, "show", DEMO)
    assert result.exit_code == 0, result.output
    assert "3 interaction(s)" in result.stdout
    for needle in ("What is in src/?", "completed (tool-calls)", "completed (stop)", "412/38", "0.400s"):
        assert needle in result.stdout


def test_show_json_is_stable_sorted_and_lossless(runner: CliRunner, tmp_path: Path) -> None:
    first = run(runner, "show", "--json", DEMO)
    second = run(runner, "show", "--json", EXAMPLES / "demo-session.json")
    assert first.exit_code == 0
    assert first.stdout == second.stdout  # same content, either encoding: a textconv for diffs
    assert msgspec.json.decode(first.stdout.encode(), type=Cassette) == load_cassette(DEMO)
    keys = list(msgspec.json.decode(first.stdout.encode()))
    assert keys == sorted(keys)


def test_check_passes_the_examples(runner: CliRunner) -> None:
    result = run(runner, "check", EXAMPLES)
    assert result.exit_code == 0, result.output
    assert "6 of 6 cassette file(s) pass" in result.stdout


def test_check_lists_just_the_bad_file_in_a_folder(runner: CliRunner, tmp_path: Path) -> None:
    folder = tmp_path / "tapes"
    (folder / "nested").mkdir(parents=True)
    shutil.copy(DEMO, folder / "good.msgpack")
    shutil.copy(EXAMPLES / "retry-429.json", folder / "nested" / "good.json")
    shutil.copy(EXAMPLES / "cut-mid-tool-call.msgpack", folder / "nested" / "cut.msgpack")
    broken = text_stream("a", "b")
    broken.insert(2, Finish(reason=FinishReason(kind="stop")))  # finish before the block ends
    write(folder / "nested" / "bad.msgpack", interaction_of(text_stream("ok")), interaction_of(broken))
    (folder / "README.txt").write_text("not looked at")
    result = run(runner, "check", folder)
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{folder / 'nested' / 'bad.msgpack'}: interaction #1: block-pairs:")
    assert "3 of 4 cassette file(s) pass; 1 failed" in result.stderr


def test_check_reports_a_file_that_is_not_a_cassette(runner: CliRunner, tmp_path: Path) -> None:
    bogus = tmp_path / "package.json"
    bogus.write_text('{"name": "not a cassette"}')
    result = run(runner, "check", DEMO, bogus)
    assert result.exit_code == 1
    assert result.stdout.strip() == f"{bogus}: file: CASSETTE_CORRUPT: " + check_cassette(bogus)[0].detail


def test_check_of_a_missing_path_is_a_runtime_error(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, "check", tmp_path / "missing")
    assert result.exit_code == 3
    assert "does not exist" in one_error_line(result)


def test_check_still_checks_every_path_that_exists(runner: CliRunner, tmp_path: Path) -> None:
    missing = tmp_path / "missing.msgpack"
    bad = write(tmp_path / "bad.msgpack", interaction_of(list(reversed(text_stream("x")))))
    result = run(runner, "check", DEMO, bad, missing)
    assert result.exit_code == 3
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [str(bad), str(missing)]
    assert f"{missing}: file: CASSETTE_NOT_FOUND" in lines[1]
    line = one_error_line(result)
    assert "1 of 3 cassette file(s) pass; 2 failed" in line
    assert f"{missing} does not exist" in line


def test_check_skips_json_in_folders_that_is_not_a_cassette(runner: CliRunner, tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "retry-429.json", tmp_path / "tape.json")
    (tmp_path / "scenarios.json").write_text('{"scenarios": [{"name": "a"}]}')
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text('{"version": 1, "interactions": [')
    result = run(runner, "check", tmp_path)
    assert result.exit_code == 1
    assert result.stdout.strip().splitlines()[0].startswith(f"{tmp_path / 'broken.json'}: file: CASSETTE_CORRUPT")
    assert f"skipped {tmp_path / 'list.json'}: JSON but not a cassette" in result.stderr
    assert f"skipped {tmp_path / 'scenarios.json'}: JSON but not a cassette" in result.stderr
    assert "1 of 2 cassette file(s) pass; 1 failed" in result.stderr
    (tmp_path / "broken.json").unlink()
    assert run(runner, "check", tmp_path).exit_code == 0
    named = run(runner, "check", tmp_path / "scenarios.json")  # given by name, it is checked
    assert named.exit_code == 1


def test_check_finds_timing_problems(tmp_path: Path) -> None:
    item = interaction_of(text_stream("x"))
    backwards = msgspec.structs.replace(item, events=list(reversed(item.events)))
    problems = check_cassette(write(tmp_path / "t.msgpack", backwards))
    assert "timing" in [problem.rule for problem in problems]


def test_convert_round_trips_losslessly(runner: CliRunner, tmp_path: Path) -> None:
    as_json = tmp_path / "demo.json"
    back = tmp_path / "back.msgpack"
    assert run(runner, "convert", DEMO, as_json).exit_code == 0
    assert run(runner, "convert", as_json, back).exit_code == 0
    assert load_cassette(as_json) == load_cassette(DEMO)
    assert back.read_bytes() == DEMO.read_bytes()


@pytest.mark.parametrize("name", ["out.yaml", "out", "out.msgpack.bak"])
def test_convert_refuses_an_unknown_suffix(runner: CliRunner, tmp_path: Path, name: str) -> None:
    result = run(runner, "convert", DEMO, tmp_path / name)
    assert result.exit_code == 2
    assert "give a .msgpack or .json file name" in one_error_line(result)
    assert not (tmp_path / name).exists()


def test_diff_of_equal_cassettes_exits_0(runner: CliRunner) -> None:
    result = run(runner, "diff", DEMO, EXAMPLES / "demo-session.json")
    assert result.exit_code == 0
    assert "same content and timing" in result.stdout


def test_diff_shows_request_text_outcome_and_timing_changes(runner: CliRunner, tmp_path: Path) -> None:
    old = write(tmp_path / "old.msgpack", interaction_of(text_stream("Hello", " world")))
    slower = [Event(t_ns=e.t_ns * 2, chunk=e.chunk) for e in interaction_of(text_stream("Hello", " there")).events]
    changed = msgspec.structs.replace(
        interaction_of(text_stream("Hello", " there"), content="hi"), events=slower, outcome=Completed(t_ns=20_000_000)
    )
    new = write(tmp_path / "new.msgpack", changed, interaction_of(text_stream("more")))
    result = run(runner, "diff", old, new)
    assert result.exit_code == 1
    out = result.stdout
    assert "#0 request messages[0].content: old.msgpack 'hello', new.msgpack 'hi'" in out  # two files, by name
    assert "recorded" not in out
    assert "requested" not in out
    assert "#0 text: 'Hello world' -> 'Hello there'" in out
    assert "#1 added:" in out
    assert "timing: duration: mean shift" in out
    names = ("old.msgpack", "new.msgpack")
    assert diff_cassettes(old, new, names=names).changes == [line for line in out.splitlines() if line.startswith("#")]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    same_name = run(runner, "diff", old.rename(tmp_path / "a" / "x.msgpack"), new.rename(tmp_path / "b" / "x.msgpack"))
    a, b = tmp_path / "a" / "x.msgpack", tmp_path / "b" / "x.msgpack"
    assert f"#0 request messages[0].content: {a} 'hello', {b} 'hi'" in same_name.stdout  # same names: the paths


MARKUP = "list [/etc] [bold]now[/INST] :thumbs_up:"


def test_show_play_and_diff_print_markup_and_emoji_codes_as_they_are(runner: CliRunner, tmp_path: Path) -> None:
    tape = write(tmp_path / "[red]tape.msgpack", interaction_of(text_stream("ok [/INST] :thumbs_up:"), content=MARKUP))
    shown = run(runner, "show", tape)
    assert shown.exit_code == 0, shown.output
    assert MARKUP[:24] in shown.stdout  # the column is 32 wide
    assert str(tape) in shown.stdout
    played = run(runner, "play", tape, "--instant")
    assert played.exit_code == 0, played.output
    assert repr(MARKUP) in played.stdout
    assert "ok [/INST] :thumbs_up:" in played.stdout
    other = write(tmp_path / "other.msgpack", interaction_of(text_stream("ok [/etc] :smile:"), content=MARKUP))
    diffed = run(runner, "diff", tape, other)
    assert diffed.exit_code == 1, diffed.output
    assert "#0 text: 'ok [/INST] :thumbs_up:' -> 'ok [/etc] :smile:'" in diffed.stdout
    assert "👍" not in diffed.stdout + played.stdout + shown.stdout


# -- redact, recover ---------------------------------------------------------------------------------


def test_redact_in_place_also_env_secrets(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLI_TEST_TOKEN", "tok-from-the-environment")
    path = write(
        tmp_path / "leaky.json",
        interaction_of(text_stream("my password is hunter2hunter2 ", "and tok-from-the-environment")),
    )
    result = run(runner, "redact", path, "--secret", "hunter2hunter2")
    assert result.exit_code == 0, result.output
    data = path.read_text()
    assert "hunter2hunter2" not in data
    assert "tok-from-the-environment" not in data
    assert "[REDACTED]" in data
    assert check_cassette(path) == []  # the deltas still concatenate to the block
    again = run(runner, "redact", path)
    assert "nothing to redact" in again.stdout


async def test_recover_turns_a_journal_into_a_cassette(runner: CliRunner, tmp_path: Path) -> None:
    target = tmp_path / "crashed.msgpack"
    recorder = RecordingAdapter(ScriptedAdapter([ScriptedTurn(text="one two three four")]), target)
    stream = recorder.stream(options())
    received = [await anext(stream) for _ in range(3)]
    journal = recorder.journal_path
    await stream.aclose()
    del stream, recorder  # the "crash": never saved, its journal closed and unlocked as a dead process's is
    assert journal.exists()
    assert not target.exists()
    result = run(runner, "recover", journal)
    assert result.exit_code == 0, result.output
    recovered = load_cassette(target)
    assert recovered.interactions[0].chunks == received
    assert type(recovered.interactions[0].outcome) is Cancelled
    assert not journal.exists()
    again = run(runner, "recover", journal)
    assert again.exit_code == 3
    assert run(runner, "recover", tmp_path).exit_code == 3


def test_recover_refuses_to_overwrite(runner: CliRunner, tmp_path: Path) -> None:
    journal = tmp_path / "x.msgpack.journal"
    journal.write_text("")
    shutil.copy(DEMO, tmp_path / "x.msgpack")
    result = run(runner, "recover", journal)
    assert result.exit_code == 3
    assert "--force" in one_error_line(result)


# -- play --------------------------------------------------------------------------------------------


def test_play_shows_text_reasoning_tool_calls_usage_and_outcome(runner: CliRunner) -> None:
    result = run(runner, "play", DEMO, "--instant")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "thinking: The user wants the files in src/." in out
    assert '→ list_files({"path":"src/","depth":1})' in out
    assert "usage: 412 in (128 cached) / 38 out (17 reasoning)" in out
    assert "finish: tool-calls" in out
    assert "which starts the HTTP server on port 8080." in out


def test_play_one_interaction_with_a_fault(runner: CliRunner) -> None:
    result = run(runner, "play", DEMO, "--speed", "1000", "--interaction", "1", "--fault", "disconnect-mid-tool-call")
    assert result.exit_code == 0, result.output
    assert "#1 " in result.stdout
    assert "#0 " not in result.stdout
    assert "[STREAM_ABORTED]" in result.stdout
    assert "fault injected: disconnect-mid-tool-call" in result.stdout


def test_play_a_json_fault_spec_and_recorded_errors(runner: CliRunner) -> None:
    result = run(runner, "play", EXAMPLES / "retry-429.msgpack", "--instant")
    assert "[PROVIDER_HTTP_ERROR] rate limit reached" in result.stdout
    spec = '{"type": "http-error", "status": 503}'
    result = run(runner, "play", DEMO, "--instant", "-n", "0", "--fault", spec)
    assert "fault injected: http-503" in result.stdout


def test_play_says_where_a_recording_was_cut_short(runner: CliRunner) -> None:
    result = run(runner, "play", EXAMPLES / "cut-mid-tool-call.msgpack", "--instant")
    assert result.exit_code == 0
    assert "the recording was cut short here (consumer closed the stream)" in result.stdout
    assert "error:" not in result.stdout


def test_play_unknown_fault_lists_the_valid_ids(runner: CliRunner) -> None:
    result = run(runner, "play", DEMO, "--fault", "http-999")
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "unknown standard fault 'http-999'" in line
    assert all(fault_id in line for fault_id in STANDARD_FAULTS)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--speed", "2", "--instant"], "not both"),
        (["--speed", "0"], "--speed must be > 0"),
        (["--interaction", "7"], "interactions 0 to 2"),
    ],
)
def test_play_bad_options_are_usage_errors(runner: CliRunner, args: list[str], message: str) -> None:
    result = run(runner, "play", DEMO, *args)
    assert result.exit_code == 2
    assert message in one_error_line(result)


# -- record ------------------------------------------------------------------------------------------


def _text_reply(*pieces: str) -> FakeResponse:
    deltas = [chunk({"role": "assistant", "content": pieces[0]}), *(chunk({"content": p}) for p in pieces[1:])]
    usage = {"prompt_tokens": 7, "completion_tokens": len(pieces), "total_tokens": 7 + len(pieces)}
    return FakeResponse(body=sse(*deltas, chunk({}, finish_reason="stop", usage=usage)))


@pytest.fixture
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("CLI_TEST_API_KEY", DUMMY_KEY)
    return "CLI_TEST_API_KEY"


def test_record_a_prompt_against_the_provider(
    runner: CliRunner, fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_reasoning_then_text()))
    out = tmp_path / "hello.msgpack"
    result = run(
        runner, "record", "--base-url", fake_provider.url, "--api-key-env", api_key, "-p", "Say hello", "-o", out
    )
    assert result.exit_code == 0, result.output
    assert "thinking: Hmm, a greeting. 🤔" in result.stdout
    assert "Hello there! 😊" in result.stdout
    assert "saved 1 interaction(s)" in result.stderr
    assert fake_provider.requests[0].headers["authorization"] == f"Bearer {DUMMY_KEY}"
    assert fake_provider.requests[0].json["messages"] == [{"role": "user", "content": "Say hello"}]
    assert DUMMY_KEY.encode() not in out.read_bytes()
    assert check_cassette(out) == []
    assert not (tmp_path / "hello.msgpack.journal").exists()
    assert load_cassette(out).interactions[0].request.model == "deepseek-chat"


def test_record_chat_two_turns_from_stdin(
    runner: CliRunner, fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(_text_reply("Hi", "!"), _text_reply("Paris", "."))
    out = tmp_path / "chat.json"
    messages = tmp_path / "messages.json"
    messages.write_text('[{"role": "system", "content": "Be brief."}]')
    tools = tmp_path / "tools.json"
    tools.write_text('[{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]')
    result = run(
        runner,
        *("record", "--chat", "--base-url", fake_provider.url, "--api-key-env", api_key, "-m", "my-model"),
        *("--messages", messages, "--tools", tools, "-o", out),
        input="Hello\n\nCapital of France?\n",
    )
    assert result.exit_code == 0, result.output
    assert "Hi!" in result.stdout
    assert "Paris." in result.stdout
    cassette = load_cassette(out)
    assert len(cassette.interactions) == 2
    second = cassette.interactions[1].request
    assert [(m.role, m.content) for m in second.messages] == [
        ("system", "Be brief."),
        ("user", "Hello"),
        ("assistant", "Hi!"),
        ("user", "Capital of France?"),
    ]
    assert second.model == "my-model"
    assert [tool.name for tool in second.tools] == ["lookup"]
    assert DUMMY_KEY not in out.read_text()
    assert check_cassette(out) == []


def test_record_without_an_api_key(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLI_NO_SUCH_KEY", raising=False)
    result = run(runner, "record", "-p", "hi", "-o", tmp_path / "x.msgpack", "--api-key-env", "CLI_NO_SUCH_KEY")
    assert result.exit_code == 3
    assert "CLI_NO_SUCH_KEY" in one_error_line(result)
    assert not (tmp_path / "x.msgpack").exists()


def test_record_needs_an_input(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, "record", "-o", tmp_path / "x.msgpack")
    assert result.exit_code == 2
    assert "--prompt" in one_error_line(result)


def test_record_keeps_a_provider_error_and_exits_3(
    runner: CliRunner, fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    body = b'{"error": {"message": "Authentication Fails"}}'
    fake_provider.enqueue(FakeResponse(status=401, body=body, content_type="application/json"))
    out = tmp_path / "denied.msgpack"
    result = run(runner, "record", "--base-url", fake_provider.url, "--api-key-env", api_key, "-p", "hi", "-o", out)
    assert result.exit_code == 3
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith("chunktape: error: no call completed: [PROVIDER_HTTP_ERROR]")
    assert not out.exists()  # the failure is kept, but never as the cassette
    failed = tmp_path / "denied.failed.msgpack"
    assert load_cassette(failed).interactions[0].outcome.code == "PROVIDER_HTTP_ERROR"  # type: ignore[union-attr]


def test_record_messages_in_openai_format_with_a_tool_call_and_its_reply(
    runner: CliRunner, fake_provider: FakeProvider, api_key: str, tmp_path: Path
) -> None:
    fake_provider.enqueue(_text_reply("Sunny", "."))
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    conversation = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    messages = tmp_path / "messages.json"
    messages.write_bytes(msgspec.json.encode(conversation))
    tools = tmp_path / "tools.json"
    tools.write_text('[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]')
    out = tmp_path / "weather.msgpack"
    result = run(
        runner,
        *("record", "--base-url", fake_provider.url, "--api-key-env", api_key),
        *("--messages", messages, "--tools", tools, "-o", out),
    )
    assert result.exit_code == 0, result.output
    sent = fake_provider.requests[0].json
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
    ]
    assert [tool["function"]["name"] for tool in sent["tools"]] == ["get_weather"]
    request = load_cassette(out).interactions[0].request
    assert request.messages[2].tool_calls[0].name == "get_weather"
    assert request.messages[3].tool_call_id == "call_1"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"role": "wizard", "content": "hi"}]', "unknown role 'wizard'"),
        ('[{"role": "user", "content": [{"image_url": {"url": "x.png"}}]}]', "content part 0 must be an object"),
        ('[{"role": "tool", "content": "sunny"}]', "tool_call_id"),
        ('{"messages": 3}', "expected a JSON list"),
    ],
)
def test_record_a_bad_messages_file_is_one_line_and_nothing_is_recorded(
    runner: CliRunner, fake_provider: FakeProvider, api_key: str, tmp_path: Path, content: str, message: str
) -> None:
    messages = tmp_path / "messages.json"
    messages.write_text(content)
    out = tmp_path / "x.msgpack"
    result = run(
        runner, "record", "--base-url", fake_provider.url, "--api-key-env", api_key, "--messages", messages, "-o", out
    )
    assert result.exit_code == 3
    line = one_error_line(result)
    assert str(messages) in line
    assert message in line
    assert not out.exists()
    assert fake_provider.requests == []


def test_record_that_streamed_nothing_keeps_the_cassette_and_hides_the_key(
    runner: CliRunner, fake_provider: FakeProvider, api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTHER_CLI_TOKEN", "tok-other-credential-123")
    echo = f'{{"error": {{"message": "Incorrect API key provided: {DUMMY_KEY} (also tok-other-credential-123)"}}}}'
    out = Path(shutil.copy(DEMO, tmp_path / "good.msgpack"))
    failed = tmp_path / "good.failed.msgpack"
    fake_provider.enqueue(FakeResponse(status=401, body=echo.encode(), content_type="application/json"))
    args = ("record", "--base-url", fake_provider.url, "--api-key-env", api_key, "-p", "hi", "-o", out)
    result = run(runner, *args)
    assert result.exit_code == 3
    assert out.read_bytes() == DEMO.read_bytes()
    (error,) = result.stderr.strip().splitlines()
    assert f"kept the failed recording in {failed}, {out} was left as it was" in error
    assert error.startswith("chunktape: error: no call completed: [PROVIDER_HTTP_ERROR] ")
    assert "Incorrect API key provided: [REDACTED] (also [REDACTED])" in error
    assert DUMMY_KEY not in result.output
    assert "tok-other-credential-123" not in result.output
    assert load_cassette(failed).interactions[0].outcome.code == "PROVIDER_HTTP_ERROR"  # type: ignore[union-attr]
    assert DUMMY_KEY.encode() not in failed.read_bytes()

    fake_provider.enqueue(FakeResponse(status=401, body=echo.encode(), content_type="application/json"))
    forced = run(runner, *args, "--force")
    assert forced.exit_code == 3
    assert f"saved 1 interaction(s) in {out}" in forced.stderr
    assert len(load_cassette(out).interactions) == 1
    assert failed.exists()  # a failed recording is never removed for you


# -- serve, import-vcr -------------------------------------------------------------------------------


def test_serve_on_a_busy_port(runner: CliRunner) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = run(runner, "serve", DEMO, "--port", str(port))
    assert result.exit_code == 3
    assert "in use" in one_error_line(result)


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_serve_port_out_of_range_is_a_usage_error(runner: CliRunner, port: str) -> None:
    result = run(runner, "serve", DEMO, "--port", port)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert "Invalid value for '--port'" in line
    assert "65535" in line or "greater than or equal to 0" in line


def test_serve_needs_something_to_serve(runner: CliRunner, tmp_path: Path) -> None:
    assert run(runner, "serve").exit_code == 2
    result = run(runner, "serve", tmp_path / "missing.msgpack")
    assert result.exit_code == 3
    assert "does not exist" in one_error_line(result)


# -- demo --------------------------------------------------------------------------------------------


def test_demo(runner: CliRunner, tmp_path: Path) -> None:
    result = run(runner, "demo", "--out", tmp_path, "--speed", "1000")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for fault_id in STANDARD_FAULTS:
        assert fault_id in out
    assert "http-429 " in out
    done, kept, look = out.strip().splitlines()[-3:]
    assert done.startswith("demo done in ")
    assert "20 faults: 11 completed (11 after retries), 9 ended in an error" in done
    assert kept == f"cassette kept: {(tmp_path / 'demo-session.msgpack').resolve()}"
    assert look == f"look at it: chunktape show --timeline {tmp_path / 'demo-session.msgpack'}"
    cassette = load_cassette(tmp_path / "demo-session.msgpack")
    assert len(cassette.interactions) == 4  # the agent asks again for the read that failed once
    assert check_cassette(tmp_path / "demo-session.msgpack") == []


# -- real processes ----------------------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "NO_COLOR": "1", **extra}
    env.pop("CHUNKTAPE_DEBUG", None)
    return env


SCRIPT = Path(sys.executable).parent / "chunktape"


def test_demo_and_check_as_processes(tmp_path: Path) -> None:
    demo = subprocess.run(
        [str(SCRIPT), "demo", "--out", ".", "--speed", "1000"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert demo.returncode == 0, demo.stderr
    assert "demo done in" in demo.stdout
    # Where the cassette is, said last, whatever --out was: an absolute path and the next command.
    assert demo.stdout.splitlines()[-2:] == [
        f"cassette kept: {(tmp_path / 'demo-session.msgpack').resolve()}",
        "look at it: chunktape show --timeline demo-session.msgpack",
    ]
    assert "\x1b[" not in demo.stdout  # not a terminal: no colours
    check = subprocess.run(
        [str(SCRIPT), "check", str(tmp_path), str(EXAMPLES)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    (tmp_path / "broken.msgpack").write_bytes(b"\x00\x01garbage")
    check = subprocess.run(
        [str(SCRIPT), "check", str(tmp_path)], capture_output=True, text=True, env=_env(), timeout=60, check=False
    )
    assert check.returncode == 1
    assert check.stdout.strip().startswith(f"{tmp_path / 'broken.msgpack'}: file: CASSETTE_CORRUPT")
    assert "Traceback" not in check.stderr


def test_record_as_a_process(fake_provider: FakeProvider, tmp_path: Path) -> None:
    fake_provider.enqueue(_text_reply("Hello", " from", " a", " process"))
    out = tmp_path / "proc.json"
    done = subprocess.run(
        [str(SCRIPT), "record", "--base-url", fake_provider.url, "-p", "hi", "-o", str(out)],
        capture_output=True,
        text=True,
        env=_env(DEEPSEEK_API_KEY=DUMMY_KEY),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Hello from a process" in done.stdout
    assert DUMMY_KEY not in out.read_text()
    assert check_cassette(out) == []
    missing = subprocess.run(
        [str(SCRIPT), "record", "-p", "hi", "-o", str(tmp_path / "no.json")],
        capture_output=True,
        text=True,
        env={k: v for k, v in _env().items() if k != "DEEPSEEK_API_KEY"},
        timeout=60,
        check=False,
    )
    assert missing.returncode == 3
    assert missing.stderr.strip().splitlines() == [
        "chunktape: error: no API key: set the environment variable DEEPSEEK_API_KEY "
        "(or name another with --api-key-env)"
    ]


def test_python_m_runs_the_same_cli_with_its_exit_codes(tmp_path: Path) -> None:
    """``python -m chunktape`` is the CLI the script runs (whose commands run as processes above): a finding and
    an error, each with its exit code and one line."""

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "chunktape", *args], capture_output=True, text=True, env=_env(), timeout=60
        )

    (tmp_path / "broken.msgpack").write_bytes(b"\x00\x01garbage")
    found = cli("check", str(tmp_path), str(EXAMPLES))
    assert found.returncode == 1
    assert found.stdout.strip().splitlines()[0].startswith(f"{tmp_path / 'broken.msgpack'}: file: CASSETTE_CORRUPT")
    missing = cli("record", "-p", "hi", "-o", str(tmp_path / "no.json"), "--api-key-env", "CLI_NO_SUCH_KEY")
    assert missing.returncode == 3
    assert missing.stderr.strip().splitlines() == [
        "chunktape: error: no API key: set the environment variable CLI_NO_SUCH_KEY "
        "(or name another with --api-key-env)"
    ]
    assert "Traceback" not in found.stderr + missing.stderr


# -- import-vcr and serve (chunktape.http) ------------------------------------------------------------


def _vcr_cassette(path: Path) -> Path:
    request = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    body = _text_reply("Hello", " from", " vcr").body
    assert isinstance(body, bytes)
    document = {
        "version": 1,
        "interactions": [
            {
                "request": {
                    "body": msgspec.json.encode(request).decode(),
                    "headers": {"content-type": ["application/json"]},
                    "method": "POST",
                    "uri": "https://api.deepseek.com/chat/completions",
                },
                "response": {
                    "body": {"string": body.decode()},
                    "headers": {"content-type": ["text/event-stream"]},
                    "status": {"code": 200, "message": "OK"},
                },
            }
        ],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def test_import_vcr(runner: CliRunner, tmp_path: Path) -> None:
    source = _vcr_cassette(tmp_path / "chat.yaml")
    out = tmp_path / "chat.msgpack"
    result = run(runner, "import-vcr", source, "-o", out)
    assert result.exit_code == 0, result.output
    assert "imported 1 interaction(s)" in result.stdout
    assert check_cassette(out) == []
    played = run(runner, "play", out, "--instant")
    assert "Hello from vcr" in played.stdout
    missing = run(runner, "import-vcr", tmp_path / "none.yaml", "-o", out)
    assert missing.exit_code == 3
    assert "CASSETTE_NOT_FOUND" in one_error_line(missing)


def test_serve_as_a_process_with_scenarios(tmp_path: Path) -> None:
    scenarios = tmp_path / "scenarios.toml"
    scenarios.write_text(f'[[scenarios]]\nname = "limited"\ncassette = "{DEMO}"\nfaults = ["http-429"]\n')
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chunktape",
            "serve",
            str(DEMO),
            "--port",
            "0",
            "--instant",
            "--scenarios",
            str(scenarios),
            "--repeat",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("serving on http://127.0.0.1:"), first + (
            process.stderr.read() if process.stderr else ""
        )
        url = first.split()[2]
        assert "scenario limited" in process.stdout.readline()
        listed = httpx.get(f"{url}/scenarios", timeout=10).json()
        assert "limited" in str(listed)
        body = options_to_openai_request(load_cassette(DEMO).interactions[0].request.to_options())
        for _ in range(2):  # --repeat: the same request replays every time
            answer = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10)
            assert answer.status_code == 200
            assert "list_files" in answer.text
        limited = httpx.post(f"{url}/scenarios/limited/v1/chat/completions", json=body, timeout=10)
        assert limited.status_code == 429
    finally:
        interrupt(process)
    assert process.returncode in (0, 130)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_readme_textconv_recipe_gives_readable_diffs(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
            check=True,
        )
        return done.stdout

    git("init", "-q")
    (tmp_path / ".gitattributes").write_text("*.msgpack diff=chunktape\n")
    git("config", "diff.chunktape.textconv", f"{SCRIPT} show --json")
    shutil.copy(DEMO, tmp_path / "tape.msgpack")
    git("add", ".")
    git("commit", "-qm", "tape")
    changed = msgspec.structs.replace(load_cassette(DEMO), interactions=load_cassette(DEMO).interactions[:1])
    save_cassette(changed, tmp_path / "tape.msgpack")
    shown = git("diff")
    assert "Binary files" not in shown
    removed = [line for line in shown.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert any('"role": "tool"' in line for line in removed)  # the dropped interactions, readable


def test_ctrl_c_while_recording_keeps_what_was_recorded(fake_provider: FakeProvider, tmp_path: Path) -> None:
    first = chunk({"role": "assistant", "content": "partial answer"})
    fake_provider.enqueue(FakeResponse(body=sse(first, done=False), stall=True))  # then keep-alives, forever
    out = tmp_path / "cut.msgpack"
    process = subprocess.Popen(
        [str(SCRIPT), "record", "--base-url", fake_provider.url, "-p", "hi", "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(DEEPSEEK_API_KEY=DUMMY_KEY),
    )
    assert process.stdout is not None
    seen = ""
    while "partial answer" not in seen:
        piece = process.stdout.read(1)
        assert piece, "the recorder exited before streaming"
        seen += piece
    _, stderr = interrupt(process)
    # No reply completed: what was received is kept beside the cassette, never as it; Ctrl-C exits 130.
    assert process.returncode == 130, stderr
    kept = tmp_path / "cut.failed.msgpack"
    assert f"no call completed: interrupted; kept the failed recording in {kept}" in " ".join(stderr.split())
    assert not out.exists()
    interaction = load_cassette(kept).interactions[0]
    assert type(interaction.outcome) is Cancelled
    assert [c.text for c in interaction.chunks if hasattr(c, "text")] == ["partial answer"]
    assert DUMMY_KEY not in kept.read_bytes().decode(errors="replace")
    assert not (tmp_path / "cut.msgpack.journal").exists()


def test_ctrl_c_after_a_completed_reply_keeps_the_cassette_and_exits_130(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    second = chunk({"role": "assistant", "content": "second, cut"})
    fake_provider.enqueue(_text_reply("first", " reply"), FakeResponse(body=sse(second, done=False), stall=True))
    out = tmp_path / "chat.msgpack"
    process = subprocess.Popen(
        [str(SCRIPT), "record", "--base-url", fake_provider.url, "--chat", "-o", str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(DEEPSEEK_API_KEY=DUMMY_KEY),
    )
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write("hi\nagain\n")
    process.stdin.flush()
    seen = ""
    while "second, cut" not in seen:
        piece = process.stdout.read(1)
        assert piece, "the recorder exited before streaming the second reply"
        seen += piece
    _, stderr = interrupt(process)
    assert process.returncode == 130, stderr
    assert f"interrupted; kept 2 interaction(s) in {out}" in " ".join(stderr.split())
    kept = load_cassette(out).interactions
    assert [type(item.outcome) for item in kept] == [Completed, Cancelled]
