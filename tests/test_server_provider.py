"""The replay server behaves like a provider: no Nagle delays, a client that gives up does not use up the
interaction, misses no SDK retries or misreads, and one outcome-to-wire mapping."""

from __future__ import annotations

import socket

from chunktape import Cassette, Completed, Event, GenerateOptions, Interaction, Message, RecordedRequest
from chunktape.http import ReplayServer
from chunktape.replayer import Timing
from helpers import text_stream

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
