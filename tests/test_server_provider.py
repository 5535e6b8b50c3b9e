"""The replay server behaves like a provider: no Nagle delays, a client that gives up does not use up the
interaction, misses no SDK retries or misreads, and one outcome-to-wire mapping."""

from __future__ import annotations

import socket

import httpx
import pytest

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
)
from chunktape.http import ReplayServer, render_sse
from chunktape.replayer import Timing
from chunktape.wire.openai_chat import options_to_openai_request
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
