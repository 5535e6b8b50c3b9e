"""``RecordingProxy`` (``chunktape proxy``): a loopback HTTP proxy that records an agent in any language.

Point the agent's OpenAI client at ``http://127.0.0.1:PORT/v1``; every request is forwarded to ``upstream`` +
its path (``--upstream https://api.deepseek.com`` and a request to ``/v1/chat/completions`` go to
``https://api.deepseek.com/v1/chat/completions``) with the client's own headers, ``Authorization`` included,
through a ``RecordingTransport``, so recording is the same code as in process. Bodies stream back as they
arrive, never buffered, so the agent sees the provider's timing and the cassette records it. The key is taken
from the client's request and never written: request headers are not recorded, and the credentials they carry
are redacted and checked for at save (``RecordingTransport``). The cassette is saved when the proxy stops.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import default_tls
from chunktape.http._recording_transport import RecordingTransport
from chunktape.http._server.limits import ServerLimits, read_body
from chunktape.http._server.listen import listen_socket
from chunktape.http._server.problems import MISS_STATUS, MISS_TYPE, MISSES, miss_message, problem
from chunktape.http._server.running import quiet_server

__all__ = ["RecordingProxy"]

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
"""Headers that belong to one connection (or that the next hop computes again), not to the message."""
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def _forwarded(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers if name.lower() not in _HOP_BY_HOP]


class RecordingProxy:
    """Forwards every request on 127.0.0.1 to ``upstream`` and records its chat completions into ``cassette``.

    ``transport`` replaces the recording transport (the pytest plugin passes its session's); by default it is
    ``RecordingTransport(httpx2.AsyncHTTPTransport(), cassette, **recording)``, saved when the proxy stops.
    Bound at construction (``url`` is known, a busy port fails at once); ``with RecordingProxy(...) as proxy:``
    serves in a background thread, ``run()`` in the foreground until Ctrl-C.
    """

    def __init__(
        self,
        upstream: str,
        cassette: str | os.PathLike[str] | None = None,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        allow_remote: bool = False,
        limits: ServerLimits = ServerLimits(),  # noqa: B008 - ServerLimits is frozen
        timeout: float = 600.0,
        **recording: Any,
    ) -> None:
        if not upstream.startswith(("http://", "https://")):
            raise LlmError(f"--upstream must be an http(s) URL, got {upstream!r}", ErrorCode.INVALID_CONFIG)
        if transport is None:
            if cassette is None:
                raise LlmError("a RecordingProxy needs a cassette to record into", ErrorCode.INVALID_CONFIG)
            transport = RecordingTransport(httpx2.AsyncHTTPTransport(verify=default_tls()), cassette, **recording)
        self.upstream = upstream.rstrip("/")
        self.transport = transport
        self.limits = limits
        self._timeout = timeout
        self._client: httpx2.AsyncClient | None = None
        self.error: LlmError | None = None
        """What saving the recording raised as the proxy stopped (re-raised by ``stop()``/``run()``)."""
        self._server = quiet_server(
            Starlette(routes=[Route("/{path:path}", self._forward, methods=_METHODS)], lifespan=self._lifespan),
            limits,
            lifespan="on",
        )
        self._thread: threading.Thread | None = None
        self._socket = listen_socket(host, port, allow_remote)
        bound_host, self.port = self._socket.getsockname()[:2]
        self.url = f"http://{f'[{bound_host}]' if ':' in bound_host else bound_host}:{self.port}"
        """The base URL, without ``/v1`` (an OpenAI client wants ``url + "/v1"``)."""

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # The client lives on the server's loop; closing it closes the transport, which saves a recording.
        self._client = httpx2.AsyncClient(transport=self.transport, timeout=self._timeout)
        try:
            yield
        finally:
            try:
                await self._client.aclose()
            except LlmError as error:  # a credential left in the recording: kept aside, redacted
                self.error = error

    async def _forward(self, request: Request) -> Response:
        assert self._client is not None  # the lifespan built it
        body = await read_body(request, self.limits.max_body)
        if body is None:
            return problem(413, f"the request body is over {self.limits.max_body} bytes", "REQUEST_TOO_LARGE")
        target = self.upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        outgoing = self._client.build_request(
            request.method, target, headers=_forwarded(request.headers.items()), content=body
        )
        try:
            reply = await self._client.send(outgoing, stream=True)
        except LlmError as error:  # the plugin's session transport replays too: a miss
            if error.code in MISSES:
                return problem(MISS_STATUS, miss_message(error), error.code.value, kind=MISS_TYPE)
            return problem(502, str(error), error.code.value)
        except httpx2.HTTPError as error:
            return problem(502, f"the upstream {self.upstream} could not be reached: {error}", "UPSTREAM_ERROR")
        return StreamingResponse(
            _pieces(reply), status_code=reply.status_code, headers=dict(_forwarded(reply.headers.multi_items()))
        )

    def start(self) -> RecordingProxy:
        """Serve in a background thread; returns at once (the socket already accepts connections)."""
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="chunktape-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (the recording is saved as the server shuts down) and release the port."""
        self._server.exit()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()
        self._raise()

    def run(self) -> None:
        """Serve in this thread until Ctrl-C or SIGTERM; the recording is saved on the way out."""
        try:
            self._server.run(sockets=[self._socket])
        except KeyboardInterrupt:
            pass
        finally:
            self._socket.close()
        self._raise()

    def _raise(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error

    def __enter__(self) -> RecordingProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


async def _pieces(reply: httpx2.Response) -> AsyncIterator[bytes]:
    """The upstream body as it arrives; closing it (the agent left) tells the recording it was cut short."""
    try:
        async with contextlib.aclosing(reply.aiter_raw()) as pieces:
            async for piece in pieces:
                yield piece
    finally:
        await reply.aclose()
