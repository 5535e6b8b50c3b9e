"""A client's read timeout, honoured by the transports that answer in process, where no socket times out.

httpx hands every request its timeouts in ``request.extensions["timeout"]`` (``connect``, ``read``, ``write``,
``pool``; seconds or None), and its network transport applies ``read`` to every wait for bytes: for the response
head and for each piece of the body. A transport that answers from a cassette (``ReplayTransport``) or injects a
silence into one (``FaultTransport``'s stall and latency) has no socket to apply it, so it applies it here: a wait
longer than ``read`` raises the request's own library's ``ReadTimeout`` at that time, on the running loop's clock
(virtual time where the run is virtual), which SDKs map to their timeout error (openai: ``APITimeoutError``) and
retry. ``connect``, ``write`` and ``pool`` bound waits that do not happen in process (no connection to open, no
body to send over a socket, no pool to queue in).

``TimedBody`` is such a body: ``prefetch(n)`` waits for its first pieces before the response is handed to the
client, as a server sends its head with the first bytes of its body, so a silence before them is a timeout of the
request itself (where SDKs retry) rather than of the stream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

from chunktape._httpx import AnyRequest, read_error
from chunktape._protocol import aclose_stream

__all__ = ["TimedBody", "read_timeout"]


def read_timeout(request: AnyRequest) -> float | None:
    """The request's read timeout in seconds (None: it waits for good, as ``timeout=None`` asks)."""
    timeout = request.extensions.get("timeout")
    if not isinstance(timeout, Mapping):
        return None
    value = timeout.get("read")
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


class _Late(Exception):
    """A piece did not arrive within the read timeout: ``error`` is the request's ``ReadTimeout``."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class TimedBody:
    """``pieces``, each of which must arrive within the read timeout of ``request``: an async iterator, read once."""

    def __init__(self, pieces: AsyncIterator[bytes], request: AnyRequest) -> None:
        self._pieces = pieces
        self._request = request
        self.seconds = read_timeout(request)
        self._ready: list[bytes] = []
        self._failed: BaseException | None = None
        self._ended = False
        self.timed_out = False
        """Whether the read timeout fired: the client gave up on this answer, whatever part of it it had."""

    async def _next(self) -> bytes:
        """The next piece; the request's ``ReadTimeout`` when it is late (``_Late`` carries it)."""
        seconds = self.seconds
        if seconds is None:
            return await anext(self._pieces)
        scope = asyncio.timeout(seconds)
        try:
            async with scope:
                return await anext(self._pieces)
        except TimeoutError:
            if not scope.expired():
                raise
            self.timed_out = True
            message = f"no data within the read timeout of {seconds:g} s (replayed in process)"
            raise _Late(read_error(self._request, message, timeout=True)) from None

    async def prefetch(self, count: int) -> None:
        """Wait for the first ``count`` pieces now (the response head goes out with them). A timeout raises here;
        a body that ends or breaks before them ends or breaks where the client reads it."""
        while len(self._ready) < count and not self._ended and self._failed is None:
            try:
                self._ready.append(await self._next())
            except StopAsyncIteration:
                self._ended = True
            except _Late as late:
                raise late.error from None
            except Exception as error:
                self._failed = error

    def __aiter__(self) -> TimedBody:
        return self

    async def __anext__(self) -> bytes:
        if self._ready:
            return self._ready.pop(0)
        if self._failed is not None:
            failed, self._failed = self._failed, None
            self._ended = True
            raise failed
        if self._ended:
            raise StopAsyncIteration
        try:
            return await self._next()
        except StopAsyncIteration:
            self._ended = True
            raise
        except _Late as late:
            self._ended = True
            raise late.error from None

    async def aclose(self) -> None:
        """Close the pieces (at once: they may hold a replayed interaction until then)."""
        self._ended = True
        await aclose_stream(self._pieces)
