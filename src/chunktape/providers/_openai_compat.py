"""A real provider adapter for OpenAI-compatible ``/chat/completions`` streaming, on httpx2; DeepSeek by default.

Error mapping (every failure is an ``LlmError``):

- non-2xx -> ``PROVIDER_HTTP_ERROR`` with ``status``, ``retry_after`` (``Retry-After`` seconds or HTTP-date,
  or ``retry-after-ms``) and the provider's message from the JSON body, whatever its content type;
- connect failures (``could not connect to <url>``) and a connection breaking mid-body -> ``STREAM_ABORTED``;
- a 2xx body with no SSE in it at all (an HTML page, a proxy's login form) -> ``INVALID_RESPONSE`` with the
  content type and a snippet;
- no response within ``timeout``, or no *data* event within ``idle_timeout`` (keep-alive comments do not
  count; nor does the time the consumer takes between chunks: that is not the provider's silence) -> ``TIMEOUT``;
- unparseable data -> ``INVALID_RESPONSE``; in-band error objects and ``event: error`` -> see
  ``chunktape.wire._openai_chat`` (``PROVIDER_HTTP_ERROR`` if they carry a status, else ``STREAM_ABORTED``);
- the abort signal -> ``CANCELLED``, with the HTTP response closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import msgspec

from chunktape._abort import AbortSignal
from chunktape._cassettes.response import ResponseObserver, response_sink
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
from chunktape.wire._http_errors import http_error
from chunktape.wire._openai_chat import (
    DEEPSEEK_BASE_URL,
    DEEPSEEK_REASONING,
    OPENAI_REASONING,
    OpenAIChatDecoder,
    not_an_event_stream,
    options_to_openai_request,
)
from chunktape.wire._sse import SseComment, SseEvent, SseParser

__all__ = ["DEEPSEEK_BASE_URL", "DEEPSEEK_REASONING", "OPENAI_REASONING", "OpenAICompatAdapter"]

_T = TypeVar("_T")
_MAX_ERROR_BODY = 64 * 1024


class OpenAICompatAdapter(LlmAdapter):
    """Streams ``POST {base_url}/chat/completions`` as StreamChunks.

    ``api_key`` defaults to ``$DEEPSEEK_API_KEY``; ``model`` is used when ``options.model`` is empty.
    ``reasoning`` maps each offered effort id to the request fields it adds (default: DeepSeek's thinking
    switch for api.deepseek.com, else ``reasoning_effort`` low/medium/high). Pass ``client`` (an
    ``httpx2.AsyncClient``, or an ``httpx.AsyncClient``) to share a connection pool or plug in a transport
    (``FaultTransport``); the adapter then never closes it. Without one it builds an ``httpx2.AsyncClient``.
    """

    def __init__(
        self,
        base_url: str = DEEPSEEK_BASE_URL,
        api_key: str | None = None,
        model: str | None = None,
        *,
        client: AnyAsyncClient | None = None,
        timeout: float = 60.0,
        idle_timeout: float | None = 120.0,
        reasoning: Mapping[str, Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("DEEPSEEK_API_KEY")
        self.secrets = (self.api_key,) if self.api_key else ()
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
        url = f"{self.base_url}/chat/completions"
        loop = asyncio.get_running_loop()
        guard = _Guard(signal)
        response: AnyResponse | None = None
        raw: AsyncIterator[bytes] | None = None
        sink = response_sink().get()  # set while a recorder records this stream: it keeps the answer's metadata
        observer: ResponseObserver | None = None
        try:
            headers = self._headers_for_request()
            response = await guard.run(lambda: post_streaming(client, url, body, headers), "no response headers")
            if sink is not None:
                streamed = response.headers.get("content-type", "").startswith("text/event-stream")
                observer = sink.observer = ResponseObserver(response.headers.multi_items(), streamed=streamed)
            if response.status_code >= 300:
                raise await self._http_error(response, guard)
            parser = SseParser()
            decoder = OpenAIChatDecoder()
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
                        raise not_an_event_stream(bytes(unparsed), response.headers.get("content-type"), who=self.name)
                for item in items:
                    chunks = decoder.feed_item(item, unterminated=item is parser.unterminated)
                    if observer is not None and isinstance(item, SseEvent) and item.data:
                        _observe(observer, item.data)
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

    async def _read_capped(self, response: AnyResponse, guard: _Guard) -> bytes:
        body = bytearray()
        async with contextlib.aclosing(_aiter_guarded(response.aiter_bytes(), guard)) as pieces:
            async for piece in pieces:
                body += piece
                if len(body) >= _MAX_ERROR_BODY:
                    break  # the rest is not read: ours and aiter_bytes are closed now, not at collection
        return bytes(body)

    async def _http_error(self, response: AnyResponse, guard: _Guard) -> LlmError:
        body = await self._read_capped(response, guard)
        error = http_error(response.status_code, body, response.headers, who=self.name)
        if self.secrets and any(secret in error.message for secret in self.secrets):
            # Some providers echo the key in a 401; whoever prints or records this error must not see it.
            error.message = redact_text(error.message, self.secrets)
            error.args = (error.message,)
        return error


_json = msgspec.json.Decoder()


def _observe(observer: ResponseObserver, data: str) -> None:
    """One event's JSON for the recorder's metadata (what does not decode, the decoder has reported)."""
    with contextlib.suppress(msgspec.DecodeError):
        observer.event(_json.decode(data))


class _Guard:
    """Bounds network awaits by the abort signal and an idle deadline, so neither waits on a silent server.

    Cheap enough for every read: no task, no timeout scope per await. ``deadline`` is a plain number the stream
    moves on real data; one timer follows it lazily (when it fires early it re-arms for the moved deadline),
    and when it is really due, or the abort signal fires, while the stream's task awaits the network (and
    only then), the task is cancelled and that cancellation becomes ``TIMEOUT`` or the signal's error.
    """

    __slots__ = ("_loop", "_reason", "_remove", "_timed", "_timer", "_waiting", "deadline", "signal")

    def __init__(self, signal: AbortSignal | None) -> None:
        self.signal = signal
        self._loop = asyncio.get_running_loop()
        self.deadline: float | None = None
        """The idle deadline (event-loop time) for timed reads; None for none."""
        self._timer: asyncio.TimerHandle | None = None
        self._waiting: asyncio.Task[Any] | None = None
        self._timed = False
        self._reason: str | None = None
        self._remove: Callable[[], None] | None = None
        if signal is not None:
            self._remove = signal.add_listener(self._on_abort)

    def set_deadline(self, deadline: float | None) -> None:
        """Move the idle deadline (the timer follows lazily)."""
        self.deadline = deadline
        if deadline is not None and self._timer is None:
            self._timer = self._loop.call_at(deadline, self._on_timer)

    def held(self, seconds: float) -> None:
        """The consumer took ``seconds`` with a chunk before asking for the next: that was not the provider's
        silence, so the idle deadline moves on by as much (its timer re-armed if it fired meanwhile)."""
        if self.deadline is not None and seconds > 0:
            self.set_deadline(self.deadline + seconds)

    def _on_timer(self) -> None:
        self._timer = None
        deadline = self.deadline
        if deadline is None:
            return
        if self._loop.time() < deadline:
            self._timer = self._loop.call_at(deadline, self._on_timer)
        elif self._timed:
            self._cancel("timeout")
        # Not in a timed read: the next one sees the deadline passed.

    def _on_abort(self, _reason: object) -> None:
        self._cancel("abort")

    def _cancel(self, reason: str) -> None:
        task = self._waiting
        if task is not None and self._reason is None:
            self._reason = reason
            task.cancel()

    async def run(self, start: Callable[[], Awaitable[_T]], doing: str, *, timed: bool = False) -> _T:
        """Await what ``start()`` returns; ``timed``: bounded by ``deadline``.

        ``start`` is called only once the signal and the deadline allow the wait: an awaitable made and then
        dropped unawaited (``anext()``'s) is reported by Python 3.13, and closing it unawaited breaks its
        generator there.
        """
        signal = self.signal
        if signal is not None and signal.aborted:
            raise signal.error()
        deadline = self.deadline if timed else None
        if deadline is not None and self._loop.time() >= deadline:
            raise LlmError(f"timed out: {doing}", ErrorCode.TIMEOUT)
        timed = deadline is not None
        awaitable = start()
        if signal is None and not timed:
            return await awaitable
        task = self._waiting = asyncio.current_task()
        self._timed = timed
        try:
            return await awaitable
        except asyncio.CancelledError:
            reason, self._reason = self._reason, None
            if reason is None or task is None:
                raise  # cancelled from outside: let it through
            task.uncancel()
            if signal is not None and signal.aborted:
                raise signal.error() from None
            raise LlmError(f"timed out: {doing}", ErrorCode.TIMEOUT) from None
        finally:
            self._waiting = None
            self._timed = False

    def close(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def _aiter_guarded(iterator: AsyncIterator[bytes], guard: _Guard) -> AsyncGenerator[bytes, None]:
    try:
        while (piece := await guard.run(lambda: anext(iterator, None), "no error body")) is not None:
            yield piece
    finally:
        await aclose_stream(iterator)
