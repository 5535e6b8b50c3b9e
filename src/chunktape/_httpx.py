"""httpx2 and httpx side by side.

chunktape's own HTTP runs on httpx2 (what openai 3.x, anthropic and starlette use); wherever a user hands
chunktape a client or a transport, an httpx one works too. The two libraries share an API but not their
classes, so an ``except`` or an ``isinstance`` that must hold for both uses the pairs below, and a transport
or a body chunktape hands to a client (``DualTransport``, ``SyncBody``, ``AsyncBody``) is typed as both
libraries' and answers each request in the request's own library.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import threading
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, Literal, Self, TypeAlias, TypeVar, overload

import httpx
import httpx2

from chunktape import _limits
from chunktape._limits import BodyDecodeError, BodyDecoder

__all__ = [
    "CONNECT_ERRORS",
    "DECODING_ERRORS",
    "HTTP_ERRORS",
    "TIMEOUT_ERRORS",
    "AnyAsyncClient",
    "AnyAsyncTransport",
    "AnyRequest",
    "AnyResponse",
    "AnyTransport",
    "AsyncBody",
    "DualTransport",
    "HttpKind",
    "LoopBody",
    "SyncBody",
    "aclose_inner",
    "araw_pieces",
    "close_inner",
    "default_tls",
    "new_async_client",
    "post_streaming",
    "raw_pieces",
    "read_error",
    "response",
    "send",
    "send_async",
    "sent_response",
]


T = TypeVar("T")

HttpKind: TypeAlias = Literal["httpx2", "httpx"]
"""Which HTTP library a client or transport is from."""

AnyAsyncClient: TypeAlias = httpx2.AsyncClient | httpx.AsyncClient
AnyResponse: TypeAlias = httpx2.Response | httpx.Response

DECODING_ERRORS = (httpx2.DecodingError, httpx.DecodingError)
TIMEOUT_ERRORS = (httpx2.TimeoutException, httpx.TimeoutException)
CONNECT_ERRORS = (httpx2.ConnectError, httpx.ConnectError)
HTTP_ERRORS = (httpx2.HTTPError, httpx.HTTPError)


@functools.cache
def default_tls(library: HttpKind = "httpx2") -> ssl.SSLContext:
    """``library``'s default verified TLS context (what ``verify=True`` builds), built once per process.

    Each build reads the whole CA bundle (about 25 ms of CPU), and chunktape builds a client or a transport per
    adapter, proxy and recording session; one context serves any number of them, on any thread.
    """
    return httpx2.create_ssl_context() if library == "httpx2" else httpx.create_ssl_context()


def new_async_client(timeout: float) -> httpx2.AsyncClient:
    """The client chunktape builds when the user gave none."""
    return httpx2.AsyncClient(timeout=httpx2.Timeout(timeout), verify=default_tls())


def post_streaming(client: AnyAsyncClient, url: str, body: Any, headers: Mapping[str, str]) -> Awaitable[AnyResponse]:
    """Send a JSON POST whose response body is read as it arrives, with either kind of client."""
    if isinstance(client, httpx2.AsyncClient):
        return client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)
    return client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)


# -- transports and bodies that serve both libraries ------------------------------------------------

AnyRequest: TypeAlias = httpx2.Request | httpx.Request
AnyTransport: TypeAlias = httpx2.BaseTransport | httpx.BaseTransport
AnyAsyncTransport: TypeAlias = httpx2.AsyncBaseTransport | httpx.AsyncBaseTransport


class SyncBody(httpx2.SyncByteStream, httpx.SyncByteStream):
    """A response body for a sync client of either library: ``pieces``, then ``on_close`` once."""

    def __init__(self, pieces: Iterable[bytes], on_close: Callable[[], None] = lambda: None) -> None:
        self._pieces = pieces
        self._on_close: Callable[[], None] | None = on_close

    def __iter__(self) -> Iterator[bytes]:
        yield from self._pieces

    def close(self) -> None:
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close()


class AsyncBody(httpx2.AsyncByteStream, httpx.AsyncByteStream):
    """A response body for an async client of either library: ``pieces``, then ``on_close`` once."""

    def __init__(self, pieces: AsyncIterable[bytes], on_close: Callable[[], Awaitable[None]] | None = None) -> None:
        self._pieces = pieces
        self._on_close = on_close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._pieces:
            yield piece

    async def aclose(self) -> None:
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            await on_close()


class LoopBody(SyncBody):
    """An async body served to a sync client, on a private event loop: one implementation for both kinds of
    client (``loop_factory`` makes that loop: a plain one sleeps in real time, a virtual-time one jumps).

    Sync code may run where an event loop is already running (a sync SDK called from async code, a notebook);
    that thread cannot run a second loop, so from the first read made there on, the private loop runs in a
    thread of its own and this thread waits for each piece.
    """

    def __init__(
        self,
        pieces: AsyncIterator[bytes],
        on_close: Callable[[], Awaitable[None]],
        *,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
    ) -> None:
        self._loop = loop_factory()
        self._thread: threading.Thread | None = None
        self._source = pieces
        self._async_close = on_close
        super().__init__(self._drive(), self._finish)

    def run(self, step: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``step()`` run to its end on the body's loop (before the body is handed over: its first pieces)."""
        return self._run(step)

    def _run(self, step: Callable[[], Coroutine[Any, Any, T]]) -> T:
        if self._thread is None and not _loop_running():
            return self._loop.run_until_complete(step())
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop.run_forever, name="chunktape-sync-body", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(step(), self._loop).result()

    async def _next(self) -> bytes:
        return await anext(self._source)

    def _drive(self) -> Iterator[bytes]:
        while True:
            try:
                yield self._run(self._next)
            except StopAsyncIteration:
                return

    def _finish(self) -> None:
        try:
            self._run(self._async_close_coroutine)
        finally:
            if self._thread is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join()
            self._loop.close()

    async def _async_close_coroutine(self) -> None:
        try:
            await self._async_close()
        finally:
            await self._loop.shutdown_asyncgens()  # as asyncio.run does: no generator outlives its loop


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def response(
    request: AnyRequest,
    status: int,
    *,
    headers: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    stream: SyncBody | AsyncBody | None = None,
    content: bytes | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> AnyResponse:
    """A response of the library ``request`` belongs to (its client accepts no other)."""
    extra = dict(extensions or {})
    if isinstance(request, httpx2.Request):
        return httpx2.Response(
            status, headers=headers, stream=stream, content=content, request=request, extensions=extra
        )
    return httpx.Response(status, headers=headers, stream=stream, content=content, request=request, extensions=extra)


def sent_response(request: AnyRequest, status: int, *, headers: Mapping[str, str], body: bytes) -> AnyResponse:
    """A response of ``request``'s library carrying ``body`` as a server sends one: its ``Content-Length`` set (as
    ``content=`` sets it), the body handed over unread, for the client to read as it reads a socket's.

    ``content=`` reads the body through the response's decoders while building it, most of what a short replayed
    stream's response costs; a whole body replayed this way is read once, by the client, like a timed one.
    """
    head = {**headers, "Content-Length": str(len(body))} if body else headers
    if isinstance(request, httpx2.Request):
        return httpx2.Response(status, headers=head, stream=httpx2.ByteStream(body), request=request)
    return httpx.Response(status, headers=head, stream=httpx.ByteStream(body), request=request)


def read_error(request: AnyRequest, message: str, *, timeout: bool = False) -> Exception:
    """A connection reset mid-body (``timeout``: a read deadline passed), as ``request``'s library raises it:
    SDKs map it to their own connection (timeout) error."""
    library = httpx2 if isinstance(request, httpx2.Request) else httpx
    kind: Callable[..., Exception] = library.ReadTimeout if timeout else library.ReadError
    return kind(message, request=request)


def send(inner: object, request: AnyRequest) -> AnyResponse:
    """``inner.handle_request(request)`` when both belong to one library; else a ``TypeError`` saying so."""
    if isinstance(inner, DualTransport):  # ours take either library's request
        return inner.handle_request(request)
    if isinstance(request, httpx2.Request) and isinstance(inner, httpx2.BaseTransport):
        return inner.handle_request(request)
    if isinstance(request, httpx.Request) and isinstance(inner, httpx.BaseTransport):
        return inner.handle_request(request)
    raise TypeError(_mixed(inner, request))


async def send_async(inner: object, request: AnyRequest) -> AnyResponse:
    """``inner.handle_async_request(request)`` when both belong to one library; else a ``TypeError``."""
    if isinstance(inner, DualTransport):
        return await inner.handle_async_request(request)
    if isinstance(request, httpx2.Request) and isinstance(inner, httpx2.AsyncBaseTransport):
        return await inner.handle_async_request(request)
    if isinstance(request, httpx.Request) and isinstance(inner, httpx.AsyncBaseTransport):
        return await inner.handle_async_request(request)
    raise TypeError(_mixed(inner, request))


def _mixed(inner: object, request: AnyRequest) -> str:
    library = "httpx2" if isinstance(request, httpx2.Request) else "httpx"
    return (
        f"a {library} client sent a request through {type(inner).__module__}.{type(inner).__qualname__}: wrap a "
        f"{library} transport of the client's own kind ({library}.HTTPTransport() for a {library}.Client, "
        f"{library}.AsyncHTTPTransport() for a {library}.AsyncClient)"
    )


def _encoding(reply: AnyResponse) -> str | None:
    """The response's content-encoding, or None when its body is sent as is."""
    encoding = reply.headers.get("content-encoding", "").strip().lower()
    return None if encoding in ("", "identity") else encoding


def _decoding_error(reply: AnyResponse, error: BodyDecodeError) -> Exception:
    """``error`` as the reply's library raises a body it cannot decode (SDKs map it to a connection error)."""
    try:
        request = reply.request
    except RuntimeError:  # a transport's own response: the client sets its request later
        request = None
    if isinstance(reply, httpx2.Response):
        return httpx2.DecodingError(str(error), request=request if isinstance(request, httpx2.Request) else None)
    return httpx.DecodingError(str(error), request=request if isinstance(request, httpx.Request) else None)


def raw_pieces(reply: AnyResponse) -> Iterator[bytes]:
    """A sync response's body as it arrives: as sent, or decoded when it was content-encoded.

    gzip and deflate are decoded here (``BodyDecoder``: pieces of at most ``PIECE_BYTES``, at most
    ``MAX_DECODED_BYTES`` in all, a truncated stream an error); other encodings by the library, within the
    same total. Either failure is the library's ``DecodingError``.
    """
    encoding = _encoding(reply)
    if encoding is not None:
        return _decoded(reply, encoding)
    stream = reply.stream
    if not isinstance(stream, httpx2.SyncByteStream | httpx.SyncByteStream):
        raise TypeError("a sync client's transport answered with an async body")
    return iter(stream)


def _decoded(reply: AnyResponse, encoding: str) -> Iterator[bytes]:
    try:
        if BodyDecoder.supports(encoding):
            decoder = BodyDecoder(encoding)
            for data in reply.iter_raw():
                yield from decoder.feed(data)
            yield from decoder.close()
        else:
            total, limit = 0, _limits.MAX_DECODED_BYTES
            for piece in reply.iter_bytes():
                total += len(piece)
                if total > limit:
                    raise BodyDecodeError(f"the {encoding} body decodes to more than {limit:,} bytes", "too-large")
                yield piece
    except BodyDecodeError as error:
        raise _decoding_error(reply, error) from None


async def _aclose(pieces: AsyncIterator[bytes]) -> None:
    """Close an async iterator that is a generator (httpx's body iterators are): now, not at collection."""
    close = getattr(pieces, "aclose", None)
    if close is not None:
        await close()


def araw_pieces(reply: AnyResponse) -> AsyncIterator[bytes]:
    """An async response's body as it arrives: as sent, or decoded when it was content-encoded (as ``raw_pieces``)."""
    encoding = _encoding(reply)
    if encoding is not None:
        return _adecoded(reply, encoding)
    stream = reply.stream
    if not isinstance(stream, httpx2.AsyncByteStream | httpx.AsyncByteStream):
        raise TypeError("an async client's transport answered with a sync body")
    return aiter(stream)


async def _adecoded(reply: AnyResponse, encoding: str) -> AsyncIterator[bytes]:
    try:
        if BodyDecoder.supports(encoding):
            decoder = BodyDecoder(encoding)
            raw = reply.aiter_raw()
            try:
                async for data in raw:
                    for piece in decoder.feed(data):
                        yield piece
            finally:
                await _aclose(raw)
            for piece in decoder.close():
                yield piece
        else:
            total, limit = 0, _limits.MAX_DECODED_BYTES
            decoded = reply.aiter_bytes()
            try:
                async for piece in decoded:
                    total += len(piece)
                    if total > limit:
                        raise BodyDecodeError(f"the {encoding} body decodes to more than {limit:,} bytes", "too-large")
                    yield piece
            finally:
                await _aclose(decoded)
    except BodyDecodeError as error:
        raise _decoding_error(reply, error) from None


def close_inner(inner: object) -> None:
    """Close a wrapped sync transport (an async one is closed by ``aclose_inner``)."""
    if isinstance(inner, httpx2.BaseTransport | httpx.BaseTransport):
        inner.close()


async def aclose_inner(inner: object) -> None:
    """Close a wrapped async transport (a sync one is closed by ``close_inner``)."""
    if isinstance(inner, httpx2.AsyncBaseTransport | httpx.AsyncBaseTransport):
        await inner.aclose()


if TYPE_CHECKING:
    from httpx import AsyncBaseTransport as _HttpxAsyncTransport
    from httpx import BaseTransport as _HttpxTransport
else:
    # At run time, httpx's transport bases are left out: an httpx client never checks its transport's class
    # (it calls ``handle_request``), while anthropic refuses any transport with an ``httpx`` class in its MRO.

    class _HttpxTransport:
        pass

    class _HttpxAsyncTransport:
        pass


class DualTransport(httpx2.BaseTransport, httpx2.AsyncBaseTransport, _HttpxTransport, _HttpxAsyncTransport):
    """A transport that any client of httpx2 or httpx, sync or async, accepts: one object for all four.

    Type checkers see it subclass both libraries' transports; at run time it subclasses httpx2's only, so
    SDKs that refuse httpx objects (anthropic) take it too. Subclasses implement ``handle(request)`` and
    ``handle_async(request)`` over either library's request and answer with ``response(...)`` (the
    request's own library).
    """

    def handle(self, request: AnyRequest) -> AnyResponse:
        raise NotImplementedError

    async def handle_async(self, request: AnyRequest) -> AnyResponse:
        raise NotImplementedError

    @overload
    def handle_request(self, request: httpx2.Request) -> httpx2.Response: ...
    @overload
    def handle_request(self, request: httpx.Request) -> httpx.Response: ...
    def handle_request(self, request: AnyRequest) -> AnyResponse:
        return self.handle(request)

    @overload
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response: ...
    @overload
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...
    async def handle_async_request(self, request: AnyRequest) -> AnyResponse:
        return await self.handle_async(request)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
