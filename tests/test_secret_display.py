"""Whatever is shown to a person passes one redaction: mismatch messages, server error bodies, CLI output."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from chunktape import (
    Cassette,
    Completed,
    ErrorCode,
    Event,
    Interaction,
    LlmError,
    Raised,
    RecordedRequest,
    ReplayAdapter,
    Timing,
    save_cassette,
)
from chunktape.cli import app
from chunktape.http import ReplayServer
from chunktape.http._server.app import MISS_STATUS
from chunktape.wire._openai_chat import options_to_openai_request
from helpers import collect, options, text_stream

BODY = "Qx7Lm2Np9Rt4Vw8Yz3Bc6Df1Gh5Jk0Ls"  # synthetic
KEY = f"sk-proj-{BODY}"
TELL = BODY[:8]
PASSWORD = "pw-of-the-db-0123"


def _interaction(content: str, *pieces: str, outcome: object = None) -> Interaction:
    chunks = text_stream(*pieces) if pieces else []
    return Interaction(
        request=RecordedRequest.from_options(options(content)),
        events=[Event(t_ns=(n + 1) * 1000, chunk=chunk) for n, chunk in enumerate(chunks)],
        outcome=outcome or Completed(t_ns=(len(chunks) + 1) * 1000),  # type: ignore[arg-type]
    )


def _allowed(path: Path, key: str = KEY) -> Path:
    """A cassette that kept a credential because it was explicitly allowed (allow_secrets)."""
    half = len(key) // 2
    save_cassette(Cassette(interactions=[_interaction(f"use {key}", "the key is ", key[:half], key[half:])]), path)
    return path


# -- CASSETTE_MISMATCH ----------------------------------------------------------------------------------


async def test_a_mismatch_message_masks_credentials_of_the_live_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)
    replay = ReplayAdapter(Cassette(interactions=[_interaction("hello", "hi")]))
    # the key starts where the diff line is cut short (80 characters), so half a key would be left
    live = options("x" * 60 + f" {KEY} and {PASSWORD}")
    with pytest.raises(LlmError) as caught:
        await collect(replay.stream(live))
    assert caught.value.code is ErrorCode.CASSETTE_MISMATCH
    shown = str(caught.value)
    assert "sk-proj" not in shown
    assert TELL not in shown
    assert PASSWORD not in shown
    assert "[REDACTED]" in shown


# -- the replay server's error bodies --------------------------------------------------------------------


async def test_the_servers_error_bodies_mask_credentials(tmp_path: Path) -> None:
    failing = _interaction(
        "who am i", outcome=Raised(t_ns=1, code="PROVIDER_HTTP_ERROR", message=f"invalid key {KEY}", status=401)
    )
    path = tmp_path / "c.json"
    save_cassette(Cassette(interactions=[_interaction("hello", "hi"), failing]), path)
    async with ReplayServer(path, timing=Timing.instant()) as server, httpx.AsyncClient() as client:
        miss = options_to_openai_request(options(f"please use {KEY}"))
        response = await client.post(server.url + "/v1/chat/completions", json=miss)
        assert response.status_code == MISS_STATUS  # a cassette miss, which no SDK retries
        assert "CASSETTE_MISMATCH" in response.json()["error"]["message"]
        assert TELL not in response.text
        response = await client.post(
            server.url + "/v1/chat/completions", json=options_to_openai_request(options("who am i"))
        )
        assert response.status_code == 401
        assert "invalid key [REDACTED]" in response.json()["error"]["message"]
        assert TELL not in response.text


# -- the CLI ---------------------------------------------------------------------------------------------


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    return CliRunner()


def _run(runner: CliRunner, *args: str | Path) -> Result:
    return runner.invoke(app, [str(arg) for arg in args])


@pytest.mark.parametrize(
    "command", [["show"], ["show", "--json"], ["play", "--instant"]], ids=["show", "show-json", "play"]
)
def test_show_and_play_mask_an_allowed_secret_unless_asked(
    runner: CliRunner, tmp_path: Path, command: list[str]
) -> None:
    path = _allowed(tmp_path / "c.msgpack")
    masked = _run(runner, *command, path)
    assert masked.exit_code == 0, masked.output
    assert TELL not in masked.output
    assert "[REDACTED]" in masked.output
    shown = _run(runner, *command, path, "--show-secrets")
    assert shown.exit_code == 0, shown.output
    assert BODY in shown.output.replace("\n", "") or TELL in shown.output


def test_show_json_masks_the_value_of_a_credential_env_variable(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)
    path = _allowed(tmp_path / "c.json", PASSWORD)
    result = _run(runner, "show", "--json", path)
    assert result.exit_code == 0
    assert PASSWORD not in result.output
    assert PASSWORD[:7] not in result.output  # also not half of it, though it was streamed in two deltas


def test_diff_masks_credentials_and_still_reports_a_difference_in_them_alone(runner: CliRunner, tmp_path: Path) -> None:
    old = _allowed(tmp_path / "old.msgpack")
    new = _allowed(tmp_path / "new.msgpack", KEY.replace("Qx7", "Zz9"))
    result = _run(runner, "diff", old, new)
    assert result.exit_code == 1
    assert "credentials differ" in result.output
    assert TELL not in result.output
    shown = _run(runner, "diff", old, new, "--show-secrets")
    assert shown.exit_code == 1
    assert "Qx7" in shown.output
    assert "Zz9" in shown.output


def test_diff_lines_mask_credentials_next_to_other_differences(runner: CliRunner, tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    save_cassette(Cassette(interactions=[_interaction("a", "one")]), old)
    new = tmp_path / "new.json"
    save_cassette(Cassette(interactions=[_interaction(f"token {KEY}", "two")]), new)
    result = _run(runner, "diff", old, new)
    assert result.exit_code == 1
    assert "[REDACTED]" in result.output
    assert TELL not in result.output


def test_a_cli_error_line_masks_a_credential(runner: CliRunner, tmp_path: Path) -> None:
    result = _run(runner, "show", tmp_path / f"{KEY}.msgpack")
    assert result.exit_code == 3
    assert "does not exist" in result.stderr
    assert TELL not in result.stderr
