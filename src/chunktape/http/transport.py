"""``FaultTransport``: the fault catalogue applied to HTTP traffic, as an ``httpx.AsyncBaseTransport``.

Plug it in wherever httpx takes a transport; nothing is patched::

    client = httpx.AsyncClient(transport=FaultTransport(httpx.AsyncHTTPTransport(), ["http-429"]))
    adapter = OpenAICompatAdapter(base_url, client=client)
    sdk = openai.AsyncOpenAI(base_url=..., http_client=client)   # the SDK accepts an httpx.AsyncClient

Per request, the faults are selected exactly as ``ReplayAdapter`` selects them (``FaultPlan``: ``FailFirst``,
``Chaos`` and ``Targeted`` count the requests; ``Targeted(model=..., match=...)`` reads the JSON body). At the
HTTP layer a "chunk" (``after_chunks``, the ``at`` of ``Corrupt``) is one SSE ``data:`` event that carries
content (text, reasoning, a tool-call delta) or ends the answer (a finish reason, usage, ``[DONE]``): the opening
role-only event and other empty events are passed through uncounted, so ``disconnect-after-first-chunk``
delivers the first piece of content, as it does at the chunk level, and differs from
``disconnect-before-first-chunk``. Each fault becomes:

``HttpError``   the request never reaches ``inner``: the status, ``Retry-After``/``retry-after-ms`` and an
                OpenAI-style JSON error body (clients: ``PROVIDER_HTTP_ERROR``; openai: ``RateLimitError``...)
``Disconnect``  after N chunks (the first half of chunk N+1 is delivered), after T seconds, after exactly
                N bytes of the body, or right after the first event with content of the ``inside`` kind, the
                body raises ``httpx.ReadError``; it
                never lets the finish event or ``[DONE]`` through (clients: ``STREAM_ABORTED``;
                openai: ``APIConnectionError``)
``Stall``       silence for S seconds (``asyncio.sleep``, so virtual time works) before chunk N+1
``Latency``     delay before the first data event and between events, with seeded jitter
``Truncate``    the body ends cleanly after at most N chunks, before any finish/usage event and without
                ``[DONE]`` (clients: ``STREAM_ABORTED``, "ended before the provider finished it")
``Corrupt``     a malformed ``data:`` line (cut-off JSON, not JSON, or invalid UTF-8, by ``seed``) before data
                chunk 1-3 (by ``seed``); every ``kind`` becomes unparseable data (clients: ``INVALID_RESPONSE``)

Responses that are not a 2xx event stream pass through untouched (only ``HttpError`` applies to them).
``dribble=n`` re-cuts every faulted body into pieces of ``n`` bytes, to exercise a client's parser.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import httpx
import msgspec

from chunktape.faults import Corrupt, Disconnect, Fault, HttpError, Latency, Stall, Truncate
from chunktape.http.render import MALFORMED_EVENT, error_body, error_headers
from chunktape.protocol import GenerateOptions, aclose_stream
from chunktape.replayer.injection import FaultPlan, FiredFault
from chunktape.wire.openai_chat import REASONING_FIELDS, options_from_openai_request
from chunktape.wire.sse import SseComment, SseItem, SseParser, write_sse

__all__ = ["FaultTransport"]

_decoder = msgspec.json.Decoder()
_NO_OPTIONS = GenerateOptions(model="", messages=[])
_MALFORMED = (
    MALFORMED_EVENT,
    b"data: this is not JSON\n\n",
    b'data: {"choices": \xff\xfe[]}\n\n',
)


class _PeekDelta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] | None = None


class _PeekChoice(msgspec.Struct):
    delta: _PeekDelta | None = None
    finish_reason: str | None = None


class _Peek(msgspec.Struct):
    choices: list[_PeekChoice] | None = None
    usage: Any = None


_peek_decoder = msgspec.json.Decoder(_Peek)


class _Frame:
    """One SSE item as bytes, with what a fault needs to know about it."""

    __slots__ = ("data", "ending", "is_data", "kinds")

    @property
    def counts(self) -> bool:
        """Whether this is a "chunk" for ``after_chunks``: a data event with content, or one ending the answer."""
        return self.is_data and (self.ending or bool(self.kinds))

    def __init__(self, item: SseItem) -> None:
        self.data = write_sse([item])
        self.is_data = False
        self.ending = False
        """True for ``[DONE]`` and for events carrying a finish reason or usage: the end of the answer."""
        self.kinds: frozenset[str] = frozenset()
        if isinstance(item, SseComment) or item.data is None or not item.data.strip():
            return
        self.is_data = True
        text = item.data.strip()
        if text == "[DONE]":
            self.ending = True
            return
        try:
            peek = _peek_decoder.decode(text)
        except msgspec.DecodeError:
            return
        kinds: set[str] = set()
        for choice in peek.choices or ():
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    kinds.add("text")
                if delta.reasoning_content or delta.reasoning:
                    kinds.add("reasoning")
                if delta.tool_calls:
                    kinds.add("tool-call")
            if choice.finish_reason is not None:
                self.ending = True
        if peek.usage is not None:
            self.ending = True
        self.kinds = frozenset(kinds)


class FaultTransport(httpx.AsyncBaseTransport):
    """Wraps ``inner`` and injects faults into its responses; ``injected`` lists the fault id per request."""

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport,
        faults: Iterable[Fault | str | Mapping[str, Any]] = (),
        *,
        dribble: int | None = None,
    ) -> None:
        if dribble is not None and dribble < 1:
            raise ValueError("dribble must be >= 1 byte")
        self.inner = inner
        self.plan = FaultPlan(faults)
        """The faults with their per-request state (FailFirst counters, Chaos draws)."""
        self.dribble = dribble
        self.injected: list[str | None] = []
        """Per request, the id of the fault injected into it, or None."""

    async def _options(self, request: httpx.Request) -> GenerateOptions:
        try:
            body = _decoder.decode(await request.aread())
            return options_from_openai_request(body, reasoning=REASONING_FIELDS)
        except Exception:  # not a chat request: selectors that read the body simply do not match
            return _NO_OPTIONS

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        active = self.plan.select(await self._options(request)) if self.plan else None
        self.injected.append(None if active is None else active.fault_id)
        if active is None:
            return await self.inner.handle_async_request(request)
        for item in active.fired:
            if isinstance(item.fault, HttpError):
                return _error_response(item, item.fault, request)
        response = await self.inner.handle_async_request(request)
        content_type = response.headers.get("content-type", "")
        if not 200 <= response.status_code < 300 or not content_type.startswith("text/event-stream"):
            return response
        headers = [
            (name, value)
            for name, value in response.headers.multi_items()
            if name.lower() not in ("content-length", "content-encoding")
        ]
        decoded = "content-encoding" in response.headers
        stream = _FaultyBody(response, active.fired, request, decoded=decoded, dribble=self.dribble)
        return httpx.Response(response.status_code, headers=headers, stream=stream, extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _error_response(item: FiredFault, fault: HttpError, request: httpx.Request) -> httpx.Response:
    message = f"{fault.message or 'provider error'} [{item.label}]"
    return httpx.Response(
        fault.status,
        headers={"content-type": "application/json", **error_headers(fault.retry_after)},
        content=msgspec.json.encode(error_body(message, status=fault.status, retry_after=fault.retry_after)),
        request=request,
    )


class _FaultyBody(httpx.AsyncByteStream):
    def __init__(
        self,
        response: httpx.Response,
        fired: tuple[FiredFault, ...],
        request: httpx.Request,
        *,
        decoded: bool,
        dribble: int | None,
    ) -> None:
        self._response = response
        self._fired = fired
        self._request = request
        self._decoded = decoded
        self._dribble = dribble
        self._frames: AsyncIterator[_Frame] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        source = self._response.aiter_bytes() if self._decoded else _raw(self._response)
        frames: AsyncIterator[_Frame] = _parse(source)
        for item in self._fired:
            frames = _apply(item, frames, self._request)
        self._frames = frames
        size = self._dribble
        async for frame in frames:
            if size is None:
                yield frame.data
            else:
                for start in range(0, len(frame.data), size):
                    yield frame.data[start : start + size]

    async def aclose(self) -> None:
        try:
            if self._frames is not None:
                await aclose_stream(self._frames)
        finally:
            await self._response.aclose()


async def _raw(response: httpx.Response) -> AsyncIterator[bytes]:
    """The body as sent; also for responses built with ``content=`` (``MockTransport``), already marked read."""
    stream = response.stream
    if not isinstance(stream, httpx.AsyncByteStream):
        raise TypeError("FaultTransport needs an async response stream from its inner transport")
    async for piece in stream:
        yield piece


async def _parse(source: AsyncIterator[bytes]) -> AsyncIterator[_Frame]:
    parser = SseParser()
    try:
        async for piece in source:
            for item in parser.feed(piece):
                yield _Frame(item)
        for item in parser.close():
            yield _Frame(item)
    finally:
        await aclose_stream(source)


def _apply(item: FiredFault, frames: AsyncIterator[_Frame], request: httpx.Request) -> AsyncIterator[_Frame]:
    fault = item.fault
    match fault:
        case Disconnect():
            return _disconnect(item, fault, frames, request)
        case Stall():
            return _stall(fault, frames)
        case Latency():
            return _latency(fault, frames)
        case Truncate():
            return _truncate(fault, frames)
        case Corrupt():
            return _corrupt(fault, frames)
        case HttpError():  # handled before the request is sent
            return frames


def _reset(item: FiredFault, request: httpx.Request, where: str) -> httpx.ReadError:
    return httpx.ReadError(f"connection reset by peer {where} [{item.label}]", request=request)


class _Partial(_Frame):
    """The start of a frame (its first half by default): what arrived before the connection broke."""

    def __init__(self, frame: _Frame, size: int | None = None) -> None:
        self.data = frame.data[: max(len(frame.data) // 2, 1) if size is None else size]
        self.is_data = self.ending = False
        self.kinds = frozenset()


async def _disconnect(
    item: FiredFault, fault: Disconnect, frames: AsyncIterator[_Frame], request: httpx.Request
) -> AsyncIterator[_Frame]:
    loop = asyncio.get_running_loop()
    deadline = None if fault.after_s is None else loop.time() + fault.after_s
    seen = 0
    sent = 0
    try:
        while True:
            try:
                if deadline is None:
                    frame = await anext(frames)
                else:
                    async with asyncio.timeout_at(deadline):
                        frame = await anext(frames)
            except StopAsyncIteration:
                raise _reset(item, request, f"before the end of the body, after {seen} chunk(s)") from None
            except TimeoutError:
                raise _reset(item, request, f"after {fault.after_s:g}s") from None
            if frame.counts:
                if frame.ending:
                    raise _reset(item, request, f"before the finish event, after {seen} chunk(s)")
                if fault.after_chunks is not None and seen >= fault.after_chunks:
                    yield _Partial(frame)
                    raise _reset(item, request, f"after {seen} chunk(s)")
                seen += 1
            if fault.after_bytes is not None and sent + len(frame.data) >= fault.after_bytes:
                yield _Partial(frame, fault.after_bytes - sent)
                raise _reset(item, request, f"after {fault.after_bytes} byte(s) of the body")
            sent += len(frame.data)
            yield frame
            if fault.inside is not None and fault.inside in frame.kinds:
                raise _reset(item, request, f"inside a {fault.inside} block, after {seen} chunk(s)")
    finally:
        await aclose_stream(frames)


async def _stall(fault: Stall, frames: AsyncIterator[_Frame]) -> AsyncIterator[_Frame]:
    seen = 0
    stalled = False
    try:
        async for frame in frames:
            if frame.counts and not stalled and seen == fault.after_chunks:
                stalled = True
                await asyncio.sleep(fault.seconds)
            if frame.counts:
                seen += 1
            yield frame
        if not stalled:
            await asyncio.sleep(fault.seconds)
    finally:
        await aclose_stream(frames)


async def _latency(fault: Latency, frames: AsyncIterator[_Frame]) -> AsyncIterator[_Frame]:
    rng = random.Random(fault.seed)
    first = True
    try:
        async for frame in frames:
            if frame.is_data:
                delay = fault.first_chunk_s if first else fault.between_s
                if fault.jitter_s:
                    delay += rng.uniform(0, fault.jitter_s)
                first = False
                if delay > 0:
                    await asyncio.sleep(delay)
            yield frame
    finally:
        await aclose_stream(frames)


async def _truncate(fault: Truncate, frames: AsyncIterator[_Frame]) -> AsyncIterator[_Frame]:
    seen = 0
    try:
        async for frame in frames:
            if frame.counts:
                if frame.ending or seen >= fault.after_chunks:
                    return
                seen += 1
            yield frame
    finally:
        await aclose_stream(frames)


class _Raw(_Frame):
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.is_data = True
        self.ending = False
        self.kinds = frozenset()


async def _corrupt(fault: Corrupt, frames: AsyncIterator[_Frame]) -> AsyncIterator[_Frame]:
    rng = random.Random(fault.seed)
    at = rng.randrange(1, 4)
    malformed = _Raw(_MALFORMED[rng.randrange(len(_MALFORMED))])
    seen = 0
    injected = False
    try:
        async for frame in frames:
            if frame.counts and not injected and (seen >= at or frame.ending):
                injected = True
                yield malformed
            if frame.counts:
                seen += 1
            yield frame
        if not injected:
            yield malformed
    finally:
        await aclose_stream(frames)
