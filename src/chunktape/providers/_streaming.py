"""What every streaming provider adapter shares: the client it owns or borrows, the POST, the SSE read bounded by
the abort signal and the idle deadline, and the error mapping (every failure is an ``LlmError``):

- non-2xx -> ``PROVIDER_HTTP_ERROR`` with ``status``, ``retry_after`` and the provider's message from its JSON body;
- connect failures and a connection breaking mid-body -> ``STREAM_ABORTED``;
- a 2xx body with no SSE in it (an HTML page, a proxy's login form) -> ``INVALID_RESPONSE`` with a snippet;
- no response within ``timeout``, or no data event within ``idle_timeout`` -> ``TIMEOUT``;
- the abort signal -> ``CANCELLED``, with the HTTP response closed at once.

A subclass says where it posts (``route``), what it sends (``build_request_body``, ``_headers_for_request``) and how
its events decode (``new_decoder``).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from chunktape._cassettes.response import ResponseObserver
from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import (
    CONNECT_ERRORS,
    DECODING_ERRORS,
    HTTP_ERRORS,
    TIMEOUT_ERRORS,
    AnyAsyncClient,
    AnyResponse,
    new_async_client,
    post_streaming,
)
from chunktape._protocol import GenerateOptions, LlmAdapter, StreamChunk, aclose_stream
from chunktape._secrets import redact_text
from chunktape.providers._guard import Guard, aiter_guarded
from chunktape.wire._decoding import StreamDecoder
from chunktape.wire._http_errors import http_error, not_an_event_stream
from chunktape.wire._sse import SseComment, SseEvent, SseParser

__all__ = ["StreamingAdapter"]

_MAX_ERROR_BODY = 64 * 1024


class StreamingAdapter(LlmAdapter):
    """Streams ``POST {base_url}{route}`` as StreamChunks (see the module docstring for the errors)."""

    base_url: str
    api_key: str | None
    timeout: float
    idle_timeout: float | None
    secrets: Sequence[str]
    _client: AnyAsyncClient | None
    _owns_client: bool
    route = ""
    """The path the adapter posts to, after ``base_url``."""
    streams = ""
    """What the endpoint streams, for the hint of a body that is no event stream."""

    @abc.abstractmethod
    def new_decoder(self) -> StreamDecoder:
        """A decoder for one answer's events."""

    @abc.abstractmethod
    def build_request_body(self, options: GenerateOptions) -> dict[str, Any]:
        """The JSON body this adapter would send; raises ``UNSUPPORTED_OPTION`` for what it cannot send."""

    @abc.abstractmethod
    def _headers_for_request(self) -> dict[str, str]:
        """The request headers, ``attribution_headers()`` and the credential included."""

    def observer_for(self, response: AnyResponse) -> ResponseObserver | None:
        """What observes the answer's headers and events for a recorder (None: nobody; a protocol that keeps its
        envelope itself)."""
        return None

    def observe(self, observer: ResponseObserver, data: str) -> None:
        """Hand one event's data to ``observer``."""

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def _get_client(self) -> AnyAsyncClient:
        if self._client is None:
            self._client = new_async_client(self.timeout)
            self._owns_client = True
        return self._client

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        body = self.build_request_body(options)
        signal = options.signal
        if signal is not None:
            signal.throw_if_aborted()
        client = self._get_client()
        url = f"{self.base_url}{self.route}"
        loop = asyncio.get_running_loop()
        guard = Guard(signal)
        response: AnyResponse | None = None
        raw: AsyncIterator[bytes] | None = None
        try:
            headers = self._headers_for_request()
            response = await guard.run(lambda: post_streaming(client, url, body, headers), "no response headers")
            observer = self.observer_for(response)
            if response.status_code >= 300:
                raise await self._http_error(response, guard)
            parser = SseParser()
            decoder = self.new_decoder()
            if self.idle_timeout is not None:
                guard.set_deadline(loop.time() + self.idle_timeout)
            raw = pieces = response.aiter_bytes()  # ``pieces``: the same, never None, for the read's lambda
            unparsed: bytearray | None = bytearray()  # the body's head, until it shows it is an event stream
            while not decoder.done:
                piece = await guard.run(
                    lambda: anext(pieces, None), f"no data event for {self.idle_timeout}s", timed=True
                )
                items = parser.feed(piece) if piece is not None else parser.close()
                if unparsed is not None:
                    if any(isinstance(item, SseComment) or item.data is not None for item in items):
                        unparsed = None
                    elif piece is not None:
                        if len(unparsed) < _MAX_ERROR_BODY:
                            unparsed += piece
                    elif unparsed:
                        raise not_an_event_stream(
                            bytes(unparsed), response.headers.get("content-type"), who=self.name, streams=self.streams
                        )
                for item in items:
                    chunks = decoder.feed_item(item, unterminated=item is parser.unterminated)
                    if observer is not None and isinstance(item, SseEvent) and item.data:
                        self.observe(observer, item.data)
                    if isinstance(item, SseEvent) and item.data and not item.data.isspace() and self.idle_timeout:
                        # Only real data moves the idle deadline; keep-alive comments and blank data do not.
                        guard.deadline = loop.time() + self.idle_timeout
                    for chunk in chunks:
                        handed = loop.time()
                        yield chunk
                        guard.held(loop.time() - handed)
                if piece is None:
                    break
            for chunk in decoder.close():
                yield chunk
        except DECODING_ERRORS as exc:
            raise LlmError(f"{self.name}: undecodable body ({exc})", ErrorCode.INVALID_RESPONSE, cause=exc) from exc
        except TIMEOUT_ERRORS as exc:
            raise LlmError(f"{self.name}: timed out ({exc})", ErrorCode.TIMEOUT, cause=exc) from exc
        except CONNECT_ERRORS as exc:
            raise LlmError(
                f"{self.name}: could not connect to {url} ({type(exc).__name__}: {exc})",
                ErrorCode.STREAM_ABORTED,
                cause=exc,
                hint="check the base URL and that the server is running; retrying may help",
            ) from exc
        except HTTP_ERRORS as exc:
            raise LlmError(
                f"{self.name}: the connection broke ({type(exc).__name__}: {exc})", ErrorCode.STREAM_ABORTED, cause=exc
            ) from exc
        finally:
            guard.close()
            await aclose_stream(raw)
            if response is not None:
                await response.aclose()

    async def _read_capped(self, response: AnyResponse, guard: Guard) -> bytes:
        body = bytearray()
        async with contextlib.aclosing(aiter_guarded(response.aiter_bytes(), guard)) as pieces:
            async for piece in pieces:
                body += piece
                if len(body) >= _MAX_ERROR_BODY:
                    break  # the rest is not read: ours and aiter_bytes are closed now, not at collection
        return bytes(body)

    async def _http_error(self, response: AnyResponse, guard: Guard) -> LlmError:
        body = await self._read_capped(response, guard)
        error = http_error(response.status_code, body, response.headers, who=self.name)
        if self.secrets and any(secret in error.message for secret in self.secrets):
            # Some providers echo the key in a 401; whoever prints or records this error must not see it.
            error.message = redact_text(error.message, self.secrets)
            error.args = (error.message,)
        return error
