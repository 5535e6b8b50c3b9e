"""``FaultTransport``: the fault catalogue applied to HTTP traffic, as an async transport of httpx2 or httpx.

Plug it in wherever an async client of either library takes a transport (wrapping a transport of the same
library); nothing is patched::

    client = httpx2.AsyncClient(transport=FaultTransport(httpx2.AsyncHTTPTransport(), ["http-429"]))
    adapter = OpenAICompatAdapter(base_url, client=client)
    sdk = openai.AsyncOpenAI(base_url=..., http_client=client)   # httpx.AsyncClient + httpx.AsyncHTTPTransport too

Per request, the faults are selected exactly as ``ReplayAdapter`` selects them (``FaultPlan``: ``FailFirst``,
``Chaos`` and ``Targeted`` count the requests; ``Targeted(model=..., match=...)`` reads the JSON body), and the
body goes through the same transforms as a chunk stream (``chunktape.faults._transforms``), over SSE frames.
At the HTTP layer a "chunk" (``after_chunks``) is one SSE ``data:`` event that carries content (text,
reasoning, a tool-call delta) or ends the answer (a finish reason, usage, ``[DONE]``): the opening role-only
event and other empty events are passed through uncounted, so ``disconnect-after-first-chunk`` delivers the
first piece of content, as it does at the chunk level, and differs from ``disconnect-before-first-chunk``.
Each fault becomes:

``HttpError``   the request never reaches ``inner``: the status, ``Retry-After``/``retry-after-ms`` and an
                OpenAI-style JSON error body (clients: ``PROVIDER_HTTP_ERROR``; openai: ``RateLimitError``...)
``Disconnect``  after N chunks (the first half of chunk N+1 is delivered), after T seconds, after exactly
                N bytes of the body, or right after the first event with content of the ``inside`` kind, the
                body raises the request's library's ``ReadError``; it never lets the finish event or ``[DONE]``
                through (clients: ``STREAM_ABORTED``; openai: ``APIConnectionError``)
``Stall``       silence for S seconds of loop time before chunk N+1; a silence longer than the request's read
                timeout (``timeout=`` of the SDK or client) raises that library's ``ReadTimeout`` when the timeout
                passes, as the network transport would (SDKs: their timeout error, e.g. openai's
                ``APITimeoutError``); before the first content event, the response itself is late
``Latency``     delay before the first data event and between events, with seeded jitter (read timeout: as a stall)
``Truncate``    the body ends cleanly after at most N chunks, before any finish/usage event and without
                ``[DONE]`` (clients: ``STREAM_ABORTED``, "ended before the provider finished it")
``Corrupt``     by ``kind``, on the OpenAI chat-chunk stream:

                ``malformed-data``      a ``data:`` line that is no chunk (cut-off JSON, not JSON, or invalid
                                        UTF-8, by ``seed``) before chunk 1-3 (by ``seed``) (clients:
                                        ``INVALID_RESPONSE``; the chunk level raises that error itself)
                ``bad-arguments-json``  one more ``arguments`` piece (``,`` ``}`` ``"`` or ``{``, by ``seed``)
                                        right after the first tool call's last piece, so its arguments are no
                                        longer JSON; a stream without tool calls gets a call whose arguments
                                        are ``{"broken":}`` before its finish (clients: ``INVALID_RESPONSE``)

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

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import msgspec

from chunktape._errors import LlmError
from chunktape._httpx import (
    AnyAsyncTransport,
    AnyRequest,
    AnyResponse,
    AsyncBody,
    DualTransport,
    aclose_inner,
    araw_pieces,
    response,
    send_async,
)
from chunktape._protocol import GenerateOptions, aclose_stream
from chunktape.faults import Fault, HttpError
from chunktape.faults._plan import ActiveFault, FaultPlan, FiredFault
from chunktape.faults._sse import check_faults, faulted
from chunktape.http._protocols import CHAT, WireProtocol, protocol_for
from chunktape.http._render import error_headers
from chunktape.http._routes import route_model
from chunktape.http._timeouts import TimedBody
from chunktape.wire._openai_chat import decode_chat_request

__all__ = ["FaultTransport"]

_decoder = msgspec.json.Decoder()
_HEAD_PIECES = 2
"""The faulty body's pieces a response waits for before it is handed over (``ReplayTransport``'s rule)."""
_NO_OPTIONS = GenerateOptions(model="", messages=[])


class FaultTransport(DualTransport):
    """Wraps the async transport ``inner`` (httpx2 or httpx) and injects faults into its responses; ``injected``
    lists the fault id per request. Async clients only: a sync client gets a ``TypeError`` saying what to use.

    Raises ``INVALID_CONFIG`` for a fault that has no form at the HTTP layer (see the module docstring).
    """

    def __init__(
        self,
        inner: AnyAsyncTransport,
        faults: Iterable[Fault | str | Mapping[str, Any]] = (),
        *,
        dribble: int | None = None,
    ) -> None:
        if dribble is not None and dribble < 1:
            raise ValueError("dribble must be >= 1 byte")
        self.inner = inner
        self.plan = FaultPlan(faults)
        """The faults with their per-request state (FailFirst counters, Chaos draws)."""
        check_faults(self.plan)
        self.dribble = dribble
        self.injected: list[str | None] = []
        """Per request, the id of the fault injected into it, or None."""

    async def _options(self, request: AnyRequest) -> GenerateOptions:
        try:
            return decode_chat_request(await request.aread(), model=route_model(request.url.path)).options
        except Exception:  # not a chat request: selectors that read the body simply do not match
            return _NO_OPTIONS

    def handle(self, request: AnyRequest) -> AnyResponse:
        raise TypeError(
            "FaultTransport is an async transport: give it to an httpx2.AsyncClient or httpx.AsyncClient; for a "
            "sync client, replay with ReplayTransport(cassette, faults=[...])"
        )

    async def handle_async(self, request: AnyRequest) -> AnyResponse:
        active = self.plan.select(await self._options(request)) if self.plan else None
        self.injected.append(None if active is None else active.fault_id)
        if active is None:
            return await send_async(self.inner, request)
        failed = active.http_error
        if failed is not None:
            return _error_response(*failed, request)
        upstream = await send_async(self.inner, request)
        content_type = upstream.headers.get("content-type", "")
        if not 200 <= upstream.status_code < 300 or not content_type.startswith("text/event-stream"):
            return upstream
        headers = [
            (name, value)
            for name, value in upstream.headers.multi_items()
            if name.lower() not in ("content-length", "content-encoding")
        ]
        report = _protocol(request).renderer(model="").error
        pieces = TimedBody(_faulty(upstream, active, request, report, dribble=self.dribble), request)

        async def close() -> None:
            try:
                await pieces.aclose()
            finally:
                await upstream.aclose()

        try:
            await pieces.prefetch(_HEAD_PIECES)
        except BaseException:
            await close()
            raise
        body = AsyncBody(pieces, close)
        return response(request, upstream.status_code, headers=headers, stream=body, extensions=upstream.extensions)

    async def aclose(self) -> None:
        await aclose_inner(self.inner)


def _protocol(request: AnyRequest) -> WireProtocol:
    """The wire protocol of ``request``'s route (chat completions unless it is a Messages or Responses one)."""
    return protocol_for(request.url.path) or CHAT


def _error_response(item: FiredFault, fault: HttpError, request: AnyRequest) -> AnyResponse:
    message = f"{fault.message or 'provider error'} [{item.label}]"
    body = _protocol(request).error_body(message, status=fault.status, retry_after=fault.retry_after)
    return response(
        request,
        fault.status,
        headers={"content-type": "application/json", **error_headers(fault.retry_after)},
        content=msgspec.json.encode(body),
    )


async def _faulty(
    upstream: AnyResponse,
    active: ActiveFault,
    request: AnyRequest,
    report: Callable[[LlmError], bytes],
    *,
    dribble: int | None,
) -> AsyncIterator[bytes]:
    """The upstream body through the fault's transforms, re-cut into ``dribble``-byte pieces if asked."""
    frames = faulted(araw_pieces(upstream), active, request, report)  # which closes the body's iterator at its end
    try:
        async for frame in frames:
            if dribble is None:
                yield frame.data
            else:
                for start in range(0, len(frame.data), dribble):
                    yield frame.data[start : start + dribble]
    finally:
        await aclose_stream(frames)
