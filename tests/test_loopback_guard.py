"""The suite never reaches a host but loopback: conftest refuses any other connection, and says so."""

from __future__ import annotations

import socket

import pytest


@pytest.mark.parametrize("address", [("192.0.2.7", 80), ("api.deepseek.com", 443)])
def test_a_connection_to_an_outside_host_fails_the_test(address: tuple[str, int]) -> None:
    """TEST-NET-1 (never routed) and a provider's name (never resolved: the guard refuses before any lookup)."""
    with socket.socket() as outside, pytest.raises(AssertionError, match="only loopback hosts are allowed"):
        outside.connect(address)


def test_loopback_is_let_through() -> None:
    with socket.socket() as listener, socket.socket() as client:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client.connect(listener.getsockname())
