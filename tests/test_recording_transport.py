"""RecordingTransport: an httpx2/httpx client's chat completions teed into a chunk cassette, with metadata."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from typer.testing import CliRunner

from chunktape import Cancelled, Completed, Raised, load_cassette
from chunktape._cassettes.model import ResponseMeta
from chunktape.cli._app import app
from chunktape.http import RecordingTransport, UnrecordedRequestWarning
from chunktape.wire._openai_chat import decode_openai_sse
from fake_provider import (
    FakeProvider,
    FakeResponse,
    chunk,
    deepseek_parallel_tools,
    openai_usage_after_finish,
    sse,
)

KEY = "sk-live-abcdefghijklmnopqrstuvwxyz0123"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "weather?"}]


def _stream_sync(client: openai.OpenAI) -> list[str]:
    stream = client.chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    return [event.id for event in stream]


def test_sync_httpx2_client_records_chunks_and_metadata(fake_provider: FakeProvider, tmp_path: Path) -> None:
    body = openai_usage_after_finish()
    headers = {"x-request-id": "req_123", "openai-processing-ms": "12", "set-cookie": "session=abc"}
    fake_provider.enqueue(FakeResponse(body=body, headers=headers))
    path = tmp_path / "sync.json"
    transport = RecordingTransport(httpx2.HTTPTransport(), path)
    client = openai.OpenAI(
        base_url=fake_provider.url + "/v1", api_key=KEY, http_client=httpx2.Client(transport=transport)
    )
    ids = _stream_sync(client)
    client.close()  # closing the client saves the cassette

    assert ids
    assert set(ids) == {"4f7c2b1e-0000-4000-8000-000000000000"}
    (interaction,) = load_cassette(path).interactions
    assert interaction.chunks == decode_openai_sse(body)
    assert type(interaction.outcome) is Completed
    assert interaction.request.model == "gpt-4o-mini"
    assert interaction.response == ResponseMeta(
        id="4f7c2b1e-0000-4000-8000-000000000000",
        model="deepseek-chat",
        created=1764681305,
        system_fingerprint="fp_test",
        headers={"x-request-id": "req_123", "openai-processing-ms": "12"},
        extras={
            "first": {"obfuscation": "x"},
            **{f"{place}.choice": {"logprobs": None} for place in ("first", "delta", "finish")},
            "usage.usage": {
                "usage": {
                    "prompt_tokens": 417,
                    "completion_tokens": 44,
                    "total_tokens": 461,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 0},
                }
            },
        },
    )
    text = path.read_text()
    assert KEY not in text
    assert "session=abc" not in text
    assert "authorization" not in text.lower()


async def test_async_httpx_client_records_json_answers_and_errors(fake_provider: FakeProvider, tmp_path: Path) -> None:
    completion = {
        "id": "chatcmpl-json",
        "object": "chat.completion",
        "created": 7,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sunny."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        "service_tier": "default",
    }
    error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": 429}}
    fake_provider.enqueue(
        FakeResponse(
            body=json.dumps(error).encode(), status=429, headers={"retry-after": "2"}, content_type="application/json"
        ),
        FakeResponse(body=json.dumps(completion).encode(), content_type="application/json"),
    )
    path = tmp_path / "json.msgpack"
    transport = RecordingTransport(httpx.AsyncHTTPTransport(), path)
    client = openai.AsyncOpenAI(
        base_url=fake_provider.url + "/v1",
        api_key=KEY,
        http_client=httpx.AsyncClient(transport=transport),  # type: ignore[arg-type]
        max_retries=0,
    )
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    answer = await client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    await client.close()

    assert answer.choices[0].message.content == "Sunny."
    failed, succeeded = load_cassette(path).interactions
    assert type(failed.outcome) is Raised
    assert (failed.outcome.code, failed.outcome.status, failed.outcome.retry_after) == ("PROVIDER_HTTP_ERROR", 429, 2.0)
    assert "Rate limit reached" in failed.outcome.message
    assert failed.response is not None
    assert failed.response.headers == {"retry-after": "2"}
    assert [type(c).__name__ for c in succeeded.chunks] == [
        "BlockStart",
        "TextDelta",
        "BlockEnd",
        "UsageChunk",
        "Finish",
    ]
    assert succeeded.response is not None
    assert (succeeded.response.streamed, succeeded.response.model) == (False, "gpt-4o-mini-2024-07-18")
    assert succeeded.response.extras == {
        "completion": {"service_tier": "default"},
        "completion.usage": {"usage": {"completion_tokens": 2, "prompt_tokens": 3, "total_tokens": 5}},
    }
    assert succeeded.attempt == 2  # the same request again: a retry


async def test_reset_mid_stream_is_recorded_as_stream_aborted(fake_provider: FakeProvider, tmp_path: Path) -> None:
    body = deepseek_parallel_tools()
    fake_provider.enqueue(FakeResponse(body=body, reset_after=len(body) // 2))
    path = tmp_path / "reset.json"
    transport = RecordingTransport(httpx2.AsyncHTTPTransport(), path)
    client = openai.AsyncOpenAI(
        base_url=fake_provider.url + "/v1",
        api_key=KEY,
        http_client=httpx2.AsyncClient(transport=transport),
        max_retries=0,
    )
    stream = await client.chat.completions.create(model="deepseek-chat", messages=MESSAGES, stream=True)
    with pytest.raises(openai.APIConnectionError):
        async for _ in stream:
            pass
    await client.close()
    (interaction,) = load_cassette(path).interactions
    assert type(interaction.outcome) is Raised
    assert interaction.outcome.code == "STREAM_ABORTED"
    assert interaction.chunks  # what arrived before the reset was kept


async def test_client_closing_early_is_recorded_as_cut_short(fake_provider: FakeProvider, tmp_path: Path) -> None:
    fake_provider.enqueue(
        FakeResponse(body=sse(chunk({"content": "Hel"}), chunk({"content": "lo"}), done=False), stall=True)
    )
    path = tmp_path / "early.json"
    transport = RecordingTransport(httpx2.AsyncHTTPTransport(), path)
    async with (
        httpx2.AsyncClient(transport=transport) as client,
        client.stream(
            "POST",
            fake_provider.url + "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
        ) as reply,
    ):
        async for _ in reply.aiter_bytes():
            break
    (interaction,) = load_cassette(path).interactions
    assert type(interaction.outcome) is Cancelled


async def test_a_body_closed_early_closes_the_upstream_body_at_once(tmp_path: Path) -> None:
    """Not at garbage collection: an event loop closed before then drops the close (Python 3.13 warns)."""
    closed: list[str] = []

    class Body(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                yield sse(chunk({"content": "Hel"}), done=False)
                yield sse(chunk({"content": "lo"}), chunk({}, finish_reason="stop"))
            finally:
                closed.append("closed")

    provider = httpx2.MockTransport(
        lambda request: httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())
    )
    path = tmp_path / "early.json"
    async with (
        httpx2.AsyncClient(transport=RecordingTransport(provider, path)) as client,
        client.stream(
            "POST", "http://127.0.0.1/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True}
        ) as reply,
    ):
        async for _ in reply.aiter_bytes():
            break
    assert closed == ["closed"]
    (interaction,) = load_cassette(path).interactions
    assert type(interaction.outcome) is Cancelled


class _Open(httpx2.AsyncBaseTransport):
    """A provider that sends ``body`` and then keeps the connection open (the next read waits forever)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_OpenBody(self.body))


class _OpenBody(httpx2.AsyncByteStream):
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.body
        await asyncio.Event().wait()
        yield b""  # pragma: no cover - never reached


@pytest.mark.parametrize(
    ("body", "outcome"),
    [
        (sse(chunk({"content": "Hel"}), chunk({"content": "lo"}), chunk({}, finish_reason="stop")), Completed),
        (sse(chunk({"content": "Hel"}), done=False), Cancelled),
    ],
    ids=["after-the-end", "mid-stream"],
)
async def test_a_body_read_cancelled_is_complete_only_after_the_end(
    body: bytes, outcome: type[Completed | Cancelled], tmp_path: Path
) -> None:
    """A proxy's client that hangs up after ``[DONE]`` cancels the relay's next read: the stream was whole."""
    path = tmp_path / "cancelled.json"
    transport = RecordingTransport(_Open(body), path)
    received = asyncio.Event()

    async def read(client: httpx2.AsyncClient) -> None:
        request = {"model": "m", "messages": MESSAGES, "stream": True}
        async with client.stream("POST", "http://provider.test/v1/chat/completions", json=request) as reply:
            async for _ in reply.aiter_bytes():
                received.set()

    async with httpx2.AsyncClient(transport=transport) as client:
        reading = asyncio.create_task(read(client))
        await received.wait()
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
    (interaction,) = load_cassette(path).interactions
    assert type(interaction.outcome) is outcome
    assert "".join(getattr(c, "text", "") for c in interaction.chunks).startswith("Hel")


class _Paced(httpx2.AsyncBaseTransport):
    """A provider on the test's loop: each event 0.5 s (of loop time) after the previous one."""

    def __init__(self, body: list[bytes]) -> None:
        self.body = body

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_PacedBody(self.body))


class _PacedBody(httpx2.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            await asyncio.sleep(0.5)
            yield piece


@pytest.mark.looptime
async def test_each_event_is_stamped_with_provider_time_on_the_loop_clock(tmp_path: Path) -> None:
    pieces = [
        sse(chunk({"content": "a"}), done=False),
        sse(chunk({"content": "b"}), done=False),
        sse(chunk({}, finish_reason="stop")),
    ]
    path = tmp_path / "timed.json"
    transport = RecordingTransport(_Paced(pieces), path)
    async with (
        httpx2.AsyncClient(transport=transport) as client,
        client.stream(
            "POST", "http://127.0.0.1/v1/chat/completions", json={"model": "m", "messages": MESSAGES, "stream": True}
        ) as reply,
    ):
        async for _ in reply.aiter_bytes():
            await asyncio.sleep(10)  # the consumer's own time is not the provider's
    (interaction,) = load_cassette(path).interactions
    assert [event.t_ns for event in interaction.events] == [
        500_000_000,
        500_000_000,
        1_000_000_000,
        1_500_000_000,
        1_500_000_000,
    ]
    assert interaction.outcome == Completed(t_ns=1_500_000_000)


def test_non_model_requests_pass_through_unrecorded(tmp_path: Path) -> None:
    seen: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.path)
        return httpx2.Response(200, json={"object": "list", "data": []})

    path = tmp_path / "none.json"
    transport = RecordingTransport(httpx2.MockTransport(answer), path)
    with httpx2.Client(transport=transport) as client:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            embeddings = {"model": "e", "input": "x"}
            replies = [client.post("http://127.0.0.1/v1/embeddings", json=embeddings) for _ in range(2)]
        assert [reply.json()["data"] for reply in replies] == [[], []]
        assert [str(warning.message).split(":")[0] for warning in said] == [  # said once per route
            f"POST /v1/embeddings is not recorded into {path}"
        ]
        for route, body in (("chat/completions", {"model": 5}), ("messages", {"model": "c"}), ("responses", [])):
            with pytest.warns(UnrecordedRequestWarning, match="passed through unrecorded"):
                client.post(f"http://127.0.0.1/v1/{route}", json=body)
    assert seen == ["/v1/embeddings", "/v1/embeddings", "/v1/chat/completions", "/v1/messages", "/v1/responses"]
    assert not path.exists()  # nothing was recorded, so nothing was written


def test_key_shaped_header_values_never_reach_the_cassette(tmp_path: Path) -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        body = sse(chunk({"content": "hi"}, finish_reason="stop"))
        return httpx2.Response(200, headers={"content-type": "text/event-stream", "x-request-id": KEY}, content=body)

    path = tmp_path / "secret.json"
    with httpx2.Client(transport=RecordingTransport(httpx2.MockTransport(answer), path)) as client:
        client.post(
            "http://127.0.0.1/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
            headers={"api-key": "plain-credential-value"},
        )
    text = path.read_text()
    assert KEY not in text
    assert "plain-credential-value" not in text
    assert load_cassette(path).interactions[0].response.headers == {"x-request-id": "[REDACTED]"}  # type: ignore[union-attr]


def test_a_cassette_without_response_metadata_still_loads(tmp_path: Path) -> None:
    old = {
        "version": 1,
        "meta": {"adapter": "openai-compat"},
        "interactions": [
            {
                "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                "events": [{"tNs": 1, "chunk": {"type": "finish", "reason": {"kind": "stop"}}}],
                "outcome": {"type": "completed", "tNs": 2},
            }
        ],
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    (interaction,) = load_cassette(path).interactions
    assert interaction.response is None


def test_attempt_n_is_a_repeat_of_the_very_same_call(fake_provider: FakeProvider, tmp_path: Path) -> None:
    """The same messages once streamed, once not: two calls, neither the other's retry (matching ignores how a
    request is delivered, and serves one from the other); asked again as first, it is attempt 2, and show says so."""
    completion = {
        "id": "chatcmpl-json",
        "object": "chat.completion",
        "created": 7,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sunny."}, "finish_reason": "stop"}],
    }
    body = openai_usage_after_finish()
    fake_provider.enqueue(
        FakeResponse(body=body),
        FakeResponse(body=json.dumps(completion).encode(), content_type="application/json"),
        FakeResponse(body=body),
    )
    path = tmp_path / "attempts.msgpack"
    transport = RecordingTransport(httpx2.HTTPTransport(), path)
    client = openai.OpenAI(
        base_url=fake_provider.url + "/v1", api_key=KEY, http_client=httpx2.Client(transport=transport), max_retries=0
    )
    _stream_sync(client)
    client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    _stream_sync(client)
    client.close()

    interactions = load_cassette(path).interactions
    assert len({interaction.request.fingerprint for interaction in interactions}) == 1
    assert [interaction.attempt for interaction in interactions] == [1, 1, 2]
    shown = CliRunner().invoke(app, ["show", str(path)], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert shown.exit_code == 0, shown.output
    rows = [line for line in shown.stdout.splitlines() if "│" in line and "completed" in line]
    assert len(rows) == 3, shown.stdout
    assert ["(attempt 2)" in row for row in rows] == [False, False, True]
