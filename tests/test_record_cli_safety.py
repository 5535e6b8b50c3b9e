"""``chunktape record`` never saves a failure as the cassette and never loses a recording to a secret hit."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from chunktape import load_cassette
from chunktape._report.analysis import check_cassette
from chunktape.cli import app
from fake_provider import FakeProvider, FakeResponse, chunk, sse

DUMMY_KEY = "sk-clisafety-0123456789abcdefghijklmnop"
PROMPT_KEY = "sk-proj-Zyxwvutsrqponmlkjihgfedcba9876543210"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.delenv("CHUNKTAPE_DEBUG", raising=False)
    monkeypatch.setenv("CLI_SAFETY_API_KEY", DUMMY_KEY)
    return CliRunner()


def record(runner: CliRunner, base_url: str, out: Path, *args: str) -> Result:
    argv = ["record", "--base-url", base_url, "--api-key-env", "CLI_SAFETY_API_KEY", "-o", str(out), *args]
    return runner.invoke(app, argv)


def _reply(text: str) -> FakeResponse:
    return FakeResponse(body=sse(chunk({"role": "assistant", "content": text}), chunk({}, finish_reason="stop")))


def test_a_down_server_writes_only_the_failed_file(runner: CliRunner, tmp_path: Path) -> None:
    with socket.socket() as held:  # bound, never listening: a connect is refused, and nothing else takes the port
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        out = tmp_path / "down.msgpack"
        result = record(runner, f"http://127.0.0.1:{port}", out, "-p", "hi")
    assert result.exit_code == 3
    (line,) = result.stderr.strip().splitlines()
    failed = tmp_path / "down.failed.msgpack"
    assert line.startswith("chunktape: error: no call completed: [STREAM_ABORTED] ")
    assert line.endswith(f"kept the failed recording in {failed}, {out} was not written (--force writes it)")
    assert not out.exists()
    assert load_cassette(failed).interactions[0].outcome.code == "STREAM_ABORTED"  # type: ignore[union-attr]
    assert not (tmp_path / "down.msgpack.journal").exists()


def test_a_wrong_url_answering_404_writes_only_the_failed_file(
    runner: CliRunner, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(FakeResponse(status=404, body=b'{"error": "no such route"}', content_type="application/json"))
    out = tmp_path / "wrong.json"
    result = record(runner, fake_provider.url, out, "-p", "hi")
    assert result.exit_code == 3
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("chunktape: error: no call completed: [PROVIDER_HTTP_ERROR] ")
    assert not out.exists()
    assert load_cassette(tmp_path / "wrong.failed.json").interactions[0].outcome.status == 404  # type: ignore[union-attr]


def test_a_chat_whose_every_turn_failed_writes_no_cassette(
    runner: CliRunner, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    failure = FakeResponse(status=404, body=b"{}", content_type="application/json")
    fake_provider.enqueue(failure, failure)
    out = tmp_path / "chat.msgpack"
    argv = ["record", "--chat", "--base-url", fake_provider.url, "--api-key-env", "CLI_SAFETY_API_KEY", "-o", str(out)]
    result = runner.invoke(app, argv, input="one\ntwo\n")
    assert result.exit_code == 3
    assert not out.exists()
    assert len(load_cassette(tmp_path / "chat.failed.msgpack").interactions) == 2


def test_a_secret_in_the_prompt_keeps_the_recording_redacted_and_allow_secret_accepts_it(
    runner: CliRunner, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(_reply("Noted."))
    out = tmp_path / "prompt.msgpack"
    result = record(runner, fake_provider.url, out, "-p", f"my test key is {PROMPT_KEY}")
    assert result.exit_code == 3
    failed = tmp_path / "prompt.failed.msgpack"
    assert not out.exists()
    assert not (tmp_path / "prompt.msgpack.journal").exists()
    assert stat.S_IMODE(os.stat(failed).st_mode) == 0o600
    assert PROMPT_KEY.encode() not in failed.read_bytes()
    kept = load_cassette(failed).interactions[0]
    assert kept.request.messages[0].content == "my test key is [REDACTED]"
    assert "".join(getattr(c, "text", "") for c in kept.chunks) == "Noted."  # the paid reply is not lost
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("chunktape: error: [SECRET_DETECTED] ")
    assert f"kept in {failed} with every credential replaced by [REDACTED] (mode 0600)" in line
    assert "add --allow-secret VALUE (its value) to this chunktape record command and record again" in line
    assert PROMPT_KEY not in result.output

    fake_provider.enqueue(_reply("Noted."))
    accepted = record(
        runner, fake_provider.url, out, "-p", f"my test key is {PROMPT_KEY}", "--allow-secret", PROMPT_KEY
    )
    assert accepted.exit_code == 0, accepted.output
    assert load_cassette(out).interactions[0].request.messages[0].content == f"my test key is {PROMPT_KEY}"
    assert failed.exists()  # the earlier recording, kept: chunktape never removes one
    assert DUMMY_KEY.encode() not in out.read_bytes()  # allowing one value does not let the API key through


def test_a_secret_in_the_reply_can_be_accepted_by_moving_the_redacted_recording(
    runner: CliRunner, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(_reply(f"here: {PROMPT_KEY}"))
    out = tmp_path / "reply.json"
    result = record(runner, fake_provider.url, out, "-p", "show me a key")
    assert result.exit_code == 3
    failed = tmp_path / "reply.failed.json"
    line = result.stderr.strip().splitlines()[-1]
    assert f"or keep the redacted recording as the cassette: mv {failed} {out}" in line
    failed.rename(out)
    assert check_cassette(out) == []
