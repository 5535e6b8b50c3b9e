"""``FaultTransport`` over both libraries: the same fault gives the same outcome whether the client and the
wrapped transport are httpx2's (openai 3.x's and anthropic's default) or httpx's; anthropic's own default client
takes it; a sync client is told what to use instead."""

from __future__ import annotations

from types import ModuleType

import httpx
import httpx2
import openai
import pytest

from chunktape import ErrorCode, GenerateOptions, Message
from chunktape.faults import Disconnect, FailFirst, Fault, HttpError, Truncate
from chunktape.http import FaultTransport
from chunktape.providers import OpenAICompatAdapter
from fake_provider import FakeProvider, FakeResponse, deepseek_parallel_tools
from helpers import drain
from sdk_agents import one_worker

OPTIONS = GenerateOptions(model="deepseek-chat", messages=[Message(role="user", content="weather in Beijing?")])
LIBRARIES = [pytest.param(httpx2, id="httpx2"), pytest.param(httpx, id="httpx")]
FAULTS: dict[str, tuple[Fault | None, ErrorCode | None]] = {
    "none": (None, None),
    "http-429": (HttpError(status=429), ErrorCode.PROVIDER_HTTP_ERROR),
    "disconnect": (Disconnect(after_chunks=2), ErrorCode.STREAM_ABORTED),
    "truncate": (Truncate(after_chunks=2), ErrorCode.STREAM_ABORTED),
}


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("name", list(FAULTS))
async def test_a_fault_gives_the_adapter_the_same_outcome_over_either_library(
    fake_provider: FakeProvider, library: ModuleType, name: str
) -> None:
    fault, code = FAULTS[name]
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    transport = FaultTransport(library.AsyncHTTPTransport(), [fault] if fault is not None else [])
    async with library.AsyncClient(transport=transport) as client:
        chunks, error = await drain(
            OpenAICompatAdapter(fake_provider.url, api_key="sk-test", client=client).stream(OPTIONS), validate=True
        )
    assert (error.code if error is not None else None) == code
    assert transport.injected == [None if fault is None else fault.fault_id]
    if name in ("disconnect", "truncate"):
        assert 0 < len(chunks) <= 3  # a valid prefix: the role event is not counted, two content chunks pass


def openai_over(provider: FakeProvider, transport: FaultTransport) -> openai.AsyncOpenAI:
    client = httpx2.AsyncClient(transport=transport)
    return openai.AsyncOpenAI(base_url=provider.url, api_key="sk-test", max_retries=0, http_client=client)


async def ask(sdk: openai.AsyncOpenAI) -> int:
    """Streams one answer; the number of events read."""
    stream = await sdk.chat.completions.create(
        model="deepseek-chat", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    return len([event async for event in stream])


async def test_openai_on_its_default_httpx2_client_gets_its_own_errors(fake_provider: FakeProvider) -> None:
    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    sdk = openai_over(
        fake_provider,
        FaultTransport(httpx2.AsyncHTTPTransport(), [FailFirst(n=1, fault=HttpError(429))]),
    )
    with pytest.raises(openai.RateLimitError):
        await ask(sdk)
    assert await ask(sdk) > 0  # the fault fired once; the second call reaches the provider
    await sdk.close()

    fake_provider.enqueue(FakeResponse(body=deepseek_parallel_tools()))
    sdk = openai_over(fake_provider, FaultTransport(httpx2.AsyncHTTPTransport(), [Disconnect(after_chunks=1)]))
    with pytest.raises(openai.APIConnectionError):
        await ask(sdk)
    await sdk.close()


@one_worker("anthropic")
async def test_anthropics_default_client_takes_the_transport() -> None:
    """anthropic refuses any transport with an httpx class in its MRO; an injected 429 never reaches the network."""
    import anthropic

    transport = FaultTransport(httpx2.AsyncHTTPTransport(), [HttpError(status=429)])
    sdk = anthropic.AsyncAnthropic(
        base_url="http://127.0.0.1:9",
        api_key="sk-test",
        max_retries=0,
        http_client=anthropic.DefaultAsyncHttpxClient(transport=transport),
    )
    with pytest.raises(anthropic.RateLimitError):
        await sdk.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert transport.injected == ["http-429"]
    await sdk.close()


@pytest.mark.parametrize("library", LIBRARIES)
def test_a_sync_client_is_told_what_to_use(library: ModuleType) -> None:
    transport = FaultTransport(library.AsyncHTTPTransport(), ["http-429"])
    refused = pytest.raises(TypeError, match=r"FaultTransport is an async transport.*ReplayTransport")
    with library.Client(transport=transport) as client, refused:
        client.post("http://127.0.0.1:9/v1/chat/completions", json={})
