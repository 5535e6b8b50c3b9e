"""The SDK matrix's agents: one small agent per SDK or framework, written as its users write it, and the
loopback stand-in provider's answers they get.

Every agent takes the base URL and an httpx2 or httpx client (the ``Kind``) and returns an ``Outcome``: the
text and tool calls it saw, or the name of the exception the SDK raised, so a run against the stand-in
provider and a replay can be compared as values. The SDKs are imported inside the agents, so the rest of the
suite does not pay for importing them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import httpx2
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from chunktape import Completed, load_cassette
from chunktape.http import RecordingTransport
from fake_provider import FakeProvider, FakeResponse, chunk, sse, tool_delta

Kind = Literal["httpx2", "httpx"]
KINDS: tuple[Kind, ...] = ("httpx2", "httpx")
KEY = "sk-matrix-abcdefghijklmnopqrstuvwxyz0123"
MODEL = "gpt-4o-mini"
ANSWERED = "gpt-4o-mini-2024-07-18"
RETRY_AFTER_S = 0.001
"""The stand-in's and the injected 429's ``Retry-After``: openai's own retry reads ``retry-after-ms`` (1 ms)
rather than backing off for half a second; nothing is patched."""


@dataclass(frozen=True)
class Outcome:
    """What an agent saw: its text and tool calls ``(name, arguments)``, or the SDK's exception (its class name)."""

    text: str = ""
    calls: tuple[tuple[str, str], ...] = ()
    error: str | None = None


# -- the stand-in provider's answers ----------------------------------------------------------------------


def text_and_tool_call() -> bytes:
    """Text, then a tool call whose arguments arrive in pieces, then usage: what the agents ask for."""
    return sse(
        chunk({"role": "assistant", "content": ""}, model=ANSWERED),
        chunk({"content": "Let me "}, model=ANSWERED),
        chunk({"content": "check."}, model=ANSWERED),
        chunk(tool_delta(0, "", id="call_paris", name="get_weather"), model=ANSWERED),
        chunk(tool_delta(0, '{"city": '), model=ANSWERED),
        chunk(tool_delta(0, '"Paris"}'), model=ANSWERED),
        chunk({}, finish_reason="tool_calls", model=ANSWERED),
        chunk(choices=False, usage={"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}, model=ANSWERED),
    )


def tool_call_only() -> bytes:
    """A tool call and no text (pydantic-ai's ``run_stream`` would take text before it for the output)."""
    return sse(
        chunk({"role": "assistant", "content": None}, model=ANSWERED),
        chunk(tool_delta(0, "", id="call_paris", name="get_weather"), model=ANSWERED),
        chunk(tool_delta(0, '{"city":"Paris"}'), model=ANSWERED),
        chunk({}, finish_reason="tool_calls", model=ANSWERED),
    )


def text_only(text: str = "It is sunny in Paris.") -> bytes:
    return sse(
        chunk({"role": "assistant", "content": ""}, model=ANSWERED),
        chunk({"content": text[:9]}, model=ANSWERED),
        chunk({"content": text[9:]}, model=ANSWERED),
        chunk({}, finish_reason="stop", model=ANSWERED),
        chunk(choices=False, usage={"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26}, model=ANSWERED),
    )


TOOL_ANSWER = Outcome(text="Let me check.", calls=(("get_weather", '{"city": "Paris"}'),))
"""What every agent but pydantic-ai's returns: one streamed answer."""
AGENT_ANSWER = Outcome(text="It is sunny in Paris.", calls=(("get_weather", '{"city":"Paris"}'),))
"""What the pydantic-ai agent returns: it runs the tool and asks again, so it makes two calls."""


def rate_limited() -> FakeResponse:
    """A provider's 429 with OpenAI's JSON error body and both retry headers."""
    body = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
    headers = {"retry-after": "0", "retry-after-ms": str(round(RETRY_AFTER_S * 1000))}
    return FakeResponse(body=json.dumps(body).encode(), status=429, headers=headers, content_type="application/json")


def reset_mid_stream(body: bytes) -> FakeResponse:
    """The answer's first two events, then the connection drops."""
    first_events = body.index(b"\n\n", body.index(b"\n\n") + 2) + 2
    return FakeResponse(body=body, reset_after=first_events)


# -- the agents ---------------------------------------------------------------------------------------------

Agent = Callable[[str, Any], Awaitable[Outcome]]
"""``agent(base_url, client)``: ``client`` is an httpx2 or httpx client, sync for the sync agents."""

WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
QUESTION = "What is the weather in Paris?"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": QUESTION}]


def _fold(text: list[str], calls: dict[int, list[str]], names: dict[int, str]) -> Outcome:
    return Outcome(text="".join(text), calls=tuple((names[index], "".join(calls[index])) for index in sorted(calls)))


def _chunk_events(events: Any, text: list[str], calls: dict[int, list[str]], names: dict[int, str]) -> None:
    for event in events:
        for choice in event.choices:
            text.append(choice.delta.content or "")
            for call in choice.delta.tool_calls or ():
                calls.setdefault(call.index, [])
                if call.function is not None:
                    if call.function.name:
                        names[call.index] = call.function.name
                    calls[call.index].append(call.function.arguments or "")


async def openai_async(base_url: str, client: Any) -> Outcome:
    import openai

    sdk = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, http_client=client)
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    stream = await sdk.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=[WEATHER_TOOL],
        stream=True,
        stream_options={"include_usage": True},
    )
    async for event in stream:
        _chunk_events([event], text, calls, names)
    return _fold(text, calls, names)


async def openai_sync(base_url: str, client: Any) -> Outcome:
    """The sync client, called from the test's thread as a sync agent would (it blocks; nothing else runs)."""
    import openai

    sdk = openai.OpenAI(base_url=base_url, api_key=KEY, http_client=client)
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        tools=[WEATHER_TOOL],
        stream=True,
    )
    _chunk_events(stream, text, calls, names)
    return _fold(text, calls, names)


async def pydantic_ai(base_url: str, client: Any) -> Outcome:
    """An agent with a tool: the model's tool call runs it, and the agent streams the model's second answer."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key=KEY, http_client=client)
    agent = Agent(OpenAIChatModel(MODEL, provider=provider))

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    async with agent.run_stream(QUESTION) as result:
        text = await result.get_output()
        calls = tuple(
            (part.tool_name, part.args_as_json_str())
            for message in result.all_messages()
            for part in message.parts
            if isinstance(part, ToolCallPart)
        )
    return Outcome(text=text, calls=calls)


async def langchain_openai(base_url: str, client: Any) -> Outcome:
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model=MODEL, base_url=base_url, api_key=KEY, http_async_client=client)  # type: ignore[arg-type]
    text = ""
    pieces: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    async for piece in model.bind_tools([dict(WEATHER_TOOL)]).astream(QUESTION):
        text += str(piece.content)
        for call in getattr(piece, "tool_call_chunks", ()):
            index = call["index"] or 0
            pieces.setdefault(index, []).append(call["args"] or "")
            if call["name"]:
                names[index] = call["name"]
    return _fold([text], pieces, names)


async def litellm(base_url: str, client: Any) -> Outcome:
    """litellm on the openai provider, handed the openai client (its way of taking an HTTP client)."""
    import litellm as litellm_sdk
    import openai

    sdk = openai.AsyncOpenAI(base_url=base_url, api_key=KEY, http_client=client)
    stream = await litellm_sdk.acompletion(
        model=f"openai/{MODEL}",
        messages=MESSAGES,
        tools=[WEATHER_TOOL],
        stream=True,
        client=sdk,
        api_base=base_url,
        api_key=KEY,
    )
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    async for event in stream:
        _chunk_events([event], text, calls, names)
    return _fold(text, calls, names)


@dataclass(frozen=True)
class Sdk:
    """One row of the matrix: the agent, whether its client is sync, the answers it is given and returns."""

    agent: Agent
    sync: bool = False
    answers: tuple[Callable[[], bytes], ...] = (text_and_tool_call,)
    expected: Outcome = TOOL_ANSWER
    broken: str = "APIConnectionError"
    """The exception a stream broken mid-way raises: the SDK's connection error, or its framework's wrapper."""

    def client(self, kind: Kind, transport: Any = None) -> Any:
        """A client of ``kind`` (sync or async as the agent wants) on ``transport`` (default: the network)."""
        library: Any = httpx2 if kind == "httpx2" else httpx
        cls = library.Client if self.sync else library.AsyncClient
        return cls(transport=transport) if transport is not None else cls()


SDKS = {
    "openai": Sdk(openai_async),
    "openai-sync": Sdk(openai_sync, sync=True),
    "pydantic-ai": Sdk(
        pydantic_ai, answers=(tool_call_only, text_only), expected=AGENT_ANSWER, broken="ModelConnectionError"
    ),
    "langchain-openai": Sdk(langchain_openai, broken="OpenAIConnectionError"),
    "litellm": Sdk(litellm, broken="MidStreamFallbackError"),
}


def one_worker(sdk: str) -> pytest.MarkDecorator:
    """Runs every test of a slow-to-import SDK on one xdist worker (the suite runs ``--dist loadgroup``), so only
    that worker pays for the import (litellm ~5 s, anthropic ~3 s, langchain ~2 s, pydantic-ai ~1.5 s)."""
    return pytest.mark.xdist_group(sdk)


ONE_WORKER = ("pydantic-ai", "langchain-openai", "litellm")
"""The matrix's SDKs marked ``one_worker``: openai is imported by the suite's conftest anyway."""


LEGACY_HTTPX = pytest.mark.filterwarnings(r"ignore:`httpx.AsyncClient` support for .* is deprecated:UserWarning")
"""pydantic-ai still takes an httpx client, and says it will stop: its own warning, not chunktape's."""


def cells(names: Sequence[str] = tuple(SDKS)) -> list[Any]:
    """The matrix's rows ``(sdk, kind)``, with ids like ``openai-httpx2``."""
    return [
        pytest.param(
            name,
            kind,
            id=f"{name}-{kind}",
            marks=[*([LEGACY_HTTPX] if kind == "httpx" else []), *([one_worker(name)] if name in ONE_WORKER else [])],
        )
        for name in names
        for kind in KINDS
    ]


@pytest.fixture
def quiet_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm fetches a model cost map from the network and sends telemetry unless told not to."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    monkeypatch.setenv("LITELLM_TELEMETRY", "False")


def network(sdk: Sdk, kind: Kind) -> Any:
    """The real transport a recording goes through, of the client's library and kind."""
    library: Any = httpx2 if kind == "httpx2" else httpx
    return library.HTTPTransport() if sdk.sync else library.AsyncHTTPTransport()


async def record(sdk: Sdk, kind: Kind, fake_provider: FakeProvider, path: Path) -> None:
    """The agent against the stand-in provider, recorded; checks what the SDK saw and what was written."""
    fake_provider.enqueue(*(FakeResponse(body=answer(), headers={"x-request-id": "req_1"}) for answer in sdk.answers))
    transport = RecordingTransport(network(sdk, kind), path)
    assert await run(sdk, fake_provider.url + "/v1", sdk.client(kind, transport)) == sdk.expected
    cassette = load_cassette(path)
    assert len(cassette.interactions) == len(sdk.answers)
    assert all(type(interaction.outcome) is Completed for interaction in cassette.interactions)
    assert KEY.encode() not in await asyncio.to_thread(path.read_bytes)


async def run(sdk: Sdk, base_url: str, client: Any) -> Outcome:
    """The agent's outcome, an SDK exception included; the client is closed afterwards."""
    try:
        return await sdk.agent(base_url, client)
    except Exception as error:  # the SDK's exception is the outcome compared
        from chunktape import LlmError

        if isinstance(error, LlmError):
            raise
        return Outcome(error=type(error).__name__)
    finally:
        if sdk.sync:
            client.close()
        else:
            await client.aclose()
