"""How the replay server ends a connection for each fault, on the wire (documented in docs/serve.md): every
disconnect is a close without the chunked body's terminal chunk, what a provider's mid-stream abort looks like
(openai-node reports ``TypeError: terminated``, httpx a ``RemoteProtocolError``); a truncation is a complete HTTP
body that stops before the finish and ``[DONE]``."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from chunktape import Timing, save_cassette
from chunktape.http import ReplayServer
from helpers import cassette_of, interaction_of, recorded_request, text_stream


def _raw(server: ReplayServer) -> tuple[bytes, str]:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}"
    )
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(head.encode() + b"\r\n\r\n" + body)
        data = b""
        try:
            while piece := sock.recv(65536):
                data += piece
        except ConnectionResetError:
            return data, "reset"
    return data, "close"


@pytest.mark.parametrize(
    ("fault", "complete"),
    [
        ("disconnect-before-first-chunk", False),
        ("disconnect-after-first-chunk", False),
        ("disconnect-mid-text", False),
        ("truncate", True),
    ],
)
def test_how_each_fault_ends_the_connection(fault: str, complete: bool, tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    save_cassette(
        cassette_of(
            interaction_of(text_stream("Hello ", "there ", "friend."), request=recorded_request("hi", model="m"))
        ),
        path,
    )
    with ReplayServer(path, faults=[fault], timing=Timing.instant()) as server:
        data, end = _raw(server)
    assert data.startswith(b"HTTP/1.1 200")
    assert end == "close"  # a FIN, never an RST
    assert data.endswith(b"0\r\n\r\n") is complete  # the chunked body's terminal chunk
    assert b"[DONE]" not in data
