"""What every streaming provider adapter shares: the client it owns or borrows, the POST, the SSE read bounded by
the abort signal and the idle deadline, and the error mapping (every failure is an ``LlmError``):

- non-2xx -> ``PROVIDER_HTTP_ERROR`` with ``status``, ``retry_after`` and the provider's message from its JSON body;
- connect failures and a connection breaking mid-body -> ``STREAM_ABORTED``;
- a 2xx body with no SSE in it (an HTML page, a proxy's login form) -> ``INVALID_RESPONSE`` with a snippet;
- no response within ``timeout``, or no data event within ``idle_timeout`` -> ``TIMEOUT``;
- the abort signal -> ``CANCELLED``, with the HTTP response closed at once.

Every adapter is built by one constructor (``base_url``, ``api_key``, ``model``, ``reasoning`` and the
``AdapterSettings``) and checks a request the same way before it sends it (``build_request_body``). A subclass states
its defaults (``default_base_url``, ``api_key_variable``, ``default_name``, ``default_reasoning``), where it posts
(``route``), what its protocol cannot carry (``no_name``, ``no_reasoning_content``, ``_refuse``), what it sends
(``request_body``, ``_credentials``) and how its events decode (``new_decoder``).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar, TypeAlias, TypedDict, Unpack

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
from chunktape._protocol import (
    GenerateOptions,
    LlmAdapter,
    ReasoningOption,
    StreamChunk,
    aclose_stream,
    attribution_headers,
)
from chunktape._secrets import redact_text
from chunktape.providers._guard import Guard, aiter_guarded
from chunktape.wire._decoding import StreamDecoder
from chunktape.wire._http_errors import http_error, not_an_event_stream
from chunktape.wire._sse import SseComment, SseEvent, SseParser

__all__ = ["AdapterSettings", "Efforts", "StreamingAdapter"]

_MAX_ERROR_BODY = 64 * 1024

Efforts: TypeAlias = Mapping[str, Mapping[str, Any]]
"""Reasoning efforts: each offered effort id and the request fields it adds."""


class AdapterSettings(TypedDict, total=False):
    """What every streaming adapter may be given beside its base URL, key, model and reasoning efforts."""

    client: AnyAsyncClient | None
    """An ``httpx2.AsyncClient`` (or an ``httpx.AsyncClient``) to share a connection pool or plug in a transport
    (``FaultTransport``); the adapter then never closes it. Without one it builds an ``httpx2.AsyncClient``."""
    timeout: float
    """Seconds to wait for the response (default 60)."""
    idle_timeout: float | None
    """Seconds a stream may go without a data event (default 120; None: no limit)."""
    headers: Mapping[str, str] | None
    """Headers sent with every request, before the adapter's own."""
    name: str | None
    """The adapter's name in cassettes and errors (default: its provider's)."""


class StreamingAdapter(LlmAdapter):
    """Streams ``POST {base_url}{route}`` as StreamChunks (see the module docstring for the errors).

    ``base_url`` defaults to ``default_base_url``, ``api_key`` to the environment variable ``api_key_variable``;
    ``model`` is used when ``options.model`` is empty; ``reasoning`` maps each offered effort id to the request
    fields it adds (default: ``default_reasoning``).
    """

    default_base_url: ClassVar[str]
    api_key_variable: ClassVar[str]
    """The environment variable the API key is read from when none is given."""
    default_name: ClassVar[str]
    default_reasoning: ClassVar[Efforts] = {}
    route: ClassVar[str] = ""
    """The path the adapter posts to, after ``base_url``."""
    streams: ClassVar[str] = ""
    """What the endpoint streams, for the hint of a body that is no event stream."""
    no_name: ClassVar[str | None] = None
    """Why a message ``name`` cannot be sent, when the protocol has none."""
    no_reasoning_content: ClassVar[str | None] = None
    """Why an assistant turn's ``reasoning_content`` cannot be sent, when the protocol takes reasoning back only in
    its own form."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        *,
        reasoning: Efforts | None = None,
        **settings: Unpack[AdapterSettings],
    ) -> None:
        self.base_url = (self.default_base_url if base_url is None else base_url).rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(self.api_key_variable)
        self.secrets: Sequence[str] = (self.api_key,) if self.api_key else ()
        self.model = model
        self.timeout = settings.get("timeout", 60.0)
        self.idle_timeout = settings.get("idle_timeout", 120.0)
        self._reasoning = dict(self._reasoning_by_default() if reasoning is None else reasoning)
        self._headers = dict(settings.get("headers") or {})
        self._name = settings.get("name") or self._name_by_default()
        self._client = settings.get("client")
        self._owns_client = self._client is None

    def _name_by_default(self) -> str:
        """The name when none is given: ``default_name`` (a subclass may tell the provider by ``base_url``)."""
        return self.default_name

    def _reasoning_by_default(self) -> Efforts:
        """The efforts offered when none are given: ``default_reasoning`` (a subclass may tell by ``base_url``)."""
        return self.default_reasoning

    @property
    def name(self) -> str:
        return self._name

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return tuple(ReasoningOption(id=effort, label=effort) for effort in self._reasoning)

    @abc.abstractmethod
    def new_decoder(self) -> StreamDecoder:
        """A decoder for one answer's events."""

    def build_request_body(self, options: GenerateOptions) -> dict[str, Any]:
        """The JSON body this adapter would send; raises ``UNSUPPORTED_OPTION`` for what it cannot send: a reasoning
        effort it does not offer, a request not to stream, what its protocol cannot carry, no model at all."""
        extra_fields: dict[str, Any] = {}
        if options.reasoning is not None:
            if options.reasoning not in self._reasoning:
                offered = list(self._reasoning) or "none"  # in the order reasoning_options() lists them
                raise LlmError(
                    f"reasoning effort {options.reasoning!r} is not offered by {self.name} (offered: {offered})",
                    ErrorCode.UNSUPPORTED_OPTION,
                )
            extra_fields = dict(self._reasoning[options.reasoning])
        if options.extra.get("stream", True) is not True:
            raise LlmError("this adapter only streams; remove extra['stream']", ErrorCode.UNSUPPORTED_OPTION)
        self._refuse(options)
        model = options.model or self.model
        if not model:
            raise LlmError("no model: set options.model or the adapter's model", ErrorCode.UNSUPPORTED_OPTION)
        return self.request_body(options, model, extra_fields)

    def _refuse(self, options: GenerateOptions) -> None:
        """Raise ``UNSUPPORTED_OPTION`` for what the protocol cannot carry: by default the message fields it has no
        place for (``no_name``, ``no_reasoning_content``)."""
        for message in options.messages:
            if message.name is not None and self.no_name is not None:
                raise LlmError(self.no_name, ErrorCode.UNSUPPORTED_OPTION)
            if message.role == "assistant" and message.reasoning_content and self.no_reasoning_content is not None:
                raise LlmError(self.no_reasoning_content, ErrorCode.UNSUPPORTED_OPTION)

    @abc.abstractmethod
    def request_body(self, options: GenerateOptions, model: str, extra_fields: dict[str, Any]) -> dict[str, Any]:
        """The protocol's request body for checked ``options``, to ``model``, with ``extra_fields`` (what the
        reasoning effort adds) merged before ``options.extra``."""

    def _headers_for_request(self) -> dict[str, str]:
        """The request headers: ``attribution_headers()``, the caller's, ``Accept`` and the protocol's credential."""
        return {**attribution_headers(), **self._headers, "Accept": "text/event-stream", **self._credentials()}

    def _credentials(self) -> dict[str, str]:
        """The headers that carry the API key (a bearer token by default), and what else the protocol requires."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

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
