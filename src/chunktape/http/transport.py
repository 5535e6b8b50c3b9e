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

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import httpx
import msgspec

from chunktape.faults import Fault, HttpError
from chunktape.faults.plan import ActiveFault, FaultPlan, FiredFault
from chunktape.http.render import error_body, error_headers
from chunktape.http.sse_frames import Frame, check_faults, faulted
from chunktape.protocol import GenerateOptions, aclose_stream
from chunktape.wire.openai_chat import REASONING_FIELDS, options_from_openai_request

__all__ = ["FaultTransport"]

_decoder = msgspec.json.Decoder()
_NO_OPTIONS = GenerateOptions(model="", messages=[])


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
        check_faults(self.plan)
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
        self._frames: AsyncIterator[Frame] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        source = self._response.aiter_bytes() if self._decoded else _raw(self._response)
        frames = self._frames = faulted(source, self._active, self._request)
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
