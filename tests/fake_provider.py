"""A loopback OpenAI-compatible provider for tests: starlette + uvicorn on 127.0.0.1, in a background thread.

Tests queue ``FakeResponse``s (status, headers, SSE body whole or dribbled, a mid-body reset, a stall that
sends keep-alive comments until the client leaves) and inspect the requests the server saw. The server runs
in its own thread and event loop, so sync code (the CLI under ``CliRunner``), other event loops and SDKs can
all reach it. Reuse it through the ``fake_provider`` fixture in ``tests/conftest.py``.

Also here: builders for DeepSeek/OpenAI-style chunk JSON and SSE bodies, and synthetic streams that
reproduce each feature of the real captures in ``../shared/captures`` without copying them.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from chunktape.http._server.running import StoppableServer


class ServerReset(Exception):
    """Raised inside the body generator: uvicorn then drops the connection mid-body."""


@dataclass
class FakeResponse:
    """What the fake provider answers to the next request."""

    body: bytes | Sequence[bytes] = b""
    """The body, whole or as pieces (each piece is written separately)."""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream; charset=utf-8"
    piece_size: int | None = None
    """Dribble the body this many bytes at a time."""
    reset_after: int | None = None
    """Drop the connection after this many body bytes."""
    stall: bool = False
    """After the body, send ``: keep-alive`` comments (never data) until the client disconnects."""
    keepalive_interval: float = 0.01
    headers_delay: float = 0.0
    """Wait this long before answering at all (no status line yet)."""
    release: threading.Event | None = None
    """If given, the rest of the body waits after the first piece until the test sets this."""


@dataclass
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]
    json: Any
    disconnected: threading.Event = field(default_factory=threading.Event)
    """Set when the client went away before this request's body was complete."""


class FakeProvider:
    """The running server: ``url`` (the base URL, no ``/v1``), ``enqueue()``, ``requests``, ``disconnects``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[FakeResponse] = deque()
        self.requests: list[SeenRequest] = []
        self.disconnects = 0
        """How many bodies ended because the client went away (not because the body was done)."""
        self.completed = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        app = Starlette(
            routes=[
                Route("/chat/completions", self._handle, methods=["POST"]),
                Route("/v1/chat/completions", self._handle, methods=["POST"]),
                Route("/v1/messages", self._handle, methods=["POST"]),  # Anthropic's: answered the same way
                Route("/v1/responses", self._handle, methods=["POST"]),  # OpenAI Responses: likewise
                Route("/v1/embeddings", self._handle, methods=["POST"]),  # an API chunktape does not record
                Route("/openai/deployments/{deployment}/chat/completions", self._handle, methods=["POST"]),  # Azure
            ]
        )
        config = uvicorn.Config(
            app, log_config=None, log_level="critical", access_log=False, lifespan="off", ws="none", http="h11"
        )
        # A stream a test left stalled is cancelled at the end of the session, not waited on for a second.
        self._server = StoppableServer(config, grace=0.1)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def start(self) -> None:
        # The socket already listens, so clients can connect before uvicorn's loop is up; no waiting needed.
        self._thread.start()

    def stop(self) -> None:
        self._server.exit()
        self._thread.join(timeout=10)
        self._sock.close()

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.disconnects = 0
            self.completed = 0

    def enqueue(self, *responses: FakeResponse) -> None:
        with self._lock:
            self._queue.extend(responses)

    async def wait_disconnected(self, request: int = -1, limit_s: float = 10.0) -> bool:
        """True once the client left request ``request`` mid-body (waits in a thread, not on the test's loop).

        Per request, so a body still draining from an earlier test can never answer for this one.
        """
        seen = self.requests[request]
        return await asyncio.to_thread(seen.disconnected.wait, limit_s)

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        seen = SeenRequest(request.method, request.url.path, dict(request.headers), body)
        with self._lock:
            self.requests.append(seen)
            spec = self._queue.popleft() if self._queue else None
        if spec is None:
            return JSONResponse({"error": {"message": "fake provider: no response queued"}}, status_code=500)
        if spec.headers_delay:
            await asyncio.sleep(spec.headers_delay)
        return StreamingResponse(
            self._body(spec, seen), status_code=spec.status, headers=spec.headers, media_type=spec.content_type
        )

    async def _body(self, spec: FakeResponse, seen: SeenRequest) -> AsyncIterator[bytes]:
        finished = False
        try:
            sent = 0
            for number, piece in enumerate(_pieces(spec)):
                if spec.reset_after is not None and sent + len(piece) > spec.reset_after:
                    head = piece[: spec.reset_after - sent]
                    if head:
                        yield head
                        await asyncio.sleep(0.01)
                    raise ServerReset("fake provider: connection reset mid-body")
                sent += len(piece)
                yield piece
                if spec.release is not None and number == 0:
                    await asyncio.to_thread(spec.release.wait, 30)
                elif spec.piece_size is not None:
                    await asyncio.sleep(0)
            while spec.stall:
                await asyncio.sleep(spec.keepalive_interval)
                yield b": keep-alive\n\n"
            finished = True
        finally:
            with self._lock:
                if finished:
                    self.completed += 1
                elif spec.reset_after is None:
                    self.disconnects += 1
                    seen.disconnected.set()


def _pieces(spec: FakeResponse) -> Iterator[bytes]:
    pieces = [spec.body] if isinstance(spec.body, bytes) else list(spec.body)
    for piece in pieces:
        if spec.piece_size is None:
            yield piece
        else:
            for start in range(0, len(piece), spec.piece_size):
                yield piece[start : start + spec.piece_size]


class DribbleTransport(httpx.AsyncBaseTransport):
    """Re-cuts every response body into pieces of ``size`` bytes on the client side, deterministically.

    The loopback network coalesces small writes; this guarantees the parser sees a field, a CR LF and a
    UTF-8 character split across reads.
    """

    def __init__(self, size: int = 3) -> None:
        self.size = size
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Dribble(response, self.size),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Dribble(httpx.AsyncByteStream):
    def __init__(self, response: httpx.Response, size: int) -> None:
        self._response = response
        self._size = size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._response.aiter_raw():
            for start in range(0, len(piece), self._size):
                yield piece[start : start + self._size]

    async def aclose(self) -> None:
        await self._response.aclose()


@asynccontextmanager
async def raw_http_server(response: bytes) -> AsyncIterator[str]:
    """A one-shot loopback server on the test's own loop: reads the request head and body, writes ``response``
    (raw bytes: status line, headers, body) and closes the connection, so a body can end by connection close.
    Yields the base URL.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)
        writer.write(response)
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


# -- chunk JSON and SSE builders -------------------------------------------------------------------


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
    choices: bool = True,
    model: str = "deepseek-chat",
    **top: Any,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` in DeepSeek's shape (``usage: null`` unless given)."""
    obj: dict[str, Any] = {
        "id": "4f7c2b1e-0000-4000-8000-000000000000",
        "object": "chat.completion.chunk",
        "created": 1764681305,
        "model": model,
        "system_fingerprint": "fp_test",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish_reason}]
        if choices
        else [],
        "usage": usage,
    }
    obj.update(top)
    return obj


def sse(*events: dict[str, Any] | str | bytes, done: bool = True) -> bytes:
    """An SSE body: dicts become ``data: <json>`` events, str/bytes are inserted verbatim; then ``[DONE]``."""
    out = bytearray()
    for event in events:
        if isinstance(event, dict):
            out += b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"
        elif isinstance(event, str):
            out += event.encode()
        else:
            out += event
    if done:
        out += b"data: [DONE]\n\n"
    return bytes(out)


def tool_delta(index: int, arguments: str, *, id: str | None = None, name: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    if name is not None:
        call["function"]["name"] = name
    return {"tool_calls": [call]}


DEEPSEEK_USAGE = {
    "prompt_tokens": 491,
    "completion_tokens": 129,
    "total_tokens": 620,
    "prompt_tokens_details": {"cached_tokens": 448},
    "completion_tokens_details": {"reasoning_tokens": 40},
    "prompt_cache_hit_tokens": 448,
    "prompt_cache_miss_tokens": 43,
}


def deepseek_reasoning_then_text() -> bytes:
    """deepseek-reasoner: keep-alives, ``reasoning_content`` then ``content``, usage on the finish chunk."""
    return sse(
        ": keep-alive\n\n",
        chunk({"role": "assistant", "content": None, "reasoning_content": ""}),
        chunk({"content": None, "reasoning_content": "Hmm, "}),
        ": keep-alive\n\n",
        chunk({"content": None, "reasoning_content": "a greeting. 🤔"}),
        chunk({"content": "Hello", "reasoning_content": None}),
        chunk({"content": " there! 😊", "reasoning_content": None}),
        chunk({"content": "", "reasoning_content": None}, finish_reason="stop", usage=DEEPSEEK_USAGE),
    )


def deepseek_parallel_tools(*, interleaved: bool = False) -> bytes:
    """deepseek-chat: text, then two tool calls with arguments split token by token, multi-byte included."""
    first = ['{"', "location", '": "', "北", "京", '", "format": "celsius"}']
    second = ['{"location": "', "洛阳", '"}']
    calls = [tool_delta(0, "", id="call_00_beijing", name="get_current_weather")]
    later = [tool_delta(1, "", id="call_01_luoyang", name="get_current_weather")]
    if interleaved:
        deltas = [*calls, *later]
        for a, b in zip(first, second + [""] * (len(first) - len(second)), strict=True):
            deltas.append(tool_delta(0, a))
            if b:
                deltas.append(tool_delta(1, b))
    else:
        deltas = [*calls, *(tool_delta(0, a) for a in first), *later, *(tool_delta(1, b) for b in second)]
    return sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "我可以帮"}),
        chunk({"content": "。"}),
        *(chunk(d) for d in deltas),
        chunk({"content": ""}, finish_reason="tool_calls", usage=DEEPSEEK_USAGE),
    )


def openai_usage_after_finish() -> bytes:
    """OpenAI gpt-4o: role chunk, tool calls, ``delta: {}`` with finish, then a ``choices: []`` usage chunk."""
    usage = {
        "prompt_tokens": 417,
        "completion_tokens": 44,
        "total_tokens": 461,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    return sse(
        chunk({"role": "assistant", "content": None}, obfuscation="x"),
        chunk(tool_delta(0, "", id="call_weather", name="get_weather")),
        chunk(tool_delta(0, '{"ci')),
        chunk(tool_delta(0, 'ty": "Mexic')),
        chunk(tool_delta(0, 'o City"}')),
        chunk(tool_delta(1, "", id="call_product", name="get_product_name")),
        chunk(tool_delta(1, "{}")),
        chunk({}, finish_reason="tool_calls"),
        chunk(choices=False, usage=usage),
    )


def openrouter_inband_error() -> bytes:
    """OpenRouter: comment lines, ``delta.reasoning``, ``finish_reason: length`` twice, an in-band error."""
    return sse(
        *[": OPENROUTER PROCESSING\n\n"] * 5,
        chunk({"role": "assistant", "content": "", "reasoning": "We need"}),
        chunk({"role": "assistant", "content": "", "reasoning": " to respond."}, finish_reason="length"),
        chunk({"role": "assistant", "content": "", "reasoning": None}, finish_reason="length"),
        chunk(
            {"role": "assistant", "content": ""},
            usage={"prompt_tokens": 43, "completion_tokens": 10, "total_tokens": 53},
            error={"code": 400, "message": "Token limit reached"},
        ),
    )


def groq_error_event() -> bytes:
    """Groq: ``delta.reasoning`` with ``channel``, then ``event: error`` and no ``[DONE]``."""
    error = {
        "error": {
            "message": "Tool call validation failed: parameters did not match schema",
            "type": "invalid_request_error",
            "code": "tool_use_failed",
            "status_code": 400,
        }
    }
    return sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning": "We need", "channel": "analysis"}),
        chunk({"reasoning": " to call the tool.", "channel": "analysis"}),
        "event: error\ndata: " + json.dumps(error) + "\n\n",
        done=False,
    )


DEEPSEEK_400_BODY = (
    b'{"error":{"message":"No tool output found for tool call call-a.","type":"invalid_request_error",'
    b'"param":null,"code":"invalid_request_error"}}'
)
