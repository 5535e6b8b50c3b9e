"""The socket a replay server or a recording proxy listens on: loopback only unless asked, named plainly
when it cannot be had (a bad or busy port, a name that resolves only elsewhere)."""

from __future__ import annotations

import errno
import ipaddress
import socket
import sys
from collections.abc import Callable, Sequence
from typing import TypeAlias

from chunktape._errors import ErrorCode, LlmError

__all__ = ["IPAddress", "Resolver", "bind_address", "listen_socket"]

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

Resolver: TypeAlias = Callable[[str], Sequence[str]]
"""Turns a host name into its addresses (text), in preference order."""


def _resolve(host: str) -> list[str]:
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def bind_address(host: str, *, allow_remote: bool, resolve: Resolver | None = None) -> IPAddress:
    """The address to bind for ``host``: an address as given; a name (``localhost``) resolved first, then its
    first loopback address, so a name that also (or only) maps elsewhere never binds a non-loopback address.

    With ``allow_remote`` the first address is bound, whatever it is; without, a host with no loopback address
    is ``LlmError(INVALID_CONFIG)``.
    """
    try:
        candidates = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            resolved = (resolve or _resolve)(host)
        except (OSError, UnicodeError) as exc:
            raise LlmError(
                f"cannot listen on {host!r}: the name does not resolve ({exc})",
                ErrorCode.INVALID_CONFIG,
                hint="give an address such as 127.0.0.1 or ::1",
            ) from None
        candidates = [ipaddress.ip_address(address.split("%")[0]) for address in resolved]
    if candidates and allow_remote:
        return candidates[0]
    loopback = [address for address in candidates if address.is_loopback]
    if loopback:
        return loopback[0]
    resolved_to = ", ".join(str(address) for address in candidates if str(address) != host)
    shown = f" (it resolves to {resolved_to or 'nothing'})" if resolved_to or not candidates else ""
    raise LlmError(
        f"refusing to serve cassettes on {host!r}{shown}: only loopback addresses (127.0.0.1, ::1, localhost) are "
        "allowed unless allow_remote=True (--allow-remote)",
        ErrorCode.INVALID_CONFIG,
        hint="bind 127.0.0.1, or pass allow_remote=True (chunktape serve --allow-remote) if the network is trusted",
    )


def listen_socket(host: str, port: int, allow_remote: bool) -> socket.socket:
    """A TCP socket listening on ``host:port`` (0: a free port), loopback only unless ``allow_remote``; a bad
    port, a busy one or a host that is not loopback is ``LlmError(INVALID_CONFIG)`` saying which."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise LlmError(
            f"cannot listen on port {port!r}: a port is a whole number from 0 to 65535",
            ErrorCode.INVALID_CONFIG,
            hint="choose a port from 1 to 65535, or 0 for a free one",
        )
    address = bind_address(host, allow_remote=allow_remote)
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on accepted sockets whose proto says TCP, and without
    # it every small SSE write waits for the client's delayed ACK (~40 ms per response).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if sys.platform != "win32":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(address), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise LlmError(
                f"cannot listen on {host}:{port}: the port is already in use",
                ErrorCode.INVALID_CONFIG,
                hint="choose another port, or 0 for a free one",
            ) from None
        raise LlmError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", ErrorCode.INVALID_CONFIG, hint="fix host/port"
        ) from None
    return sock
