"""The replay server behaves like a provider: no Nagle delays, a client that gives up does not use up the
interaction, misses no SDK retries or misreads, and one outcome-to-wire mapping."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from typer.testing import CliRunner

from chunktape import (
    Cancelled,
    Cassette,
    Completed,
    ErrorCode,
    Event,
    GenerateOptions,
    Interaction,
    Message,
    Outcome,
    Raised,
    RecordedRequest,
    save_cassette,
)
from chunktape._replayer import Timing
from chunktape._replayer.options import ReplayOptions
from chunktape.cli import app
from chunktape.faults import FailFirst, Stall
from chunktape.http import ReplayServer, render_sse
from chunktape.http._server.app import MISS_STATUS
from chunktape.wire._openai_chat import options_to_openai_request
from helpers import text_stream
from test_render_sse import parse_with_adapter

INSTANT = Timing.instant()
OPTIONS = GenerateOptions(model="m", messages=[Message(role="user", content="hi")])


def one_reply(*pieces: str) -> Cassette:
    chunks = text_stream(*pieces)
    interaction = Interaction(
        request=RecordedRequest.from_options(OPTIONS),
        events=[Event(t_ns=position, chunk=chunk) for position, chunk in enumerate(chunks)],
        outcome=Completed(t_ns=len(chunks)),
    )
    return Cassette(interactions=[interaction])


# -- no Nagle delays --------------------------------------------------------------------------------


def test_accepted_connections_send_without_nagle_delays() -> None:
    with (
        ReplayServer(one_reply("Hi"), timing=INSTANT) as server,
        socket.create_connection((server.host, server.port)) as client,
    ):
        client.sendall(b"POST /reset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        assert client.recv(65536).startswith(b"HTTP/1.1 200")  # accepted, answered, kept alive
        connections = list(server._server.server_state.connections)
        assert len(connections) == 1
        accepted = connections[0].transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


# -- one outcome-to-wire mapping ------------------------------------------------------------------------

_PREFIX = text_stream("Hel", "lo")[:3]
_OUTCOMES: dict[str, Outcome] = {
    "completed": Completed(t_ns=9),
    "provider-error": Raised(t_ns=9, code="PROVIDER_HTTP_ERROR", message="Token limit reached", status=400),
    "aborted": Raised(t_ns=9, code="STREAM_ABORTED", message="peer closed the connection"),
    "timeout": Raised(t_ns=9, code="TIMEOUT", message="no chunk for 30 s"),
    "invalid": Raised(t_ns=9, code="INVALID_RESPONSE", message="garbage"),
    "cut-short": Cancelled(t_ns=9),
}


def recorded(outcome: Outcome) -> Interaction:
    chunks = text_stream("Hel", "lo") if isinstance(outcome, Completed) else _PREFIX
    return Interaction(
        request=RecordedRequest.from_options(OPTIONS),
        events=[Event(t_ns=position, chunk=chunk) for position, chunk in enumerate(chunks)],
        outcome=outcome,
    )


async def _raw_body(url: str) -> tuple[bytes, bool]:
    """The body the server sends to a streamed request, and whether the connection broke before its end."""
    body = {**options_to_openai_request(OPTIONS), "stream": True, "stream_options": {"include_usage": True}}
    received = b""
    async with httpx.AsyncClient() as client, client.stream("POST", url + "/v1/chat/completions", json=body) as reply:
        try:
            async for piece in reply.aiter_raw():
                received += piece
        except httpx.TransportError:
            return received, True
    return received, False


@pytest.mark.parametrize("name", list(_OUTCOMES))
async def test_the_server_and_render_sse_end_a_recorded_stream_the_same_way(name: str) -> None:
    interaction = recorded(_OUTCOMES[name])
    async with ReplayServer(Cassette(interactions=[interaction]), timing=INSTANT) as server:
        body, broke = await _raw_body(server.url)
    assert body == render_sse(interaction)
    assert broke is (name in ("aborted", "timeout"))


@pytest.mark.parametrize("name", ["aborted", "timeout"])
async def test_a_recorded_broken_connection_is_no_in_band_error_event(name: str) -> None:
    body = render_sse(recorded(_OUTCOMES[name]))
    assert b'"error"' not in body
    assert b"[DONE]" not in body
    chunks, error = await parse_with_adapter(body)
    assert chunks == _PREFIX
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED


# -- a cassette miss is no provider error ---------------------------------------------------------------


def _miss_cassette() -> Cassette:
    return one_reply("Hi")


def test_a_miss_is_not_retried_by_the_openai_sdk_and_says_so_in_the_servers_knobs() -> None:
    with (
        ReplayServer(_miss_cassette(), timing=INSTANT) as server,
        openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=2) as client,
    ):
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "something else"}])
        assert server.playback.calls == 1  # not retried
    response = info.value.response
    assert response.status_code == MISS_STATUS
    assert response.headers["x-chunktape-error"] == "CASSETTE_MISMATCH"
    assert response.headers["x-should-retry"] == "false"
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("chunktape_cassette_miss", "CASSETTE_MISMATCH")
    assert error["message"].startswith("[CASSETTE_MISMATCH] no recorded interaction")
    assert "--match-on" in error["message"]
    for foreign in ("--tape-mode", "match_on", "allow_repeats"):
        assert foreign not in error["message"]


def test_an_interaction_played_already_is_not_retried_and_names_reset_and_repeat() -> None:
    with (
        ReplayServer(_miss_cassette(), timing=INSTANT) as server,
        openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=2) as client,
    ):
        messages: list[Any] = [{"role": "user", "content": "hi"}]
        first = client.chat.completions.create(model="m", messages=messages)
        assert first.choices[0].message.content == "Hi"
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="m", messages=messages)
        assert server.playback.calls == 2  # the SDK took the miss as final: no retry
    response = info.value.response
    assert response.status_code == MISS_STATUS
    assert response.headers["x-chunktape-error"] == "CASSETTE_EXHAUSTED"
    message = response.json()["error"]["message"]
    assert "POST /reset" in message
    assert "--repeat" in message
    for foreign in ("--tape-mode", "allow_repeats"):
        assert foreign not in message


def test_serve_match_on_reaches_the_server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "one.json"
    save_cassette(_miss_cassette(), path)
    seen: dict[str, Any] = {}
    monkeypatch.setattr("chunktape.http.serve", lambda *args, **kwargs: seen.update(kwargs))  # imported when run
    result = CliRunner().invoke(app, ["serve", str(path), "--match-on", "model,last_message"])
    assert result.exit_code == 0, result.output
    assert seen["replay_options"].match_on == ReplayOptions(match_on="model,last_message").match_on
    bad = CliRunner().invoke(app, ["serve", str(path), "--match-on", "model,nope"])
    assert bad.exit_code != 0
    lines = bad.output.strip().splitlines()
    assert len(lines) == 1
    assert "unknown matcher 'nope'" in lines[0]


# -- a client that gives up does not use up the interaction -------------------------------------------

_STALL_ONCE = FailFirst(n=1, fault=Stall(after_chunks=0, seconds=10))
"""A provider that goes silent before the first byte, once: far longer than the SDK's timeout (``_SDK_TIMEOUT``)."""

_SDK_TIMEOUT = 0.5
"""Short, so the stall costs the test little; a loopback reply (its first byte) arrives well within it: some 50 ms
for the server's first replay in a cold process on a loaded machine, a few ms once warm."""


def test_openai_sdk_retries_a_stall_before_the_first_byte_and_gets_the_reply() -> None:
    with (
        ReplayServer(one_reply("Hel", "lo"), timing=INSTANT, faults=[_STALL_ONCE]) as server,
        openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", timeout=_SDK_TIMEOUT, max_retries=2) as client,
    ):
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "Hello"
        assert server.playback.injected == ["stall-10s-after-0-chunks", None]
        assert server.playback.play_counts == [1]


async def test_async_openai_sdk_retries_a_stall_before_the_first_byte_and_streams_the_reply() -> None:
    async with (
        ReplayServer(one_reply("Hel", "lo"), timing=INSTANT, faults=[_STALL_ONCE]) as server,
        openai.AsyncOpenAI(
            base_url=server.url + "/v1", api_key="sk-test", timeout=_SDK_TIMEOUT, max_retries=2
        ) as client,
    ):
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
        assert text == "Hello"
        assert server.playback.calls == 2
        assert server.playback.play_counts == [1]


async def _released(server: ReplayServer, counts: list[int]) -> None:
    """Waits (in bounded steps, asserting nothing about time) until the server saw the client leave."""
    for _ in range(500):
        if server.playback.play_counts == counts:
            return
        await asyncio.sleep(0.01)
    assert server.playback.play_counts == counts


async def test_a_client_that_leaves_mid_stream_leaves_the_interaction_and_a_recorded_retry_plays_in_order() -> None:
    rate_limited = Interaction(
        request=RecordedRequest.from_options(OPTIONS),
        events=[],
        outcome=Raised(t_ns=1, code="PROVIDER_HTTP_ERROR", message="slow down", status=429, retry_after=0.01),
    )
    cassette = Cassette(interactions=[rate_limited, *one_reply("Hel", "lo").interactions])
    body = {**options_to_openai_request(OPTIONS), "stream": True}
    url = "/v1/chat/completions"
    async with (
        # 100 ms between events: the client that leaves after the first has the other 0.5 s of the stream to do so.
        ReplayServer(cassette, timing=Timing.fixed(0.0, 0.1)) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        assert (await client.post(url, json=body)).status_code == 429  # the recorded 429 is played
        async with client.stream("POST", url, json=body) as leaving:
            assert leaving.status_code == 200
            await anext(leaving.aiter_raw())  # the first event, then the client leaves
        await _released(server, [1, 0])
        async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0) as sdk:
            reply = await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
            assert reply.choices[0].message.content == "Hello"
        assert server.playback.play_counts == [1, 1]
