"""``OpenAICompatAdapter`` runs on httpx2 by default and on any httpx2 or httpx client a user hands it."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import httpx
import httpx2
import pytest

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import GenerateOptions, Message, StreamChunk, TextDelta
from chunktape.providers import OpenAICompatAdapter
from fake_provider import FakeProvider, FakeResponse, chunk, sse

ClientKind = Literal["default", "httpx2", "httpx"]
KINDS: list[ClientKind] = ["default", "httpx2", "httpx"]
OPTIONS = GenerateOptions(model="m", messages=[Message(role="user", content="hi")])


@asynccontextmanager
async def adapter_with(kind: ClientKind, url: str, *, read_timeout: float = 60.0) -> AsyncIterator[OpenAICompatAdapter]:
    """An adapter on the given kind of client; a client we made is closed here, the adapter closes its own."""
    if kind == "default":
        adapter = OpenAICompatAdapter(url, api_key="sk-test-0123456789", timeout=read_timeout)
        try:
            yield adapter
        finally:
            await adapter.aclose()
        return
    client: httpx2.AsyncClient | httpx.AsyncClient = (httpx2.AsyncClient if kind == "httpx2" else httpx.AsyncClient)(
        timeout=read_timeout
    )
    async with client:
        adapter = OpenAICompatAdapter(url, api_key="sk-test-0123456789", client=client)
        yield adapter
        await adapter.aclose()
        assert not client.is_closed  # a client handed in is the user's to close


async def text_of(adapter: OpenAICompatAdapter) -> str:
    chunks: list[StreamChunk] = [c async for c in adapter.stream(OPTIONS)]
    return "".join(c.text for c in chunks if isinstance(c, TextDelta))


async def test_the_default_client_is_httpx2() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with adapter_with("default", f"http://127.0.0.1:{port}") as adapter:
        with pytest.raises(LlmError) as info:
            await text_of(adapter)
    assert isinstance(info.value.cause, httpx2.ConnectError)  # the error came through httpx2, not httpx


@pytest.mark.parametrize("kind", KINDS)
async def test_streams_on_every_kind_of_client(fake_provider: FakeProvider, kind: ClientKind) -> None:
    fake_provider.enqueue(
        FakeResponse(body=sse(chunk({"content": "hel"}), chunk({"content": "lo"}), chunk({}, finish_reason="stop")))
    )
    async with adapter_with(kind, fake_provider.url) as adapter:
        assert await text_of(adapter) == "hello"
    assert fake_provider.requests[-1].headers["authorization"] == "Bearer sk-test-0123456789"


@pytest.mark.parametrize("kind", KINDS)
async def test_errors_map_the_same_on_every_kind_of_client(fake_provider: FakeProvider, kind: ClientKind) -> None:
    body = sse(chunk({"content": "a" * 200}), chunk({"content": "b" * 200}), chunk({}, finish_reason="stop"))
    fake_provider.enqueue(
        FakeResponse(status=429, body=b'{"error": {"message": "slow down"}}', headers={"retry-after": "2"}),
        FakeResponse(body=body, reset_after=len(body) // 2),
        FakeResponse(body=body, headers_delay=5.0),
    )
    async with adapter_with(kind, fake_provider.url, read_timeout=0.25) as adapter:  # the third never answers
        with pytest.raises(LlmError) as limited:
            await text_of(adapter)
        assert (limited.value.code, limited.value.status, limited.value.retry_after) == (
            ErrorCode.PROVIDER_HTTP_ERROR,
            429,
            2.0,
        )
        with pytest.raises(LlmError) as reset:
            await text_of(adapter)
        assert reset.value.code is ErrorCode.STREAM_ABORTED
        with pytest.raises(LlmError) as slow:
            await text_of(adapter)
        assert slow.value.code is ErrorCode.TIMEOUT


@pytest.mark.parametrize("kind", KINDS)
async def test_connection_refused_is_stream_aborted_on_every_kind_of_client(kind: ClientKind) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with adapter_with(kind, f"http://127.0.0.1:{port}") as adapter:
        with pytest.raises(LlmError) as info:
            await text_of(adapter)
    assert info.value.code is ErrorCode.STREAM_ABORTED
    assert f"could not connect to http://127.0.0.1:{port}/chat/completions" in info.value.message
