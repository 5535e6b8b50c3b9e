"""``RecordingProxy`` / ``chunktape proxy``: an agent records through a loopback proxy; the key is never written."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai
import pytest

from chunktape import Completed, ReplayAdapter, TextDelta, load_cassette
from chunktape.http._server.proxy import RecordingProxy
from fake_provider import FakeProvider, FakeResponse, chunk, sse
from helpers import interrupt

KEY = "sk-proxy-abcdefghijklmnopqrstuvwxyz0123"
HELLO = sse(
    chunk({"role": "assistant", "content": "Hi"}), chunk({"content": " there"}), chunk({}, finish_reason="stop")
)


def _ask(base_url: str, question: str = "hi") -> str:
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    try:
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": question}], stream=True
        )
        return "".join(part.choices[0].delta.content or "" for part in stream if part.choices)
    finally:
        client.close()


def test_an_sdk_records_through_the_proxy_and_the_key_never_reaches_the_cassette(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    fake_provider.enqueue(FakeResponse(body=HELLO))
    path = tmp_path / "agent.msgpack"
    with RecordingProxy(fake_provider.url, path) as proxy:
        text = _ask(proxy.url + "/v1")
    assert text == "Hi there"
    seen = fake_provider.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"  # the client's key went upstream
    assert KEY.encode() not in path.read_bytes()
    (interaction,) = load_cassette(path).interactions
    assert isinstance(interaction.outcome, Completed)
    assert "".join(c.text for c in interaction.chunks if isinstance(c, TextDelta)) == "Hi there"


def test_the_stream_passes_through_unbuffered(fake_provider: FakeProvider, tmp_path: Path) -> None:
    """The first event reaches the agent while the provider still holds the rest back."""
    pieces = [sse(chunk({"role": "assistant", "content": "a"}), done=False)]
    pieces += [sse(chunk({"content": "b"}), done=False), sse(chunk({}, finish_reason="stop"))]
    release = threading.Event()
    fake_provider.enqueue(FakeResponse(body=pieces, release=release))
    path = tmp_path / "slow.msgpack"
    with RecordingProxy(fake_provider.url, path) as proxy:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body, timeout=10) as reply:
            pieces_read = reply.iter_raw()
            first = next(pieces_read)
            # Only the first piece has been sent: the provider holds the rest until it is released.
            assert fake_provider.completed == 0
            assert b'"content": "a"' in first
            release.set()
            rest = b"".join(pieces_read)
    assert b"[DONE]" in rest
    (interaction,) = load_cassette(path).interactions
    times = [event.t_ns for event in interaction.events]
    assert times == sorted(times)
    assert times[-1] - times[0] > 0  # the provider's timing is recorded, not one instant


def test_other_paths_pass_through_and_errors_are_recorded(fake_provider: FakeProvider, tmp_path: Path) -> None:
    fake_provider.enqueue(
        FakeResponse(
            body=b'{"error": {"message": "slow down"}}',
            status=429,
            headers={"retry-after": "3"},
            content_type="application/json",
        )
    )
    path = tmp_path / "limited.msgpack"
    with RecordingProxy(fake_provider.url, path) as proxy:
        with pytest.raises(openai.RateLimitError):
            _ask(proxy.url + "/v1")
        missing = httpx.get(proxy.url + "/v1/models", timeout=10)
    assert missing.status_code in (404, 405)  # the fake provider's own answer, passed through
    (interaction,) = load_cassette(path).interactions
    assert interaction.outcome.status == 429  # type: ignore[union-attr]
    assert ReplayAdapter(path).source.requests[0].model == "m"


def test_an_unreachable_upstream_is_a_502(tmp_path: Path) -> None:
    with RecordingProxy("http://127.0.0.1:9", tmp_path / "down.msgpack") as proxy:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        answer = httpx.post(proxy.url + "/v1/chat/completions", json=body, timeout=10)
    assert answer.status_code == 502
    assert answer.headers["x-chunktape-error"] == "UPSTREAM_ERROR"


def test_chunktape_proxy_as_a_process(fake_provider: FakeProvider, tmp_path: Path) -> None:
    fake_provider.enqueue(FakeResponse(body=HELLO))
    path = tmp_path / "cli.msgpack"
    env = {**os.environ, "PYTHONWARNINGS": "error", "NO_COLOR": "1", "COLUMNS": "200"}
    command = ["-m", "chunktape", "proxy", "--upstream", fake_provider.url, "-o", str(path), "--port", "0"]
    process = subprocess.Popen(
        [sys.executable, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("recording "), first + (process.stderr.read() if process.stderr else "")
        url = first.split(" on ")[1].split()[0]
        assert _ask(url + "/v1") == "Hi there"
    finally:
        out, err = interrupt(process)
    assert process.returncode == 0, err
    assert f"saved {path}" in out
    assert KEY.encode() not in path.read_bytes()
    assert len(load_cassette(path).interactions) == 1


def test_chunktape_proxy_refuses_a_bad_upstream_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "chunktape", "proxy", "--upstream", "ftp://x", "-o", str(tmp_path / "x.msgpack")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1
    assert "INVALID_CONFIG" in done.stderr or "http(s) URL" in done.stderr
