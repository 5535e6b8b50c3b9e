"""A real provider adapter for OpenAI-compatible ``/chat/completions`` streaming, on httpx; DeepSeek by default.

Error mapping (every failure is an ``LlmError``):

- non-2xx -> ``PROVIDER_HTTP_ERROR`` with ``status``, ``retry_after`` (``Retry-After`` seconds or HTTP-date,
  or ``retry-after-ms``) and the provider's message from the JSON body, whatever its content type;
- connect failures (``could not connect to <url>``) and a connection breaking mid-body -> ``STREAM_ABORTED``;
- a 2xx body with no SSE in it at all (an HTML page, a proxy's login form) -> ``INVALID_RESPONSE`` with the
  content type and a snippet;
- no response within ``timeout``, or no *data* event within ``idle_timeout`` (keep-alive comments do not
  count) -> ``TIMEOUT``;
- unparseable data -> ``INVALID_RESPONSE``; in-band error objects and ``event: error`` -> see
  ``chunktape.wire.openai_chat`` (``PROVIDER_HTTP_ERROR`` if they carry a status, else ``STREAM_ABORTED``);
- the abort signal -> ``CANCELLED``, with the HTTP response closed at once.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import msgspec

from chunktape.abort import AbortSignal
from chunktape.errors import ErrorCode, LlmError
from chunktape.protocol import GenerateOptions, LlmAdapter, ReasoningOption, StreamChunk, attribution_headers
from chunktape.wire.http_errors import http_error
from chunktape.wire.openai_chat import (
    DEEPSEEK_REASONING,
    OPENAI_REASONING,
    OpenAIChatDecoder,
    error_from_payload,
    not_an_event_stream,
    options_to_openai_request,
)
from chunktape.wire.sse import SseComment, SseEvent, SseParser

__all__ = ["DEEPSEEK_BASE_URL", "DEEPSEEK_REASONING", "OPENAI_REASONING", "OpenAICompatAdapter"]

DEEPSEEK_BASE_URL = "https://api.deepseek.com"

_T = TypeVar("_T")
_MAX_ERROR_BODY = 64 * 1024
_decoder = msgspec.json.Decoder()


class OpenAICompatAdapter(LlmAdapter):
    """Streams ``POST {base_url}/chat/completions`` as StreamChunks.

    ``api_key`` defaults to ``$DEEPSEEK_API_KEY``; ``model`` is used when ``options.model`` is empty.
    ``reasoning`` maps each offered effort id to the request fields it adds (default: DeepSeek's thinking
    switch for api.deepseek.com, else ``reasoning_effort`` low/medium/high). Pass ``client`` to share a
    connection pool or plug in a transport (``FaultTransport``); the adapter then never closes it.
    """

    def __init__(
        self,
        base_url: str = DEEPSEEK_BASE_URL,
        api_key: str | None = None,
        model: str | None = None,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = 60.0,
        idle_timeout: float | None = 120.0,
        reasoning: Mapping[str, Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("DEEPSEEK_API_KEY")
        self.model = model
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        host = urlsplit(self.base_url).hostname or ""
        if reasoning is None:
            reasoning = DEEPSEEK_REASONING if host.endswith("deepseek.com") else OPENAI_REASONING
        self._reasoning = dict(reasoning)
        self._headers = dict(headers or {})
        self._name = name or ("deepseek" if host.endswith("deepseek.com") else host or "openai-compat")
        self._client = client
        self._owns_client = client is None

    @property
    def name(self) -> str:
        return self._name

    @property
    def secrets(self) -> Sequence[str]:
        return (self.api_key,) if self.api_key else ()

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return tuple(ReasoningOption(id=effort, label=effort) for effort in self._reasoning)

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def build_request_body(self, options: GenerateOptions) -> dict[str, Any]:
        """The JSON body this adapter would send; raises ``UNSUPPORTED_OPTION`` for what it cannot send."""
        extra_fields: Mapping[str, Any] = {}
        if options.reasoning is not None:
            if options.reasoning not in self._reasoning:
                offered = sorted(self._reasoning) or "none"
                raise LlmError(
                    f"reasoning effort {options.reasoning!r} is not offered by {self.name} (offered: {offered})",
                    ErrorCode.UNSUPPORTED_OPTION,
                )
            extra_fields = self._reasoning[options.reasoning]
        if options.extra.get("stream", True) is not True:
            raise LlmError("this adapter only streams; remove extra['stream']", ErrorCode.UNSUPPORTED_OPTION)
        if options.extra.get("n", 1) != 1:
            raise LlmError("only one choice (n=1) can be streamed as chunks", ErrorCode.UNSUPPORTED_OPTION)
        model = options.model or self.model
        if not model:
            raise LlmError("no model: set options.model or the adapter's model", ErrorCode.UNSUPPORTED_OPTION)
        return options_to_openai_request(options, model=model, extra_fields=dict(extra_fields))

    def _headers_for_request(self) -> dict[str, str]:
        headers = {**attribution_headers(), **self._headers, "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout))
            self._owns_client = True
        return self._client

    async def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        body = self.build_request_body(options)
        signal = options.signal
        if signal is not None:
            signal.throw_if_aborted()
        client = self._get_client()
        request = client.build_request(
            "POST", f"{self.base_url}/chat/completions", json=body, headers=self._headers_for_request()
        )
        loop = asyncio.get_running_loop()
        guard = _Guard(signal)
        response: httpx.Response | None = None
        raw: AsyncIterator[bytes] | None = None
        try:
            response = await guard.run(client.send(request, stream=True), None, "no response headers")
            if response.status_code >= 300:
                raise await self._http_error(response, guard)
            if response.headers.get("content-type", "").startswith("application/json"):
                raise await self._not_a_stream(response, guard)
            parser = SseParser()
            decoder = OpenAIChatDecoder()
            deadline = None if self.idle_timeout is None else loop.time() + self.idle_timeout
            raw = response.aiter_bytes()
            unparsed: bytearray | None = bytearray()  # the body's head, until it shows it is an event stream
            while not decoder.done:
                piece = await guard.run(anext(raw, None), deadline, f"no data event for {self.idle_timeout}s")
                items = parser.feed(piece) if piece is not None else parser.close()
                if unparsed is not None:
                    if any(isinstance(item, SseComment) or item.data is not None for item in items):
                        unparsed = None
                    elif piece is not None:
                        if len(unparsed) < _MAX_ERROR_BODY:
                            unparsed += piece
                    elif unparsed:
                        raise not_an_event_stream(bytes(unparsed), response.headers.get("content-type"), who=self.name)
                for item in items:
                    chunks = decoder.feed_item(item, unterminated=item is parser.unterminated)
                    if isinstance(item, SseEvent) and item.data and not item.data.isspace() and self.idle_timeout:
                        # Only real data moves the idle deadline; keep-alive comments and blank data do not.
                        deadline = loop.time() + self.idle_timeout
                    for chunk in chunks:
                        yield chunk
                if piece is None:
                    break
            for chunk in decoder.close():
                yield chunk
        except httpx.DecodingError as exc:
            raise LlmError(f"{self.name}: undecodable body ({exc})", ErrorCode.INVALID_RESPONSE, cause=exc) from exc
        except httpx.TimeoutException as exc:
            raise LlmError(f"{self.name}: timed out ({exc})", ErrorCode.TIMEOUT, cause=exc) from exc
        except httpx.ConnectError as exc:
            raise LlmError(
                f"{self.name}: could not connect to {request.url} ({type(exc).__name__}: {exc})",
                ErrorCode.STREAM_ABORTED,
                cause=exc,
                hint="check the base URL and that the server is running; retrying may help",
            ) from exc
        except httpx.HTTPError as exc:
            raise LlmError(
                f"{self.name}: the connection broke ({type(exc).__name__}: {exc})", ErrorCode.STREAM_ABORTED, cause=exc
            ) from exc
        finally:
            guard.close()
            closer = getattr(raw, "aclose", None)
            if closer is not None:
                await closer()
            if response is not None:
                await response.aclose()

    async def _read_capped(self, response: httpx.Response, guard: _Guard) -> bytes:
        body = bytearray()
        async for piece in _aiter_guarded(response.aiter_bytes(), guard):
            body += piece
            if len(body) >= _MAX_ERROR_BODY:
                break
        return bytes(body)

    async def _not_a_stream(self, response: httpx.Response, guard: _Guard) -> LlmError:
        """A 2xx JSON body instead of an event stream: an error object some gateways send, or no streaming."""
        body = await self._read_capped(response, guard)
        try:
            payload: Any = _decoder.decode(body)
        except msgspec.DecodeError:
            payload = None
        if isinstance(payload, dict) and payload.get("error") is not None:
            return error_from_payload(payload, what=f"{self.name} answered with an error")
        snippet = body[:200].decode(errors="replace")
        return LlmError(
            f"{self.name} answered with JSON instead of an event stream: {snippet!r}", ErrorCode.INVALID_RESPONSE
        )

    async def _http_error(self, response: httpx.Response, guard: _Guard) -> LlmError:
        body = await self._read_capped(response, guard)
        return http_error(response.status_code, body, response.headers, who=self.name)


class _Guard:
    """Races network awaits against the abort signal and a deadline, so neither waits on a silent server."""

    def __init__(self, signal: AbortSignal | None) -> None:
        self.signal = signal
        self._aborted: asyncio.Future[None] | None = None
        self._remove: Any = None
        if signal is not None:
            self._aborted = asyncio.get_running_loop().create_future()
            self._remove = signal.add_listener(self._on_abort)

    def _on_abort(self, _reason: object) -> None:
        if self._aborted is not None and not self._aborted.done():
            self._aborted.set_result(None)

    async def run(self, awaitable: Awaitable[_T], deadline: float | None, doing: str) -> _T:
        if self.signal is not None and self.signal.aborted:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise self.signal.error()
        if self._aborted is None and deadline is None:
            return await awaitable
        task = asyncio.ensure_future(awaitable)
        waiters: set[asyncio.Future[Any]] = {task}
        if self._aborted is not None:
            waiters.add(self._aborted)
        timeout = None if deadline is None else max(deadline - asyncio.get_running_loop().time(), 0.0)
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.done() and not task.cancelled():
            return task.result()
        if self.signal is not None and self.signal.aborted:
            raise self.signal.error()
        raise LlmError(f"timed out: {doing}", ErrorCode.TIMEOUT)

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None


async def _aiter_guarded(iterator: AsyncIterator[bytes], guard: _Guard) -> AsyncIterator[bytes]:
    while (piece := await guard.run(anext(iterator, None), None, "no error body")) is not None:
        yield piece
