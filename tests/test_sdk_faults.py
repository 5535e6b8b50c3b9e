"""The SDK matrix under faults: a 429 once and a disconnect mid-stream, for each SDK x client, from the stand-in
provider (recorded through ``RecordingTransport``), injected by ``ReplayTransport`` and by a ``ReplayServer``:
each face gives the SDK what a real provider would, so its own retry and its own exception are the outcome,
the same in all three. The SDK's retry waits what the 429's ``retry-after-ms`` says (1 ms): nothing is patched.

Anthropic's Messages protocol is checked the same way: its traffic, its retry and its connection error pass
through ``RecordingTransport`` and are recorded, and ``ReplayTransport`` replays them to the SDK as they were;
a request the cassette does not hold is the SDK's connection error caused by ``CASSETTE_MISMATCH``. (The anthropic
SDK rejects httpx clients, so it has no httpx row.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chunktape import Cassette, ErrorCode, LlmError, Raised, Timing, load_cassette, save_cassette
from chunktape.faults import Disconnect, FailFirst, Fault, HttpError
from chunktape.http import RecordingTransport, ReplayServer, ReplayTransport
from fake_provider import FakeProvider, FakeResponse
from sdk_agents import (
    KEY,
    RETRY_AFTER_S,
    SDKS,
    Kind,
    Outcome,
    Sdk,
    cells,
    network,
    one_worker,
    quiet_litellm,
    rate_limited,
    record,
    reset_mid_stream,
    run,
)

OFFLINE = "http://127.0.0.1:9/v1"
pytestmark = pytest.mark.usefixtures(quiet_litellm.__name__)

INJECTED: dict[str, Fault] = {
    "429-once": FailFirst(n=1, fault=HttpError(status=429, retry_after=RETRY_AFTER_S)),
    "disconnect-mid-stream": FailFirst(n=1, fault=Disconnect(after_chunks=2)),
}
"""Each fault as ``ReplayTransport`` and the server inject it (on the first call)."""


def provided(sdk: Sdk, fault: str) -> list[FakeResponse]:
    """The same fault from the stand-in provider: what the SDK gets from a real one."""
    first = sdk.answers[0]()
    if fault == "429-once":
        return [rate_limited(), *(FakeResponse(body=answer()) for answer in sdk.answers)]
    return [reset_mid_stream(first)]


def expected(sdk: Sdk, fault: str) -> Outcome:
    """A 429 once: the SDK's own retry gets the answer. A broken stream: no SDK retries one it has begun to read."""
    if fault == "429-once":
        return sdk.expected
    return Outcome(error=sdk.broken)


FAULT_CELLS = [
    pytest.param(*cell.values, fault, id=f"{cell.id}-{fault}", marks=cell.marks)
    for cell in cells()
    for fault in INJECTED
]


@pytest.mark.parametrize(("name", "kind", "fault"), FAULT_CELLS)
async def test_a_fault_reaches_the_sdk_as_from_a_real_provider(
    name: str, kind: Kind, fault: str, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    sdk = SDKS[name]
    clean = tmp_path / "clean.msgpack"
    await record(sdk, kind, fake_provider, clean)

    fake_provider.enqueue(*provided(sdk, fault))
    live_path = tmp_path / "live.msgpack"
    live = await run(
        sdk, fake_provider.url + "/v1", sdk.client(kind, RecordingTransport(network(sdk, kind), live_path))
    )
    assert live == expected(sdk, fault)
    recorded = load_cassette(live_path).interactions
    assert type(recorded[0].outcome) is Raised
    assert recorded[0].outcome.code == ("PROVIDER_HTTP_ERROR" if fault == "429-once" else "STREAM_ABORTED")

    replayed_as_recorded = await run(sdk, OFFLINE, sdk.client(kind, ReplayTransport(live_path)))
    injected = ReplayTransport(clean, faults=[INJECTED[fault]])
    in_process = await run(sdk, OFFLINE, sdk.client(kind, injected))
    assert injected.injected[0] is not None
    with ReplayServer(clean, timing=Timing.instant(), faults=[INJECTED[fault]]) as server:
        served = await run(sdk, server.url + "/v1", sdk.client(kind))
    assert replayed_as_recorded == in_process == served == live


# -- anthropic, at the transport level ------------------------------------------------------------------------

MESSAGE_EVENTS: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 3, "output_tokens": 0},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Bon"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "jour"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    {"type": "message_stop"},
]
MESSAGE_STREAM = b"".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in MESSAGE_EVENTS)


CONNECTION_BROKEN = "connection broken"
"""What the anthropic agent reports for a stream broken mid-way, whichever class the SDK release raises for it."""


async def anthropic_agent(base_url: str, client: httpx2.AsyncClient, max_retries: int = 2) -> Outcome:
    import anthropic

    sdk = anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, http_client=client, max_retries=max_retries)
    try:
        async with sdk.messages.stream(
            model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            return Outcome(text="".join([text async for text in stream.text_stream]))
    except (anthropic.APIConnectionError, httpx2.TransportError):
        # A broken stream: anthropic 2.x wraps the transport's error in its own connection error, earlier releases
        # passed it on as it was. What the agent relies on is the family: a connection failure, not an API answer.
        return Outcome(error=CONNECTION_BROKEN)
    except Exception as error:
        return Outcome(error=type(error).__name__)
    finally:
        await client.aclose()


def anthropic_client(how: str, transport: Any) -> httpx2.AsyncClient:
    """The two ways anthropic's users hand it a transport: its own default client, or an httpx2 one."""
    import anthropic

    if how == "DefaultAsyncHttpxClient":  # refuses anything with an httpx class in its MRO
        return anthropic.DefaultAsyncHttpxClient(transport=transport)
    return httpx2.AsyncClient(transport=transport)


@one_worker("anthropic")
@pytest.mark.filterwarnings("ignore:POST /v1/messages is not recorded")  # said once, as the recorder does
@pytest.mark.parametrize("how", ["DefaultAsyncHttpxClient", "httpx2.AsyncClient"])
@pytest.mark.parametrize("fault", ["none", "429-once", "disconnect-mid-stream"])
async def test_anthropic_traffic_retries_and_errors_pass_through_the_recorder(
    fault: str, how: str, fake_provider: FakeProvider, tmp_path: Path
) -> None:
    responses = {
        "none": [FakeResponse(body=MESSAGE_STREAM)],
        "429-once": [rate_limited(), FakeResponse(body=MESSAGE_STREAM)],
        "disconnect-mid-stream": [reset_mid_stream(MESSAGE_STREAM)],
    }[fault]
    fake_provider.enqueue(*responses)
    path = tmp_path / "anthropic.msgpack"
    transport = RecordingTransport(httpx2.AsyncHTTPTransport(), path)
    outcome = await anthropic_agent(fake_provider.url, anthropic_client(how, transport))
    assert outcome == (
        Outcome(error=CONNECTION_BROKEN) if fault == "disconnect-mid-stream" else Outcome(text="Bonjour")
    )
    assert [seen.path for seen in fake_provider.requests] == ["/v1/messages"] * len(responses)
    recorded = load_cassette(path).interactions
    assert len(recorded) == len(responses)
    expected_codes = {"none": [], "429-once": ["PROVIDER_HTTP_ERROR"], "disconnect-mid-stream": ["STREAM_ABORTED"]}
    assert [i.outcome.code for i in recorded if type(i.outcome) is Raised] == expected_codes[fault]
    replayed = await anthropic_agent(OFFLINE, anthropic_client(how, ReplayTransport(path)))
    assert replayed == outcome  # the same text, the same retry, the same connection error, offline


@one_worker("anthropic")
@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_anthropic_replay_of_an_unrecorded_request_is_a_mismatch(sync: bool, tmp_path: Path) -> None:
    """anthropic wraps what its transport raises in its connection error; the cassette's miss is its cause.
    Its own default clients take the transport (they refuse any object with an httpx class in its MRO)."""
    import anthropic

    empty = tmp_path / "empty.msgpack"
    save_cassette(Cassette(interactions=[]), empty)
    question: Any = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.APIConnectionError) as raised:
        if sync:
            client = anthropic.DefaultHttpxClient(transport=ReplayTransport(empty))
            anthropic.Anthropic(base_url=OFFLINE, api_key=KEY, max_retries=0, http_client=client).messages.create(
                **question
            )
        else:
            client_async = anthropic.DefaultAsyncHttpxClient(transport=ReplayTransport(empty))
            sdk = anthropic.AsyncAnthropic(base_url=OFFLINE, api_key=KEY, max_retries=0, http_client=client_async)
            await sdk.messages.create(**question)
    refused = raised.value.__cause__
    assert isinstance(refused, LlmError)
    assert refused.code is ErrorCode.CASSETTE_MISMATCH
    assert "claude-x" in refused.message
