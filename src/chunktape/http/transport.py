"""``FaultTransport``: the fault catalogue applied to HTTP traffic, as an ``httpx.AsyncBaseTransport``.

Plug it in wherever httpx takes a transport; nothing is patched::

    client = httpx.AsyncClient(transport=FaultTransport(httpx.AsyncHTTPTransport(), ["http-429"]))
    adapter = OpenAICompatAdapter(base_url, client=client)
    sdk = openai.AsyncOpenAI(base_url=..., http_client=client)   # the SDK accepts an httpx.AsyncClient

Per request, the faults are selected exactly as ``ReplayAdapter`` selects them (``FaultPlan``: ``FailFirst``,
``Chaos`` and ``Targeted`` count the requests; ``Targeted(model=..., match=...)`` reads the JSON body), and the
body goes through the same transforms as a chunk stream (``chunktape.faults.transforms``), over SSE frames.
At the HTTP layer a "chunk" (``after_chunks``) is one SSE ``data:`` event that carries content (text,
reasoning, a tool-call delta) or ends the answer (a finish reason, usage, ``[DONE]``): the opening role-only
event and other empty events are passed through uncounted, so ``disconnect-after-first-chunk`` delivers the
first piece of content, as it does at the chunk level, and differs from ``disconnect-before-first-chunk``.
Each fault becomes:

``HttpError``   the request never reaches ``inner``: the status, ``Retry-After``/``retry-after-ms`` and an
                OpenAI-style JSON error body (clients: ``PROVIDER_HTTP_ERROR``; openai: ``RateLimitError``...)
``Disconnect``  after N chunks (the first half of chunk N+1 is delivered), after T seconds, after exactly
                N bytes of the body, or right after the first event with content of the ``inside`` kind, the
                body raises ``httpx.ReadError``; it never lets the finish event or ``[DONE]`` through
                (clients: ``STREAM_ABORTED``; openai: ``APIConnectionError``)
``Stall``       silence for S seconds of loop time before chunk N+1
``Latency``     delay before the first data event and between events, with seeded jitter
``Truncate``    the body ends cleanly after at most N chunks, before any finish/usage event and without
                ``[DONE]`` (clients: ``STREAM_ABORTED``, "ended before the provider finished it")
``Corrupt``     by ``kind``, on the OpenAI chat-chunk stream:

                ``malformed-data``      a ``data:`` line that is no chunk (cut-off JSON, not JSON, or invalid
                                        UTF-8, by ``seed``) before chunk 1-3 (by ``seed``) (clients:
                                        ``INVALID_RESPONSE``; the chunk level raises that error itself)
                ``bad-arguments-json``  one more ``arguments`` piece (``,`` ``}`` ``"`` or ``{``, by ``seed``)
                                        right after the first tool call's last piece, so its arguments are no
                                        longer JSON; a stream without tool calls gets a call whose arguments
                                        are ``{"broken":`` before its finish (clients: ``INVALID_RESPONSE``)

                Every other kind has no form on this wire, and ``FaultTransport`` refuses it
                (``INVALID_CONFIG``) when it is built: the chat-chunk stream has no block starts, ends or
                block indexes (``unpaired-block``, ``bad-index``), parallel tool calls may interleave by
                index and clients reorder them (``interleaved``), and clients hold the finish reason and
                usage until the body ends, where OpenAI itself sends usage after the finish
                (``finish-not-last``, ``usage-after-finish``, ``duplicate-finish``).

Delays honour no abort signal here (httpx has none: closing the response or cancelling the task stops
them), and shift nothing upstream (``ActiveFault.delayed_s`` still counts them).
Responses that are not a 2xx event stream pass through untouched (only ``HttpError`` applies to them).
``dribble=n`` re-cuts every faulted body into pieces of ``n`` bytes, to exercise a client's parser.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import httpx
import msgspec

from chunktape.errors import ErrorCode, LlmError
from chunktape.faults import Corrupt, Fault, HttpError, fault_id
from chunktape.faults.plan import ActiveFault, FaultPlan, FiredFault
from chunktape.http.render import MALFORMED_EVENT, error_body, error_headers
from chunktape.protocol import BlockType, GenerateOptions, aclose_stream
from chunktape.wire.openai_chat import (
    DONE,
    REASONING_FIELDS,
    data_event,
    decode_chat_chunk,
    options_from_openai_request,
)
from chunktape.wire.sse import SseComment, SseItem, SseParser, write_sse

__all__ = ["FaultTransport"]

_decoder = msgspec.json.Decoder()
_NO_OPTIONS = GenerateOptions(model="", messages=[])
_MALFORMED = (
    MALFORMED_EVENT,
    b"data: this is not JSON\n\n",
    b'data: {"choices": \xff\xfe[]}\n\n',
)
_ARGUMENT_JUNK = (",", "}", '"', "{")
_REFUSED: Mapping[str, str] = {
    "unpaired-block": "the chat-chunk stream has no block starts or ends",
    "bad-index": "the chat-chunk stream has no block indexes",
    "interleaved": "parallel tool calls may interleave by index on the wire, and clients reorder them",
    "finish-not-last": "clients hold the finish reason until the body ends",
    "usage-after-finish": "usage after the finish is how OpenAI itself streams usage",
    "duplicate-finish": "clients hold the finish reason until the body ends",
}
"""Why each ``Corrupt`` kind without a wire form is refused (the module docstring explains the rest)."""


def _refusal(fault: Corrupt) -> LlmError | None:
    reason = _REFUSED.get(fault.kind)
    if reason is None:
        return None
    return LlmError(
        f"FaultTransport cannot apply {fault_id(fault)} to an HTTP body: {reason}; the Corrupt kinds it applies "
        "are malformed-data and bad-arguments-json (the others apply to chunk streams: ReplayAdapter, the "
        "replay server)",
        ErrorCode.INVALID_CONFIG,
    )


class _Frame:
    """One SSE item as bytes, with what a fault needs to know about it."""

    __slots__ = ("data", "ending", "is_data", "kinds", "tools")

    def __init__(
        self,
        data: bytes,
        *,
        is_data: bool = False,
        ending: bool = False,
        kinds: frozenset[BlockType] = frozenset(),
        tools: tuple[int, ...] = (),
    ) -> None:
        self.data = data
        self.is_data = is_data
        self.ending = ending
        """True for ``[DONE]`` and for events carrying a finish reason or usage: the end of the answer."""
        self.kinds = kinds
        self.tools = tools
        """The provider indexes of the tool calls this event carries pieces of."""

    @property
    def counts(self) -> bool:
        """Whether this is a "chunk" for ``after_chunks``: a data event with content, or one ending the answer."""
        return self.is_data and (self.ending or bool(self.kinds))


def _frame(item: SseItem) -> _Frame:
    data = write_sse([item])
    if isinstance(item, SseComment) or item.data is None or not item.data.strip():
        return _Frame(data)
    text = item.data.strip()
    if text == DONE:
        return _Frame(data, is_data=True, ending=True)
    try:
        chunk = decode_chat_chunk(text)
    except msgspec.DecodeError:
        return _Frame(data, is_data=True)
    kinds: set[BlockType] = set()
    tools: list[int] = []
    ending = chunk.usage is not None
    for choice in chunk.choices or ():
        delta = choice.delta
        if delta is not None:
            if delta.content:
                kinds.add("text")
            if delta.reasoning_content or delta.reasoning:
                kinds.add("reasoning")
            if delta.tool_calls:
                kinds.add("tool-call")
                tools.extend(call.index or 0 for call in delta.tool_calls)
        if choice.finish_reason is not None:
            ending = True
    return _Frame(data, is_data=True, ending=ending, kinds=frozenset(kinds), tools=tuple(tools))


def _tool_call_frame(index: int, arguments: str, *, name: str | None = None) -> _Frame:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if name is not None:
        call.update(id=f"call_{name}", type="function", function={"name": name, "arguments": arguments})
    data = data_event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]})
    return _Frame(data, is_data=True, kinds=frozenset({"tool-call"}), tools=(index,))


class _BadArguments:
    """``bad-arguments-json`` on the wire: the first tool call's arguments stop being JSON."""

    def __init__(self, fault: Corrupt) -> None:
        self.junk = random.Random(fault.seed).choice(_ARGUMENT_JUNK)
        self.call: int | None = None
        self.done = False

    def _broken(self) -> _Frame:
        self.done = True
        if self.call is not None:
            return _tool_call_frame(self.call, self.junk)
        return _tool_call_frame(0, '{"broken":', name="corrupt")

    def feed(self, frame: _Frame) -> list[_Frame]:
        if self.done:
            return [frame]
        if frame.tools:
            if self.call is None:
                self.call = frame.tools[0]
            if self.call in frame.tools:
                return [frame]
        if (self.call is not None and frame.is_data) or frame.ending:
            return [self._broken(), frame]  # the first call's pieces are over (or there was none)
        return [frame]

    def end(self) -> list[_Frame]:
        return [] if self.done else [self._broken()]


class _SseCodec:
    """The transforms' view of an SSE body (see the module docstring for what each fault becomes)."""

    can_cut = True
    bytes_of = "of the body"

    def __init__(self, request: httpx.Request) -> None:
        self.request = request

    def counts(self, item: _Frame) -> bool:
        return item.counts

    def paced(self, item: _Frame) -> bool:
        return item.is_data

    def finishes(self, item: _Frame) -> bool:
        return item.ending

    def tail(self, item: _Frame) -> bool:
        return item.ending

    def size(self, item: _Frame) -> int:
        return len(item.data)

    def cut(self, item: _Frame, size: int | None) -> _Frame:
        return _Frame(item.data[: max(len(item.data) // 2, 1) if size is None else size])

    def carries(self, item: _Frame, kind: BlockType) -> bool:
        return kind in item.kinds

    def opens(self, item: _Frame) -> BlockType | None:
        return None  # blocks are implicit in the chat-chunk stream

    def closes(self, item: _Frame) -> bool:
        return False

    def aborted(self, message: str) -> Exception:
        return httpx.ReadError(f"connection reset by peer {message}", request=self.request)

    def malformed(self, variant: int, label: str) -> _Frame:
        return _Frame(_MALFORMED[variant], is_data=True)

    def corrupter(self, fault: Corrupt, label: str) -> _BadArguments:
        refusal = _refusal(fault)
        if refusal is not None:
            raise refusal
        return _BadArguments(fault)


class FaultTransport(httpx.AsyncBaseTransport):
    """Wraps ``inner`` and injects faults into its responses; ``injected`` lists the fault id per request.

    Raises ``INVALID_CONFIG`` for a fault that has no form at the HTTP layer (see the module docstring).
    """

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
        for fault in self.plan.stream_faults():
            refusal = _refusal(fault) if isinstance(fault, Corrupt) else None
            if refusal is not None:
                raise refusal
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
        failed = active.http_error
        if failed is not None:
            return _error_response(*failed, request)
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
        stream = _FaultyBody(response, active, request, decoded=decoded, dribble=self.dribble)
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
        active: ActiveFault,
        request: httpx.Request,
        *,
        decoded: bool,
        dribble: int | None,
    ) -> None:
        self._response = response
        self._active = active
        self._request = request
        self._decoded = decoded
        self._dribble = dribble
        self._frames: AsyncIterator[_Frame] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        source = self._response.aiter_bytes() if self._decoded else _raw(self._response)
        frames = self._frames = self._active.apply(_parse(source), _SseCodec(self._request), None)
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
                yield _frame(item)
        for item in parser.close():
            yield _frame(item)
    finally:
        await aclose_stream(source)
