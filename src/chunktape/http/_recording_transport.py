"""``RecordingTransport``: an SDK's chat-completion traffic teed into a chunk cassette, as it passes.

Wrap the transport an SDK's httpx2 or httpx client would use; nothing is patched::

    transport = RecordingTransport(httpx2.AsyncHTTPTransport(), "tests/cassettes/agent.msgpack")
    sdk = openai.AsyncOpenAI(base_url=..., api_key=..., http_client=httpx2.AsyncClient(transport=transport))
    ...
    await sdk.close()          # closing the client (or the transport) saves the cassette

One object serves httpx2 and httpx clients, sync and async (``inner`` must be a transport of the client's own
library and kind). Each ``POST .../chat/completions`` whose JSON body is a chat request is one interaction:

- an event stream: every body piece goes to the SDK as it arrives (never buffered) and is parsed on the way
  (``chunktape.wire``), each chunk stamped with the provider time it arrived at (``t_ns``; time the SDK spends
  between reads is not counted); how it ended is the outcome: the end of the body, an in-band error, a reset
  (``STREAM_ABORTED``), a read timeout (``TIMEOUT``), or the SDK closing it early (``Cancelled``);
- a JSON ``chat.completion``: its chunks, all at the time the body ended;
- an HTTP error (4xx/5xx): a ``Raised`` outcome with the status, the provider's message and ``Retry-After``.

With each, ``Interaction.response`` keeps what the chunk protocol has no field for: the response id, the model
as answered, ``created``, ``system_fingerprint``, request-id / ``openai-*`` / rate-limit headers and provider
extras (``ResponseMeta``), so ``ReplayTransport`` answers as the provider did. Other requests (other routes,
bodies that are no chat request) pass through unrecorded.

Secrets: request headers and URLs are never recorded; the credentials they carry (``Authorization``, ``api-key``,
``x-api-key``..., the URL's userinfo and credential-named query parameters: ``?api_key=``, ``&sig=``) are redacted
wherever else they appear (echoed text, error messages, kept headers, ``system_fingerprint``), with the
``*_API_KEY`` / ``*_TOKEN`` / ``*_SECRET`` environment values and key-shaped strings in the recorded metadata,
and checked at save like every recording (``RecordingAdapter``: journal, redaction, ``SECRET_DETECTED``,
failed-path rules).
"""

from __future__ import annotations

import asyncio
import os
import time
import warnings
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from chunktape._cassettes.model import Cancelled, Completed, Raised, ResponseMeta
from chunktape._cassettes.response import ResponseObserver, kept_headers, redacted_meta
from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import (
    DECODING_ERRORS,
    HTTP_ERRORS,
    TIMEOUT_ERRORS,
    AnyAsyncTransport,
    AnyRequest,
    AnyResponse,
    AnyTransport,
    AsyncBody,
    DualTransport,
    SyncBody,
    aclose_inner,
    araw_pieces,
    close_inner,
    raw_pieces,
    response,
    send,
    send_async,
)
from chunktape._limits import MAX_DECODED_BYTES, MAX_ERROR_BODY_BYTES
from chunktape._protocol import GenerateOptions, LlmAdapter, StreamChunk, aclose_stream
from chunktape._recorder import ProviderClock, RecordingAdapter, RecordingCall, raised_from, sent_as
from chunktape._secrets import redact_url, url_secrets
from chunktape.http._protocols import CHAT, WireProtocol, protocol_for
from chunktape.http._routes import CHAT_PATH, route_model
from chunktape.http._vcr import SECRET_HEADERS
from chunktape.wire._http_errors import http_error
from chunktape.wire._openai_chat import DONE, not_an_event_stream
from chunktape.wire._sse import SseEvent, SseParser

__all__ = ["CHAT_PATH", "RecordingTransport", "UnrecordedRequestWarning"]

_decoder = msgspec.json.Decoder()


class UnrecordedRequestWarning(UserWarning):
    """A chat-completions request that the chunk cassette cannot represent passed through unrecorded."""


def _credentials(request: AnyRequest) -> list[str]:
    """The credentials a request carries: in its headers (the bearer token without its scheme), and in its URL
    (userinfo, credential-named query parameters such as ``?api_key=``: ``url_secrets``)."""
    found = url_secrets(str(request.url))
    for name, value in request.headers.items():
        if name.lower() in SECRET_HEADERS and value:
            scheme, _, token = value.partition(" ")
            found.append(token if scheme.lower() == "bearer" and token else value)
    return found


class _Source(LlmAdapter):
    """The recorder's view of the HTTP traffic: its name, and the credentials seen in request headers."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.secrets = self.seen  # the recorder reads the credentials seen so far

    @property
    def name(self) -> str:
        return "http-transport"

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        raise LlmError(
            "a RecordingTransport records HTTP traffic; it has no stream of its own", ErrorCode.INVALID_CONFIG
        )
        yield  # pragma: no cover - makes this an async generator


class _Exchange:
    """One recorded request/response, sans I/O: ``piece()`` per body piece as it arrives, then one of
    ``done()``, ``failed(error)`` or ``closed()``; writes the interaction through a ``RecordingCall``."""

    def __init__(
        self, call: RecordingCall, clock: ProviderClock, secrets: Sequence[str], protocol: WireProtocol = CHAT
    ) -> None:
        self.protocol = protocol
        self.call = call
        self.clock = clock
        self.secrets = secrets
        self.status = 0
        self.headers: dict[str, str] = {}
        self.streaming = False
        self.observer = ResponseObserver()
        """What a chat-completions answer carried beyond its chunks (id, model, headers, extras)."""
        self.meta = ResponseMeta()
        """What another protocol's answer carried: its headers and envelope (``WireProtocol.observed``)."""
        self.parser: SseParser | None = None
        self.decoder = protocol.decoder()
        self.body: list[bytes] = []
        """The body of a JSON answer or an error, up to ``keep`` bytes (the client still gets all of it)."""
        self.kept = 0
        """How many bytes of that body arrived (those past ``keep`` were passed on, not kept)."""
        self.keep = MAX_DECODED_BYTES
        self.broken = False
        """True once the outcome is recorded: later bytes only pass through."""

    def answered(self, reply: AnyResponse) -> None:
        """The response head arrived (the wait for it is provider time)."""
        self.clock.arrived()
        self.status = reply.status_code
        self.headers = dict(reply.headers.items())
        content_type = reply.headers.get("content-type", "")
        self.streaming = 200 <= self.status < 300 and content_type.startswith("text/event-stream")
        self.observer = ResponseObserver(reply.headers.multi_items(), streamed=self.streaming)
        self.meta = ResponseMeta(headers=kept_headers(reply.headers.multi_items()), streamed=self.streaming)
        self.parser = SseParser() if self.streaming else None
        self.keep = MAX_DECODED_BYTES if 200 <= self.status < 300 else MAX_ERROR_BODY_BYTES

    def piece(self, data: bytes) -> None:
        t_ns = self.clock.arrived()
        if self.parser is None:
            room = self.keep - self.kept
            if room > 0:
                self.body.append(data[:room])
            self.kept += len(data)
        elif not self.broken:
            try:
                for item in self.parser.feed(data):
                    self._item(item, t_ns)
            except LlmError as error:
                self._end(Raised.from_error(error, t_ns=t_ns))

    def _item(self, item: Any, t_ns: int, *, unterminated: bool = False) -> None:
        if (
            self.protocol is CHAT
            and isinstance(item, SseEvent)
            and item.data is not None
            and item.data.strip() not in ("", DONE)
        ):
            self._observe(item.data)
        for chunk in self.decoder.feed_item(item, unterminated=unterminated):
            self.call.chunk(t_ns, chunk)

    def _observe(self, data: str) -> None:
        """Keep the response metadata this chunk JSON carries (``ResponseObserver``)."""
        try:
            obj = _decoder.decode(data)
        except msgspec.DecodeError:
            return  # the decoder reports it
        self.observer.event(obj)

    def done(self) -> None:
        """The body ended: decode what is left and record the outcome."""
        t_ns = self.clock.arrived()
        if self.call.ended:
            return
        try:
            if self.parser is not None:
                for item in self.parser.close():
                    self._item(item, t_ns, unterminated=item is self.parser.unterminated)
                self._chunks(self.decoder.close(), t_ns)
            else:
                self._whole(b"".join(self.body), t_ns)
        except LlmError as error:
            self._end(Raised.from_error(error, t_ns=t_ns))
            return
        self._end(Completed(t_ns=t_ns))

    def _whole(self, body: bytes, t_ns: int) -> None:
        """A JSON completion, or an error answer: raises the ``LlmError`` it records."""
        if not 200 <= self.status < 300:
            raise self._error(body)
        if self.kept > self.keep:
            raise LlmError(
                f"the JSON answer is {self.kept:,} bytes, over the {self.keep:,} a recording keeps; it was passed "
                "on, not recorded",
                ErrorCode.INVALID_RESPONSE,
            )
        try:
            obj = _decoder.decode(body)
        except msgspec.DecodeError:
            obj = None
        chunks = self.protocol.decode_whole(obj)
        if chunks is None or not isinstance(obj, dict):
            raise not_an_event_stream(body, self.headers.get("content-type"), streams=self.protocol.streams)
        if self.protocol is CHAT:
            self.observer.completion(obj)
        else:
            self.meta = self.protocol.observed_whole(self.meta, obj)
        self._chunks(chunks, t_ns)

    def _error(self, body: bytes) -> LlmError:
        """The provider's error for its answer; when its body was longer than what is kept, the message says so."""
        error = http_error(self.status, body, self.headers)
        if self.kept <= self.keep:
            return error
        note = f" (the error body was {self.kept:,} bytes; the first {self.keep:,} were kept)"
        return LlmError(
            error.message + note, error.code, status=error.status, retry_after=error.retry_after, hint=error.hint
        )

    def _chunks(self, chunks: list[StreamChunk], t_ns: int) -> None:
        for chunk in chunks:
            self.call.chunk(t_ns, chunk)

    def failed(self, error: BaseException) -> None:
        """Reading the body raised: a reset, a read timeout, or something else."""
        t_ns = self.clock.arrived()
        outcome: Raised | Cancelled
        if isinstance(error, LlmError):
            outcome = Raised.from_error(error, t_ns=t_ns)
        elif isinstance(error, DECODING_ERRORS):
            outcome = Raised(
                t_ns=t_ns,
                code=ErrorCode.INVALID_RESPONSE.value,
                message=f"the response body could not be decoded ({self.headers.get('content-encoding', 'no')} "
                f"content-encoding): {error}",
            )
        elif isinstance(error, TIMEOUT_ERRORS):
            outcome = Raised(t_ns=t_ns, code=ErrorCode.TIMEOUT.value, message=f"the read timed out: {error}")
        elif isinstance(error, HTTP_ERRORS):
            outcome = Raised(
                t_ns=t_ns, code=ErrorCode.STREAM_ABORTED.value, message=f"the connection broke mid-body: {error}"
            )
        elif isinstance(error, asyncio.CancelledError | GeneratorExit):
            if self.status:
                # The body read was cancelled, as a client closing the body is (a proxy's client hanging up
                # after ``[DONE]`` cancels the relay mid-read): complete if the stream had already finished.
                self.closed(reason="the body read was cancelled")
                return
            outcome = Cancelled(t_ns=t_ns, reason="the request was cancelled before the answer came")
        else:
            outcome = raised_from(error, t_ns=t_ns) if isinstance(error, Exception) else Cancelled(t_ns=t_ns)
        self._end(outcome)

    def closed(self, reason: str = "the client closed the response before its end") -> None:
        """The SDK closed the body: complete if the stream had already finished, else cut short."""
        if self.call.ended:
            return
        t_ns = self.clock.arrived()
        finished = self.protocol is CHAT and self.observer.finish_sent
        if self.parser is not None and (self.decoder.done or finished):
            try:
                self._chunks(self.decoder.close(), t_ns)
            except LlmError as error:
                self._end(Raised.from_error(error, t_ns=t_ns))
                return
            self._end(Completed(t_ns=t_ns))
            return
        if not 200 <= self.status < 300:
            # An SDK that retries an error status (a 429, a 503) closes it unread: its status line and headers
            # are the provider's answer, and a replay must give them back for the SDK to retry again.
            self._end(Raised.from_error(self._error(b"".join(self.body)), t_ns=t_ns))
            return
        self._end(Cancelled(t_ns=t_ns, reason=reason))

    def _end(self, outcome: Raised | Completed | Cancelled) -> None:
        self.broken = True
        if self.protocol is CHAT:
            meta = self.observer.meta()
        else:  # the protocol keeps its own envelope (Anthropic's message, Responses' response)
            meta = self.protocol.observed(self.meta, self.decoder) if self.streaming else self.meta
            meta = msgspec.structs.replace(meta, finish_sent=True)
        self.call.respond(redacted_meta(meta, self.secrets))
        self.call.end(outcome)


def _passed_on(reply: AnyResponse) -> list[tuple[str, str]]:
    """The headers the client gets: a body that was content-encoded is passed on decoded (it is parsed on the
    way, and the tee must not hold an undecoded copy), so its encoding and length no longer apply."""
    if "content-encoding" not in reply.headers:
        return list(reply.headers.multi_items())
    return [(k, v) for k, v in reply.headers.multi_items() if k.lower() not in ("content-encoding", "content-length")]


def _tee(reply: AnyResponse, exchange: _Exchange) -> Iterator[bytes]:
    pieces = raw_pieces(reply)
    try:
        while True:
            exchange.clock.waiting()
            try:
                piece = next(pieces)
            except StopIteration:
                break
            exchange.piece(piece)
            yield piece
    except GeneratorExit:
        exchange.closed()
        raise
    except BaseException as error:
        exchange.failed(error)
        raise
    exchange.done()


async def _atee(reply: AnyResponse, exchange: _Exchange) -> AsyncGenerator[bytes, None]:
    pieces = araw_pieces(reply)
    try:
        while True:
            exchange.clock.waiting()
            try:
                piece = await anext(pieces)
            except StopAsyncIteration:
                break
            exchange.piece(piece)
            yield piece
    except GeneratorExit:
        exchange.closed()
        raise
    except BaseException as error:
        exchange.failed(error)
        raise
    finally:
        await aclose_stream(pieces)
    exchange.done()


class RecordingTransport(DualTransport):
    """Wraps ``inner`` (an httpx2 or httpx transport, sync or async) and records its chat completions.

    ``cassette`` and the keywords are ``RecordingAdapter``'s (``redact``, ``allow_secrets``, ``append``,
    ``journal``, ``tags``); ``recorder`` is that adapter. ``clock`` (seconds) stamps the events: by default the
    running loop's clock for async clients (virtual time works) and ``time.monotonic`` for sync ones.
    Closing the transport (its client) closes ``inner`` and saves the cassette; ``save()`` saves it now.
    """

    def __init__(
        self,
        inner: AnyTransport | AnyAsyncTransport,
        cassette: str | os.PathLike[str],
        *,
        redact: bool | Sequence[str] = True,
        allow_secrets: Sequence[str] = (),
        append: bool = False,
        journal: bool = True,
        tags: Mapping[str, str] | None = None,
        clock: Callable[[], float] | None = None,
        on_unrecorded: Callable[[str], None] | None = None,
    ) -> None:
        self.inner = inner
        self._source = _Source()
        self.recorder = RecordingAdapter(
            self._source,
            cassette,
            redact=redact,
            allow_secrets=allow_secrets,
            append=append,
            journal=journal,
            tags=tags,
        )
        self.clock = clock
        self.on_unrecorded = on_unrecorded
        """Told (one line) of a chat-completions request passed through unrecorded; None: an
        ``UnrecordedRequestWarning`` (a server thread, the proxy, logs it instead)."""
        self._saved = False
        self._warned: set[str] = set()

    @property
    def path(self) -> Path:
        return self.recorder.path

    def _unrecorded(self, request: AnyRequest) -> None:
        """Traffic the chunk cassette cannot hold (another route or protocol): said once per route, then passed on
        (a proxy, which gives ``on_unrecorded``, says so itself)."""
        route = f"{request.method} {request.url.path}"
        if self.on_unrecorded is not None or request.method == "GET" or route in self._warned:
            return  # a model list or a health check: nothing a replay would need
        self._warned.add(route)
        warnings.warn(
            f"{route} is not recorded into {self.path}: chunktape records chat completions, Anthropic Messages and "
            "OpenAI Responses (POST .../chat/completions, .../messages, .../responses); this route's requests pass "
            "through to the provider unrecorded",
            UnrecordedRequestWarning,
            stacklevel=5,
        )

    @staticmethod
    def records(method: str, path: str) -> bool:
        """Whether a request of ``method`` to ``path`` is one this transport records (a model request of a protocol
        it speaks: chat completions, Azure's route included, Messages, Responses); the others pass through
        unrecorded (said once per route)."""
        return method.upper() == "POST" and protocol_for(path) is not None

    def _start(self, request: AnyRequest, now: Callable[[], float]) -> _Exchange | None:
        """The recording of ``request``, if it is a model request (chat completions, Messages, Responses; else None:
        it passes through unrecorded)."""
        protocol = protocol_for(request.url.path) if request.method.upper() == "POST" else None
        if protocol is None:
            self._unrecorded(request)
            return None
        seen = self._source.seen
        seen.extend(secret for secret in _credentials(request) if secret not in seen)
        try:
            decoded = protocol.decode_request(request.content, model=route_model(request.url.path))
        except LlmError as error:
            message = f"{request.method} {redact_url(str(request.url))} passed through unrecorded: {error.message}"
            if self.on_unrecorded is not None:
                self.on_unrecorded(message)
            else:
                warnings.warn(message, UnrecordedRequestWarning, stacklevel=4)
            return None
        clock = ProviderClock(now)
        sent = sent_as(protocol.name, streaming=decoded.streaming, include_usage=decoded.include_usage)
        return _Exchange(self.recorder.begin(decoded.options, sent=sent), clock, seen, protocol)

    def handle(self, request: AnyRequest) -> AnyResponse:
        request.read()
        exchange = self._start(request, self.clock or time.monotonic)
        if exchange is None:
            return send(self.inner, request)
        try:
            reply = send(self.inner, request)
        except BaseException as error:
            exchange.failed(error)
            raise
        exchange.answered(reply)
        body = SyncBody(_tee(reply, exchange), lambda: _close(reply, exchange))
        return response(request, reply.status_code, headers=_passed_on(reply), stream=body, extensions=reply.extensions)

    async def handle_async(self, request: AnyRequest) -> AnyResponse:
        await request.aread()
        exchange = self._start(request, self.clock or asyncio.get_running_loop().time)
        if exchange is None:
            return await send_async(self.inner, request)
        try:
            reply = await send_async(self.inner, request)
        except BaseException as error:
            exchange.failed(error)
            raise
        exchange.answered(reply)
        tee = _atee(reply, exchange)
        body = AsyncBody(tee, lambda: _aclose(tee, reply, exchange))
        return response(request, reply.status_code, headers=_passed_on(reply), stream=body, extensions=reply.extensions)

    def save(self) -> None:
        """Write the cassette now (``RecordingAdapter.save``: redacted, checked, atomic)."""
        self.recorder.save()

    def _save_once(self) -> None:
        if not self._saved:
            self._saved = True
            self.save()

    def close(self) -> None:
        try:
            close_inner(self.inner)
        finally:
            self._save_once()

    async def aclose(self) -> None:
        try:
            await aclose_inner(self.inner)
        finally:
            self._save_once()


def _close(reply: AnyResponse, exchange: _Exchange) -> None:
    exchange.closed()
    reply.close()


async def _aclose(tee: AsyncGenerator[bytes, None], reply: AnyResponse, exchange: _Exchange) -> None:
    """The SDK closed the body: the tee first, so it and the upstream body it reads end now, not at collection."""
    try:
        await tee.aclose()
    finally:
        exchange.closed()
        await reply.aclose()
