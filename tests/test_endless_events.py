"""A server that never ends an event: a stream may last as long as it likes, one event may not. The adapter and the
recording transport stop at the bound with ``INVALID_RESPONSE`` (recorded as the outcome, the chunks before it
kept), instead of holding an ever-growing line in memory."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from chunktape import ErrorCode, GenerateOptions, LlmError, Message, Raised, TextDelta, load_cassette
from chunktape.http import RecordingTransport, import_vcr
from chunktape.providers import OpenAICompatAdapter
from chunktape.wire import _sse
from fake_provider import FakeProvider, FakeResponse, chunk, sse
from helpers import drain

BOUND = 256 << 10
OPTIONS = GenerateOptions(model="deepseek-chat", messages=[Message(role="user", content="hi")])
# One good event, then a data line that never ends: 4 MiB of it, sixteen times the bound, in 64 KiB writes.
HEAD = sse(chunk({"role": "assistant", "content": "hel"}), done=False)
ENDLESS = [HEAD, b'data: {"choices":[{"delta":{"content":"'] + [b"x" * (64 << 10)] * 64


@pytest.fixture(autouse=True)
def _small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sse, "MAX_EVENT_CHARS", BOUND)


async def test_the_adapter_stops_at_an_event_past_the_bound(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=ENDLESS))
    chunks, error = await drain(OpenAICompatAdapter(fake_provider.url, api_key="sk-test").stream(OPTIONS))
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["hel"]
    assert error is not None
    assert error.code is ErrorCode.INVALID_RESPONSE
    assert f"{BOUND:,} characters" in error.message


def test_the_recording_transport_records_the_bound_as_the_outcome(fake_provider: FakeProvider, tmp_path: Path) -> None:
    fake_provider.enqueue(FakeResponse(body=ENDLESS))
    path = tmp_path / "c.msgpack"
    request = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    url = f"{fake_provider.url}/v1/chat/completions"
    with (
        httpx2.Client(transport=RecordingTransport(httpx2.HTTPTransport(), path)) as client,
        client.stream("POST", url, json=request) as response,
    ):
        received = sum(len(piece) for piece in response.iter_bytes())
    assert received == sum(map(len, ENDLESS))  # the client still gets every byte the server sent
    (interaction,) = load_cassette(path).interactions
    assert [e.chunk.text for e in interaction.events if isinstance(e.chunk, TextDelta)] == ["hel"]
    assert isinstance(interaction.outcome, Raised)
    assert interaction.outcome.code == ErrorCode.INVALID_RESPONSE


@pytest.mark.parametrize(
    "body",
    [
        pytest.param([b"data: " + b"y" * (BOUND + 1) + b"\n\n"], id="one-line-one-read"),
        pytest.param([b"data: y\n" * (BOUND // 2 + 1), b"\n"], id="many-data-lines"),
        pytest.param([b": " + b"k" * 1024] * (BOUND // 1024 + 1), id="comment-in-reads"),
    ],
)
def test_the_parser_refuses_an_event_past_the_bound_however_it_is_fed(body: list[bytes]) -> None:
    parser = _sse.SseParser()
    with pytest.raises(LlmError) as caught:
        for piece in body:
            parser.feed(piece)
        parser.close()
    assert caught.value.code is ErrorCode.INVALID_RESPONSE


def test_many_events_under_the_bound_are_a_stream_of_any_length() -> None:
    event = sse(chunk({"content": "z" * 1000}), done=False)
    parser = _sse.SseParser()
    items = [item for _ in range(2 * BOUND // len(event) + 1) for item in parser.feed(event)]
    assert len(items) > 2 * BOUND // len(event)
    assert json.loads(items[-1].data or "")["choices"][0]["delta"]["content"] == "z" * 1000  # type: ignore[union-attr]


def test_an_imported_body_with_an_event_past_the_bound_is_named_or_kept_as_raised(tmp_path: Path) -> None:
    from test_vcr import vcr_response, write_vcr

    body = HEAD.decode() + 'data: {"choices":[{"delta":{"content":"' + "x" * (BOUND + 1) + '"}}]}\n\n'
    path = write_vcr(tmp_path / "c.yaml", vcr_response(body))
    with pytest.raises(LlmError) as caught:
        import_vcr(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "vcr interaction #0" in caught.value.message
    assert f"{BOUND:,} characters" in caught.value.message
    (interaction,) = import_vcr(path, keep_undecodable=True).interactions
    assert isinstance(interaction.outcome, Raised)
    assert interaction.outcome.code == ErrorCode.INVALID_RESPONSE
