"""A transport recording's response metadata (``Interaction.response``) survives a crash: it is journaled with the
interaction's end, and ``recover`` gives it back; journals written before it was journaled still recover."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx2

from chunktape import Cancelled, Completed, TextDelta, recover
from chunktape._cassettes.journal import journal_path
from chunktape._cassettes.model import ResponseMeta
from chunktape.http import RecordingTransport
from fake_provider import chunk, sse

HEADERS = {"content-type": "text/event-stream", "x-request-id": "req_42", "openai-processing-ms": "7"}
EXPECTED = ResponseMeta(
    id="4f7c2b1e-0000-4000-8000-000000000000",
    model="deepseek-chat-v3",
    created=1764681305,
    system_fingerprint="fp_test",
    headers={"x-request-id": "req_42", "openai-processing-ms": "7"},
    extras={
        "first": {"service_tier": "default"},
        **{f"{place}.choice": {"logprobs": None} for place in ("first", "delta", "finish")},
    },
)
BODY = sse(
    chunk({"role": "assistant", "content": "hel"}, model="deepseek-chat-v3", service_tier="default"),
    chunk({"content": "lo"}, model="deepseek-chat-v3"),
    chunk({}, finish_reason="stop", model="deepseek-chat-v3"),
)
REQUEST = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _answer(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, headers=HEADERS, content=BODY)


def test_an_unclosed_transport_recording_recovers_with_its_response_metadata(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    client = httpx2.Client(transport=RecordingTransport(httpx2.MockTransport(_answer), path))
    assert client.post("http://127.0.0.1/v1/chat/completions", json=REQUEST).content == BODY
    # The client is never closed: the cassette is never saved, only the journal holds the recording.
    assert not path.exists()
    (interaction,) = recover(journal_path(path)).interactions
    assert type(interaction.outcome) is Completed
    assert interaction.response == EXPECTED
    client.close()


def test_a_killed_transport_recording_recovers_with_its_response_metadata(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import httpx2
        from chunktape.http import RecordingTransport
        from test_journal_response import REQUEST, _answer
        client = httpx2.Client(transport=RecordingTransport(httpx2.MockTransport(_answer), {str(path)!r}))
        client.post("http://127.0.0.1/v1/chat/completions", json=REQUEST).read()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert not path.exists()
    (interaction,) = recover(journal_path(path)).interactions
    assert type(interaction.outcome) is Completed
    assert interaction.response == EXPECTED


def test_a_journal_written_before_response_metadata_was_journaled_still_recovers(tmp_path: Path) -> None:
    """The records as chunktape wrote them before: an end record is ``["end", id, outcome]``."""
    journal = tmp_path / "c.msgpack.journal"
    old = [
        ["meta", {"createdAt": "2026-01-01T00:00:00Z", "recorder": "chunktape 0.1.0"}],
        ["begin", 0, {"model": "m", "messages": [], "fingerprint": "f"}, None, 1],
        ["event", 0, 5, {"type": "text-delta", "index": 0, "text": "hi"}],
        ["end", 0, {"type": "completed", "tNs": 9}],
        ["begin", 1, {"model": "m", "messages": [], "fingerprint": "f"}, None, 1],
    ]
    journal.write_text("".join(json.dumps(record, separators=(",", ":")) + "\n" for record in old))
    first, second = recover(journal).interactions
    assert first.outcome == Completed(t_ns=9)
    assert first.chunks == [TextDelta(index=0, text="hi")]
    assert first.response is None
    assert type(second.outcome) is Cancelled
    assert second.response is None
