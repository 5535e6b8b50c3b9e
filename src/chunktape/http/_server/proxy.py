"""``RecordingProxy`` (``chunktape proxy``): a loopback HTTP proxy that records an agent in any language.

Point the agent's OpenAI client at ``http://127.0.0.1:PORT/v1``; every request is forwarded to ``upstream`` +
its path (``--upstream https://api.deepseek.com`` and a request to ``/v1/chat/completions`` go to
``https://api.deepseek.com/v1/chat/completions``) with the client's own headers, ``Authorization`` included,
through a ``RecordingTransport``, so recording is the same code as in process. Bodies stream back as they
arrive, never buffered, so the agent sees the provider's timing and the cassette records it. The key is taken
from the client's request and never written: request headers are not recorded, and the credentials they carry
are redacted and checked for at save (``RecordingTransport``). The cassette is saved when the proxy stops.

Credentials in ``upstream`` itself (``http://user:password@host``, ``?key=...``) are sent upstream but never shown:
``shown_upstream`` (and every message, 502 bodies included) has them replaced, and the recording redacts them.
Whatever happens to one exchange (an upstream that breaks its body, a body that does not decode, a client that
hangs up mid-request, a stream cut as the proxy stops) is one line on the ``chunktape.proxy`` logger, never a
traceback; a route it does not record is named once. Headers reach the client as the upstream sent them: one
``server`` and one ``date`` (the proxy adds a ``date`` only when the upstream sent none).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import email.utils
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from chunktape._cassettes.store import check_writable
from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import default_tls
from chunktape._secrets import redact_text, redact_url, url_secrets
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
_KEEP_ALIVE = 32
"""Idle upstream connections kept for reuse (httpx's default is 20)."""


def _forwarded(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(name, value) for name, value in headers if name.lower() not in _HOP_BY_HOP]


logger = logging.getLogger("chunktape.proxy")
"""Where the proxy says what happened to an exchange, one line per event."""

_relaying: contextvars.ContextVar[bool] = contextvars.ContextVar("chunktape_proxy_relaying", default=False)
"""Set while one of this module's proxies handles a request (the task uvicorn logs its failures from)."""


class _Reported(Exception):
    """Raised to make uvicorn cut the client's connection after the proxy logged why, in one line."""


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


class _OneLine(logging.Filter):
    """uvicorn's records about a request the proxy handles, one line each: no traceback, the exception named;
    those the proxy already reported (``_Reported``) dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or not _relaying.get():
            return True
        exc = record.exc_info[1]
        leaves = _leaves(exc) if exc is not None else []
        if leaves and all(isinstance(leaf, _Reported) for leaf in leaves):
            return False
        if leaves and all(isinstance(leaf, asyncio.CancelledError) for leaf in leaves):
            line = "chunktape proxy: a stream still open was cut as the proxy stopped"
        else:
            summary = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves) or "unknown error"
            line = f"chunktape proxy: answering a request failed: {summary}"
        record.msg, record.args = line, None
        record.exc_info, record.exc_text = None, None
        return True


_one_line = _OneLine()


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
        self.shown_upstream = redact_url(upstream.rstrip("/"))
        """``upstream`` as it may be shown: its userinfo and credential-named query parameters replaced."""
        self._secrets = url_secrets(upstream)
        if not upstream.startswith(("http://", "https://")):
            raise LlmError(f"--upstream must be an http(s) URL, got {self.shown_upstream!r}", ErrorCode.INVALID_CONFIG)
        if transport is None:
            if cassette is None:
                raise LlmError("a RecordingProxy needs a cassette to record into", ErrorCode.INVALID_CONFIG)
            check_writable(cassette)  # before listening: a session that cannot be saved is refused at once
            # No cap on upstream connections: httpx's default (100) made the 101st client stream wait for one of
            # the others to end, for ever when the clients wait on each other. Each client request in flight holds
            # one upstream connection, as it must; the proxy's clients bound how many there are.
            upstream_pool = httpx2.Limits(max_connections=None, max_keepalive_connections=_KEEP_ALIVE)
            recording.setdefault("on_unrecorded", _unrecorded)
            transport = RecordingTransport(
                httpx2.AsyncHTTPTransport(verify=default_tls(), limits=upstream_pool), cassette, **recording
            )
        self.upstream = upstream.rstrip("/")
        self._unrecorded: set[tuple[str, str]] = set()
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
            own_headers=False,
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

    @property
    def written(self) -> Path | None:
        """The cassette file the proxy's recording wrote when it stopped, None if it wrote none (nothing was
        recorded, or the save failed); None too for a transport that is not a ``RecordingTransport``."""
        if isinstance(self.transport, RecordingTransport):
            return self.transport.recorder.written
        return None

    def _shown(self, text: str) -> str:
        """``text`` with the upstream's credentials (and any key-shaped string) replaced: what a client may see."""
        return redact_text(text, self._secrets)

    async def _forward(self, request: Request) -> Response:
        assert self._client is not None  # the lifespan built it
        _relaying.set(True)
        route = f"{request.method} {request.url.path}"
        try:
            body = await read_body(request, self.limits.max_body)
        except ClientDisconnect:
            logger.warning("chunktape proxy: %s: the client hung up before its request body was complete", route)
            return Response(status_code=400)  # nobody reads it: uvicorn drops it with the connection
        if body is None:
            return _dated(problem(413, f"the request body is over {self.limits.max_body} bytes", "REQUEST_TOO_LARGE"))
        self._note_unrecorded(request.method, request.url.path)
        target = self._target(request.url.path, request.url.query)
        outgoing = self._client.build_request(
            request.method, target, headers=_forwarded(request.headers.items()), content=body
        )
        try:
            reply = await self._client.send(outgoing, stream=True)
        except LlmError as error:  # the plugin's session transport replays too: a miss
            if error.code in MISSES:
                return _dated(problem(MISS_STATUS, self._shown(miss_message(error)), error.code.value, kind=MISS_TYPE))
            return _dated(problem(502, self._shown(str(error)), error.code.value))
        except httpx2.HTTPError as error:
            message = self._shown(f"the upstream {self.shown_upstream} could not be reached: {error}")
            logger.warning("chunktape proxy: %s: %s", route, message)
            return _dated(problem(502, message, "UPSTREAM_ERROR"))
        headers = _forwarded(reply.headers.multi_items())
        if not any(name.lower() == "date" for name, _ in headers):
            headers.append(("date", email.utils.formatdate(usegmt=True)))
        return StreamingResponse(
            _pieces(reply, route, self._shown), status_code=reply.status_code, headers=dict(headers)
        )

    def _target(self, path: str, query: str) -> str:
        """The upstream URL for a request to ``path?query``: the upstream's path then ``path``, the upstream's
        query (``?key=...``, ``?api-version=...``) then the request's."""
        base, _, own = self.upstream.partition("?")
        joined = "&".join(part for part in (own, query) if part)
        return base.rstrip("/") + path + (f"?{joined}" if joined else "")

    def _note_unrecorded(self, method: str, path: str) -> None:
        """Say once per route that its traffic is forwarded but not recorded (another protocol, another API)."""
        if not isinstance(self.transport, RecordingTransport) or self.transport.records(method, path):
            return
        if (method, path) in self._unrecorded:
            return
        self._unrecorded.add((method, path))
        logger.warning(
            "chunktape proxy: %s %s is not traffic chunktape records (chat completions, Messages, Responses); it is "
            "forwarded to the upstream and its answer passed back, unrecorded (said once for this route)",
            method,
            path,
        )

    def start(self) -> RecordingProxy:
        """Serve in a background thread; returns at once (the socket already accepts connections)."""
        logging.getLogger("uvicorn.error").addFilter(_one_line)
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
        logging.getLogger("uvicorn.error").addFilter(_one_line)
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


def _unrecorded(message: str) -> None:
    """A request the recording cannot represent: one line, from the server's thread (never a warning there)."""
    logger.warning("chunktape proxy: %s", message)


def _dated(response: Response) -> Response:
    """An answer of the proxy's own, with the ``date`` header uvicorn no longer adds."""
    response.headers["date"] = email.utils.formatdate(usegmt=True)
    return response


async def _pieces(reply: httpx2.Response, route: str, shown: Callable[[str], str]) -> AsyncIterator[bytes]:
    """The upstream body as it arrives; closing it (the agent left) tells the recording it was cut short.

    If the body breaks (the upstream cut it, it does not decode), the proxy says so in one line and cuts the
    client's connection, so the client sees the failure too (never a clean end of a short body).
    """
    sent = 0
    try:
        async with contextlib.aclosing(reply.aiter_raw()) as pieces:
            async for piece in pieces:
                sent += len(piece)
                yield piece
    except httpx2.HTTPError as error:
        what = "does not decode" if isinstance(error, httpx2.DecodingError) else "broke"
        logger.warning(
            "chunktape proxy: %s: the upstream's answer %s after %d bytes (%s: %s); the client's connection is cut",
            route,
            what,
            sent,
            type(error).__name__,
            shown(str(error)),
        )
        raise _Reported() from None
    finally:
        await reply.aclose()
