"""A loopback OpenAI-compatible server that replays cassettes, with their timing and faults, to any HTTP client.

Routes (``base`` is ``ReplayServer.url``; OpenAI SDKs take ``base_url=f"{base}/v1"``, Anthropic's ``base_url=base``):

- ``POST /chat/completions`` and ``POST /v1/chat/completions``: the default cassette(s). With an
  ``X-Chunktape-Scenario: <name>`` header, the named scenario instead. ``/messages`` / ``/v1/messages``
  (Anthropic Messages) and ``/responses`` / ``/v1/responses`` (OpenAI Responses) likewise, each answered in its
  own protocol and error shape (``chunktape.http._protocols``), whatever protocol the cassette was recorded on:
  an interaction recorded on another one is served with an ``x-chunktape-warning`` header (and a ``chunktape``
  log warning) naming what does not carry over.
- ``POST /openai/deployments/<deployment>/chat/completions?api-version=...`` (Azure OpenAI, ``openai.AzureOpenAI``):
  the default cassette(s), the deployment standing for the model when the body names none (as recorded).
- ``POST /scenarios/<name>/chat/completions``, ``POST /scenarios/<name>/v1/chat/completions``,
  ``POST /scenarios/<name>/openai/deployments/<deployment>/chat/completions`` (and the Messages and Responses
  routes under the same prefix): one scenario (a cassette with its own faults and timing, from a
  ``chunktape.http._server.scenarios`` file).
- ``GET /scenarios``: the scenarios as JSON (name, description, cassette, fault ids, timing, path, calls).
- ``POST /reset``: forget what was played and every fault's call count, as if the server had just started.

Each request body is decoded into ``GenerateOptions`` (``decode_chat_request``) and answered by the replay
engine (``chunktape._replayer.Playback``, what ``ReplayAdapter`` stands on), so matching, faults and timing are
exactly the library's. A body that is not a request
(not JSON, nested too deeply, a field of the wrong type) is ``400`` with an OpenAI-style JSON error naming the
problem (code ``INVALID_REQUEST``); one over ``ServerLimits.max_body`` (32 MiB) is ``413`` as soon as that is
known, and the rest is discarded as it comes, never kept. A request head or body that does not arrive in time
(``ServerLimits``) closes the connection.
Response headers carry only ASCII: a scenario name or fault id beyond it is percent-encoded (UTF-8), and an
``X-Chunktape-Scenario`` request header is percent-decoded.
How outcomes reach the wire:

- before any chunk: a recorded or injected ``PROVIDER_HTTP_ERROR`` is that HTTP status with an OpenAI-style
  JSON error body and ``Retry-After``/``retry-after-ms``; a cassette miss (no matching interaction, or all
  matching ones already played) is ``418`` (``MISS_STATUS``: no SDK retries it or takes it for a provider's
  answer) with error type ``chunktape_cassette_miss``, the ``CASSETTE_MISMATCH``/``CASSETTE_EXHAUSTED`` code
  and message, and a next step in the server's own knobs (``--match-on``, ``--repeat``, ``POST /reset``);
- every error chunktape answers itself (a miss, a bad request body, an unknown scenario, data it cannot
  serve) carries ``x-chunktape-error: <CODE>`` and ``x-should-retry: false``; a replayed provider error
  carries neither;
- mid-stream (or before the first chunk for other codes) the stream ends as ``SseRenderer.ending`` says, the
  one mapping ``render_sse`` uses too: ``STREAM_ABORTED`` and other failures **break the connection** (the
  client sees a reset mid-body, as when it was recorded); a ``PROVIDER_HTTP_ERROR`` is an **in-band error
  event** (``{"error": {"code": <status>, ...}}``); ``INVALID_RESPONSE`` is a malformed ``data:`` line; a
  recording cut short ends the body without ``[DONE]``;
- a stream that breaks the protocol (a ``Corrupt`` fault, or a recorded violation) is sent as a malformed
  ``data:`` line where the violation happens, then the body ends;
- the usage-only ``choices: []`` chunk is sent only when the request asks for it with
  ``stream_options.include_usage: true`` (as OpenAI does); otherwise the stream carries no usage;
- ``"stream": false`` gets one JSON ``chat.completion`` assembled from the chunks (errors as JSON with the
  status; 502 when the stream broke: a violation, a missing finish, a reset, with the fault id if injected);
- recorded data the server cannot serve (a cassette that fails to decode, an error status outside 400-599)
  is a ``502`` JSON error naming the problem before any chunk, an in-band error event after: never a dropped
  connection.

When an interaction counts as played (is used up): once the last bytes of its answer were written to the
connection: the ``[DONE]``, the recorded error (an in-band event, or the reset a recorded ``STREAM_ABORTED``
is), the end of a recording cut short, or the JSON of an error answered before any chunk or of a
``"stream": false`` completion. A client that disconnects before that (it gave up, or its timeout fired during
a stall or a slow recorded timing) leaves the interaction unplayed: its retry replays it. An injected fault
never uses one up (``chunktape.faults._plan``). So a recorded retry sequence (429, 429, success) still replays
in order, and a client whose first attempt timed out gets the recorded reply on its retry.

Response headers go out with the first chunk, so a recorded time to first chunk is a time to first byte.
The server binds 127.0.0.1 (or another loopback address) only, unless ``allow_remote=True``. A host name
(``localhost``) is resolved first and its loopback address is bound, never another one it may map to.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import sys
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, TypeAlias, TypeVar, Unpack
from urllib.parse import quote, unquote

import anyio
import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from chunktape._cassettes.codec import LazyCassette, as_cassette, as_lazy
from chunktape._cassettes.model import ERROR_STATUSES, Cassette, Interaction, ResponseMeta
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import StreamChunk
from chunktape._recorder import sent_as
from chunktape._replayer.options import ReplayKeywords, ReplayOptions
from chunktape._replayer.playback import Hold, Playback, ReplayCall
from chunktape._replayer.timing import Timing
from chunktape._validation import StreamValidator
from chunktape._virtual_time import serving
from chunktape.faults import fault_id
from chunktape.http._protocols import CHAT, PROTOCOLS, Renderer, WireProtocol, across_message, protocol_for
from chunktape.http._render import Ending, error_headers
from chunktape.http._rendered import Rendered
from chunktape.http._routes import AZURE_ROUTE
from chunktape.http._server.limits import ServerLimits, read_body
from chunktape.http._server.listen import listen_socket
from chunktape.http._server.problems import MISS_STATUS, MISS_TYPE, MISSES, miss_message, problem
from chunktape.http._server.running import quiet_server
from chunktape.http._server.scenarios import Scenario, load_scenarios
from chunktape.http._server.scripted import Script, ScriptEngine, load_script

__all__ = [
    "MISS_STATUS",  # defined in http/problems.py, public here
    "MISS_TYPE",
    "SCENARIO_HEADER",
    "CassetteSource",
    "ReplayServer",
    "replay_server_for",
    "serve",
]

CassetteSource: TypeAlias = Cassette | LazyCassette | str | os.PathLike[str]
"""A cassette, an opened cassette or a path."""

T = TypeVar("T")

SCENARIO_HEADER = "X-Chunktape-Scenario"
"""The request header that picks a scenario on the plain ``/v1/chat/completions`` route."""

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}

_SERVED = ReplayOptions(timing=Timing.recorded())
"""A server's replay options when none are given: the recorded timing, as a provider streamed it."""


class _Reset(Exception):
    """Raised inside a body on purpose: the server then drops the connection mid-body."""


class _QuietResets(logging.Filter):
    """Keeps deliberate connection resets out of uvicorn's error log (they are the fault, not a bug)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        seen: set[int] = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            if _has_reset(exc):
                return False
            exc = exc.__cause__ or exc.__context__
        return True


def _has_reset(exc: BaseException) -> bool:
    if isinstance(exc, _Reset):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_has_reset(inner) for inner in exc.exceptions)
    return False


_quiet_resets = _QuietResets()


_CANCELLING = re.compile(r"Cancel (?:\d+|%s) running task\(s\)")


def _message(record: logging.LogRecord) -> str:
    """The record's text, also when a record factory (some SDKs install one) formatted ``msg`` already."""
    try:
        return record.getMessage()
    except (TypeError, ValueError):
        return str(record.msg)


class _QuietShutdown(logging.Filter):
    """While its server shuts down, drops what uvicorn logs about the streams it cancels.

    Stopping (``stop()``, Ctrl-C) with a stream in flight (a stall, a slow recorded timing) makes uvicorn cancel
    it once the graceful timeout is over: it logs "Cancel N running task(s)" and, per stream, "Exception in ASGI
    application" with a ``CancelledError`` traceback. That is the requested stop doing its job, not an error.
    """

    def __init__(self, server: uvicorn.Server) -> None:
        super().__init__()
        self._server = server

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._server.should_exit:
            return True
        if _CANCELLING.match(_message(record)):
            return False
        exc = record.exc_info[1] if record.exc_info else None
        seen: set[int] = set()
        while exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            if isinstance(exc, asyncio.CancelledError):
                return False
            exc = exc.__cause__ or exc.__context__
        return True


def _merge(sources: Sequence[CassetteSource]) -> Cassette | LazyCassette | str | os.PathLike[str]:
    """One source as is (lazily opened); several merged into one cassette, in the order given."""
    if len(sources) == 1:
        return sources[0]
    cassettes = [as_cassette(source) for source in sources]
    return Cassette(meta=cassettes[0].meta, interactions=[i for c in cassettes for i in c.interactions])


class _Target:
    """What answers one route: the replay engine over a cassette, with the replay options."""

    def __init__(
        self,
        name: str | None,
        source: Cassette | LazyCassette | str | os.PathLike[str],
        replay_options: ReplayOptions,
        description: str = "",
        playback: Playback | ScriptEngine | None = None,
    ) -> None:
        self.name = name
        self.source = as_lazy(source)  # opened once: a reset replays the same content without re-reading it
        self.replay_options = replay_options
        self.description = description
        self.playback: Playback | ScriptEngine = self._build() if playback is None else playback
        self.bodies: Rendered[_Sent] = Rendered()
        """Instant, fault-free bodies as first sent, per interaction, protocol, model and usage: later plays
        (``--repeat``, many clients on one stream) send the same bytes without rendering them again
        (``chunktape.http._rendered``)."""
        self.warnings: Rendered[str] = Rendered()
        """The cross-protocol message per interaction and route ("" for none): it scans every event."""

    @property
    def timing(self) -> Timing:
        return self.replay_options.timing

    def _build(self) -> Playback:
        return Playback(self.source, self.replay_options)

    def reset(self) -> None:
        if isinstance(self.playback, ScriptEngine):
            self.playback.reset()
        else:
            self.playback = self._build()

    def describe(self) -> dict[str, Any]:
        playback = self.playback
        return {
            "name": self.name,
            "description": self.description,
            "cassette": playback.path,
            "interactions": len(playback.play_counts),
            "faults": [fault_id(fault) for fault in playback.fault_plan.faults],
            "timing": msgspec.to_builtins(self.timing),
            "path": f"/scenarios/{self.name}/v1/chat/completions",
            "calls": playback.calls,
        }


class ReplayServer:
    """The replay server, bound at construction (so ``url`` is known and a busy port fails at once).

    The socket is released by ``stop()`` (or the end of ``run()``/the ``with`` block); a server that is never
    started or stopped releases it when garbage-collected, without a ``ResourceWarning``.

    Use it in tests with ``with ReplayServer(...) as server:`` or ``async with`` (it runs in a background
    thread with its own event loop, so any client on any loop, sync or async, can reach it), or run it in the
    foreground with ``run()`` (what ``serve()`` and ``chunktape serve`` do). ``playback`` (the replay engine,
    ``chunktape._replayer.Playback``) answers the default routes, ``scenarios[name].playback`` each scenario; both
    expose ``injected``, ``calls``, ``play_counts`` and ``assert_all_played()``.
    """

    def __init__(
        self,
        cassettes: CassetteSource | Sequence[CassetteSource] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        replay_options: ReplayOptions | None = None,
        scenarios: str | os.PathLike[str] | Sequence[Scenario] | None = None,
        allow_remote: bool = False,
        limits: ServerLimits = ServerLimits(),  # noqa: B008 - ServerLimits is frozen
        script: str | os.PathLike[str] | Script | None = None,
        record: str | os.PathLike[str] | None = None,
        **replay: Unpack[ReplayKeywords],
    ) -> None:
        sources: list[CassetteSource] = (
            [cassettes] if isinstance(cassettes, Cassette | LazyCassette | str | os.PathLike) else list(cassettes)
        )
        self.replay_options = ReplayOptions.of(_SERVED if replay_options is None else replay_options, **replay)
        """How the default routes replay; each scenario replaces its ``timing``, ``faults`` (and ``match_on``, when it
        sets one) with its own."""
        self._default: _Target | None = None
        self.script: ScriptEngine | None = None
        """With ``script``: the scripted provider answering the default routes (``chunktape._server.scripted``),
        which records what it answered into ``record`` (saved when the server stops)."""
        if script is not None:
            if sources:
                raise LlmError("serve either cassettes or a script, not both", ErrorCode.INVALID_CONFIG)
            loaded = script if isinstance(script, Script) else load_script(Path(script))
            where = "the script" if isinstance(script, Script) else str(script)
            self.script = ScriptEngine(
                loaded, self.replay_options, record=None if record is None else Path(record), path=where
            )
            self._default = _Target(None, Cassette(), self.replay_options, playback=self.script)
        elif record is not None:
            raise LlmError("record= goes with script=: a replay records nothing", ErrorCode.INVALID_CONFIG)
        if sources:
            self._default = _Target(None, _merge(sources), self.replay_options)
        if isinstance(scenarios, str | os.PathLike):
            scenarios = load_scenarios(Path(scenarios))
        self.scenarios: dict[str, _Target] = {}
        """The scenario routes by name; ``scenarios[name].playback`` is the replay engine behind it."""
        for scenario in scenarios or ():
            self.scenarios[scenario.name] = _Target(
                scenario.name,
                Path(scenario.cassette),
                scenario.replay_options(self.replay_options),
                description=scenario.description,
            )
        if self._default is None and not self.scenarios:
            raise LlmError("nothing to serve: give a cassette or a scenario file", ErrorCode.INVALID_CONFIG)
        self.limits = limits
        """What a client may send and how long it may take (request size and read deadlines)."""
        self.app = self._build_app()
        self._server = quiet_server(_Silences(self.app), limits)
        self._quiet_shutdown = _QuietShutdown(self._server)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._running = False
        # Bound last, so nothing after it can fail and leave the socket open. Closed by stop()/run(), or, for a
        # server that was never started or stopped, when it is garbage-collected (or at interpreter exit).
        self._socket = listen_socket(host, port, allow_remote)
        self._release = weakref.finalize(self, self._socket.close)
        bound_host, self.port = self._socket.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.host: str = bound_host
        self.url = f"http://{shown}:{self.port}"
        """The base URL, without ``/v1`` (OpenAI SDKs want ``url + "/v1"``)."""

    @property
    def remote_warning(self) -> str | None:
        """What to tell the person running a server that listens beyond loopback (``allow_remote``), else None."""
        if ipaddress.ip_address(self.host.split("%")[0]).is_loopback:
            return None
        return (
            f"warning: serving cassettes on {self.host}, which is not a loopback address: anyone who can reach "
            "this port can read the recorded conversations"
        )

    # -- running -------------------------------------------------------------------------------

    @property
    def playback(self) -> Playback:
        """The replay engine behind the default routes."""
        if self._default is None:
            raise LlmError("this server has no default cassette, only scenarios", ErrorCode.INVALID_CONFIG)
        engine = self._default.playback
        if isinstance(engine, ScriptEngine):
            raise LlmError("this server answers from a script: see ReplayServer.script", ErrorCode.INVALID_CONFIG)
        return engine

    def _save_script(self) -> None:
        if self.script is not None:
            self.script.save()

    def start(self) -> ReplayServer:
        """Serve in a background thread; returns at once (the socket already accepts connections)."""
        if self._thread is not None or self._closed:
            raise RuntimeError("a ReplayServer can be started once")
        self._quiet_logs()
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="chunktape-replay-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (waits for a background thread, at most a few seconds).

        Also ends a foreground ``run()`` from another thread.
        """
        self._server.exit()
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                logging.getLogger("uvicorn.error").removeFilter(self._quiet_shutdown)
        if not self._running:
            self._release()
            self._save_script()

    def run(self) -> None:
        """Serve in this thread until Ctrl-C, SIGTERM or ``stop()``; returns normally after a clean shutdown."""
        if self._thread is not None or self._closed:
            raise RuntimeError("a ReplayServer can be started once")
        self._quiet_logs()
        self._running = True
        try:
            self._server.run(sockets=[self._socket])
        except KeyboardInterrupt:
            pass
        finally:
            self._closed = True
            self._running = False
            self._release()
            logging.getLogger("uvicorn.error").removeFilter(self._quiet_shutdown)
            self._save_script()

    def _quiet_logs(self) -> None:
        logger = logging.getLogger("uvicorn.error")
        logger.addFilter(_quiet_resets)
        logger.addFilter(self._quiet_shutdown)

    def reset(self) -> None:
        """Forget every play count and fault call count (also ``POST /reset``)."""
        for target in self._targets():
            target.reset()

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ReplayServer:
        return self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _targets(self) -> list[_Target]:
        return ([self._default] if self._default is not None else []) + list(self.scenarios.values())

    # -- the app -------------------------------------------------------------------------------

    def _build_app(self) -> Starlette:
        served = [
            Route(path, self._completions, methods=["POST"])
            for protocol in PROTOCOLS  # chat completions, Anthropic Messages, OpenAI Responses
            for path in (
                protocol.route,
                f"/v1{protocol.route}",
                f"/scenarios/{{scenario}}{protocol.route}",
                f"/scenarios/{{scenario}}/v1{protocol.route}",
            )
        ]
        return Starlette(
            exception_handlers={404: _no_route, 405: _no_route, Exception: _internal_error},
            routes=[
                *served,
                Route(AZURE_ROUTE, self._completions, methods=["POST"]),
                Route("/scenarios/{scenario}" + AZURE_ROUTE, self._completions, methods=["POST"]),
                Route("/scenarios", self._list_scenarios, methods=["GET"]),
                Route("/reset", self._reset, methods=["POST"]),
            ],
        )

    async def _list_scenarios(self, request: Request) -> Response:
        return JSONResponse({"scenarios": [target.describe() for target in self.scenarios.values()]})

    async def _reset(self, request: Request) -> Response:
        self.reset()
        return JSONResponse({"reset": True})

    def _target(self, request: Request, protocol: WireProtocol = CHAT) -> _Target | Response:
        header = request.headers.get(SCENARIO_HEADER)
        name = request.path_params.get("scenario") or (unquote(header) if header is not None else None)
        if name is None:
            if self._default is None:
                names = ", ".join(self.scenarios)
                return problem(
                    404,
                    "this server only has scenarios: POST to /scenarios/<name>/v1/chat/completions or send an "
                    f"{SCENARIO_HEADER} header (scenarios: {names})",
                    "INVALID_CONFIG",
                    protocol=protocol,
                )
            return self._default
        target = self.scenarios.get(name)
        if target is None:
            names = ", ".join(self.scenarios) or "none"
            return problem(404, f"no scenario named {name!r} (scenarios: {names})", "INVALID_CONFIG", protocol=protocol)
        return target

    async def _completions(self, request: Request) -> Response:
        protocol = protocol_for(request.url.path) or CHAT
        target = self._target(request, protocol)
        if isinstance(target, Response):
            return target
        try:
            raw = await read_body(request, self.limits.max_body)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody reads it: the client left (or its body was too slow)
        if raw is None:
            message = (
                f"the request body is larger than this server reads ({self.limits.max_body} bytes; "
                "ServerLimits.max_body, chunktape serve --max-body)"
            )
            # Answered at once; uvicorn discards the rest of the body as it comes (a client still writing it reads
            # the 413 rather than a reset), for at most ServerLimits.body_timeout.
            return problem(413, message, "INVALID_REQUEST", protocol=protocol)
        try:
            options, streaming, include_usage = protocol.decode_request(
                raw, model=request.path_params.get("deployment")
            )
        except LlmError as exc:
            return problem(400, exc.message, "INVALID_REQUEST", protocol=protocol)
        # The call's number and fault are chosen now, before any await: the headers describe THIS call even
        # when concurrent requests interleave.
        if isinstance(target.playback, ScriptEngine):  # it may record: how the call was sent numbers its attempts
            call = target.playback.open(
                options, sent=sent_as(protocol.name, streaming=streaming, include_usage=include_usage)
            )
        else:
            call = target.playback.open(options)
        chunks = call.chunks
        headers = {"x-chunktape-call": str(call.call)}
        if call.fault_id is not None:
            headers["x-chunktape-fault"] = _header_text(call.fault_id)
        if target.name is not None:
            headers["x-chunktape-scenario"] = _header_text(target.name)
        renderer = protocol.renderer(model=options.model, include_usage=include_usage)
        try:
            # Watched: a client that leaves during a stall before the first byte gives the interaction back now,
            # before its retry arrives, not when the stall would have ended.
            first = await _while_connected(request, anext(chunks, None))
        except _Gone:
            return await _abandoned(call)
        except LlmError as exc:
            meta = _recorded(target.playback, call.hold)
            headers = {**(meta.headers if meta is not None else {}), **headers}
            await chunks.aclose()
            early = None if _in_stream(target, call.hold.index, protocol) else _early_error(exc, headers, protocol)
            if early is not None or not streaming:
                return early or problem(502, exc.message, exc.code.value, headers=headers, protocol=protocol)
            return _ReplayStream(_body(chunks, None, renderer, error=exc, hold=call.hold), headers)
        _warn_across(target, call.hold.index, protocol, options.model, headers)
        # The interaction is held now: its recorded answer's metadata (id, model, headers, and the envelope Messages
        # and Responses streams open with) is what goes out.
        meta = _recorded(target.playback, call.hold)
        if meta is not None:
            headers = {**meta.headers, **headers}
        renderer = protocol.renderer(model=options.model, include_usage=include_usage, meta=meta)
        if not streaming:
            try:
                complete = _complete(chunks, first, options.model, headers, call.fault_id, protocol, meta)
                return await _while_connected(request, complete)
            except _Gone:
                return await _abandoned(call)
        batch = target.timing.is_instant and call.fault_id is None
        keep = None
        if batch and isinstance(target.playback, Playback) and call.hold.index is not None:
            index = call.hold.index
            keep = _Keep(
                target.bodies,
                index,
                target.playback.source.interaction(index),
                (protocol.name, options.model, include_usage),
            )
        return _ReplayStream(_body(chunks, first, renderer, batch=batch, hold=call.hold, keep=keep), headers)


class _Silences:
    """The app as served: each request is answered in a task ``serving`` its client, so every wait of its replay
    (recorded gaps, a stall, latency) is a silence declared towards that client (``chunktape._virtual_time``). A
    virtual-time client in this process then jumps over it instead of waiting it out in real time, and only the
    fault's own silence (or the recorded gap) moves its clock."""

    def __init__(self, app: Starlette) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client") if scope["type"] == "http" else None
        with serving(None if client is None else (str(client[0]), int(client[1]))):
            await self.app(scope, receive, send)


def _recorded(playback: Playback | ScriptEngine, hold: Hold) -> ResponseMeta | None:
    """The provider's recorded answer metadata of the interaction ``hold`` holds (None: none held, none recorded,
    or the interaction does not decode, which the replay itself reports)."""
    return _recorded_at(playback, hold.index)


def _recorded_at(playback: Playback | ScriptEngine, index: int | None) -> ResponseMeta | None:
    if index is None or not isinstance(playback, Playback):
        return None
    try:
        return playback.source.interaction(index).response
    except LlmError:
        return None


class _Gone(Exception):
    """The client disconnected while the server was still preparing its answer."""


async def _while_connected(request: Request, work: Awaitable[T]) -> T:
    """``await work``, cancelled as soon as the client disconnects (then raises ``_Gone``)."""
    with anyio.CancelScope() as scope:
        watcher = asyncio.ensure_future(_cancel_on_disconnect(request, scope))
        try:
            return await work
        finally:
            watcher.cancel()
    raise _Gone


async def _cancel_on_disconnect(request: Request, scope: anyio.CancelScope) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def _abandoned(call: ReplayCall) -> Response:
    """Nothing reached the client that left: the interaction is given back, so its retry replays it."""
    with anyio.CancelScope(shield=True):
        await call.chunks.aclose()
    call.hold.release()
    return Response(status_code=400)  # nobody reads it


class _ReplayStream(StreamingResponse):
    """An SSE response that closes its body when the response ends, also when the client left mid-body, so the
    body's cleanup (giving back an interaction the client never got to the end of) runs at once, not whenever
    the generator is collected."""

    def __init__(self, body: AsyncGenerator[bytes, None], headers: Mapping[str, str]) -> None:
        super().__init__(body, media_type="text/event-stream", headers={**_SSE_HEADERS, **headers})
        self._body = body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._body.aclose()


async def _no_route(request: Request, exc: Exception) -> Response:
    """A path or a method the server does not answer: a JSON error in the shape of the route's protocol (404; 405
    with its ``Allow`` header), as an SDK reads the provider's own, not starlette's ``text/plain``."""
    status = getattr(exc, "status_code", 404)
    headers = dict(getattr(exc, "headers", None) or {})
    path = request.url.path
    what = f"{request.method} {path if len(path) <= 200 else path[:200] + '...'}"
    if status == 405:
        message = f"{what}: this route answers {headers.get('allow', 'POST')} only"
    else:
        routes = ", ".join(f"POST ...{protocol.route}" for protocol in PROTOCOLS)
        message = f"{what} is no route this server answers (routes: {routes}; GET /scenarios; POST /reset)"
    protocol = protocol_for(path) or CHAT
    return problem(status, message, "INVALID_REQUEST", headers=headers, kind="invalid_request_error", protocol=protocol)


async def _internal_error(request: Request, exc: Exception) -> Response:
    """A bug still answers JSON, naming the exception (uvicorn logs the traceback), not a text/plain 500."""
    return problem(500, f"chunktape's replay server failed: {type(exc).__name__}: {exc}", "INTERNAL_ERROR")


_HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


def _header_text(text: str) -> str:
    """``text`` as a header value: printable ASCII as is, anything else (and ``%``) percent-encoded as UTF-8."""
    return quote(text, safe=_HEADER_SAFE)


def _in_stream(target: _Target, index: int | None, protocol: WireProtocol) -> bool:
    """Whether the recorded error came as an event after the stream's head (Anthropic's in-stream
    ``overloaded_error`` after ``message_start``), not as an HTTP status: then it is replayed so."""
    meta = None if protocol is CHAT else _recorded_at(target.playback, index)
    return meta is not None and meta.streamed


def _warn_across(
    target: _Target, index: int | None, protocol: WireProtocol, model: str, headers: dict[str, str]
) -> None:
    """An interaction recorded on another protocol than the route's: say what does not carry over, in an
    ``x-chunktape-warning`` header and the ``chunktape`` log."""
    if index is None or not isinstance(target.playback, Playback):  # a script is written for every route
        return
    interaction = target.playback.source.interaction(index)
    key = (protocol.name, model)
    message = target.warnings.get(index, interaction, key)
    if message is None:
        message = target.warnings.put(index, interaction, key, across_message(interaction, protocol, model) or "")
    if message:
        headers["x-chunktape-warning"] = _header_text(message)
        logging.getLogger("chunktape").warning("%s", message)


def _provider_error(exc: LlmError, headers: Mapping[str, str], protocol: WireProtocol = CHAT) -> JSONResponse:
    """A recorded or injected provider error as the provider answered it (its status, else 502), ``Retry-After``
    included. A status that is not an HTTP error (400-599) cannot be sent as one: a 502 naming it."""
    status = exc.status if exc.code is ErrorCode.PROVIDER_HTTP_ERROR else None
    message = exc.message
    if status is not None and status not in ERROR_STATUSES:
        message = f"{message} [the error carries status {status}, which is not an HTTP error status (400-599)]"
        status = None
    return JSONResponse(
        protocol.error_body(message, status=status, code=exc.code.value, retry_after=exc.retry_after),
        status_code=status or 502,
        headers={**headers, **error_headers(exc.retry_after)},
    )


_EARLY_STATUS = {
    ErrorCode.UNSUPPORTED_OPTION: 400,
    ErrorCode.CASSETTE_CORRUPT: 502,
    ErrorCode.CASSETTE_VERSION: 502,
}


def _early_error(exc: LlmError, headers: dict[str, str], protocol: WireProtocol = CHAT) -> Response | None:
    """The HTTP answer for an error before any chunk, or None when it belongs in the body (a reset...)."""
    if exc.code in MISSES:
        message = miss_message(exc)
        return problem(MISS_STATUS, message, exc.code.value, headers=headers, kind=MISS_TYPE, protocol=protocol)
    status = _EARLY_STATUS.get(exc.code)
    if status is not None:
        return problem(status, str(exc), exc.code.value, headers=headers, protocol=protocol)
    if exc.code is ErrorCode.PROVIDER_HTTP_ERROR and exc.status is not None:
        return _provider_error(exc, headers, protocol)
    return None


_BATCH_BYTES = 64 * 1024


class _Sent(NamedTuple):
    """A whole body as it was sent: its bytes, and why the connection was then broken (None: it was not)."""

    data: bytes
    reset: str | None


class _Keep(NamedTuple):
    """Where a body that may be sent again is kept: the target's bodies, the interaction and the key."""

    bodies: Rendered[_Sent]
    at: int
    interaction: Interaction
    key: tuple[str, str, bool]


async def _body(
    chunks: AsyncIterator[StreamChunk],
    first: StreamChunk | None,
    renderer: Renderer,
    *,
    batch: bool = False,
    error: LlmError | None = None,
    hold: Hold | None = None,
    keep: _Keep | None = None,
) -> AsyncGenerator[bytes, None]:
    """The SSE body from ``first`` on (or, given ``error``, a body that fails at once), ending as
    ``SseRenderer.ending`` says; with ``batch`` (instant timing, no fault) events are written in 64 KiB slabs.
    With ``keep``, the body as sent is kept, and a body kept before is sent as it was (the engine still plays the
    interaction through, so it is used up as before), neither validated nor rendered again.

    The interaction counts as played once the body's last bytes were written; if the body stops before (the
    client left), ``hold`` is released: the next matching request replays it."""
    delivered = False
    kept = None if keep is None else keep.bodies.get(keep.at, keep.interaction, keep.key)
    try:
        if kept is not None:
            with contextlib.suppress(LlmError):  # the recorded ending, sent as kept
                async for _chunk in chunks:
                    pass
            yield kept.data
            delivered = True
            if kept.reset is not None:
                raise _Reset(kept.reset)
            return
        validator = StreamValidator()
        pending: list[bytes] = [renderer.head()]
        sent: list[bytes] | None = [] if keep is not None else None
        size = 0
        chunk = first if error is None else None
        while chunk is not None:
            try:
                validator.feed(chunk)
            except LlmError as exc:
                error = exc
                break
            piece = renderer.chunk(chunk)
            if piece:
                pending.append(piece)
                size += len(piece)
                if not batch or size >= _BATCH_BYTES:
                    slab = b"".join(pending)
                    if sent is not None:
                        sent.append(slab)
                    yield slab
                    pending, size = [], 0
            try:
                chunk = await anext(chunks, None)
            except LlmError as exc:
                error = exc
                break
        if error is not None:
            ending = renderer.ending(error)
        else:
            try:
                validator.close()
                ending = renderer.ending(None)
            except LlmError:
                # Only a stream cut short (a Truncate fault, no finish) fails at its end: it ends without [DONE].
                ending = Ending(renderer.end(done=False))
        last = b"".join(pending) + ending.data
        yield last
        delivered = True  # the recorded ending was written (a reset is the recorded ending too)
        if keep is not None and sent is not None:
            whole = b"".join([*sent, last])
            keep.bodies.put(
                keep.at, keep.interaction, keep.key, _Sent(whole, str(error) if ending.reset else None), len(whole)
            )
        if ending.reset:
            raise _Reset(str(error)) from error
    finally:
        with anyio.CancelScope(shield=True):
            await chunks.aclose()  # type: ignore[attr-defined]
        if not delivered and hold is not None:
            hold.release()


async def _complete(
    chunks: AsyncIterator[StreamChunk],
    first: StreamChunk | None,
    model: str,
    headers: dict[str, str],
    fault_id: str | None = None,
    protocol: WireProtocol = CHAT,
    meta: ResponseMeta | None = None,
) -> Response:
    """The whole ``chat.completion``, or an error: a stream that breaks the protocol or ends without a finish
    (a ``Truncate``/``Corrupt`` fault, a recorded violation) is a 502 naming the problem and the fault."""
    collected: list[StreamChunk] = [] if first is None else [first]
    validator = StreamValidator()
    try:
        if first is not None:
            validator.feed(first)
        async for chunk in chunks:
            validator.feed(chunk)
            collected.append(chunk)
        validator.close()
    except LlmError as exc:
        if exc.code is ErrorCode.PROTOCOL_VIOLATION:
            fault = f" [injected fault {fault_id}]" if fault_id is not None else ""
            message = f"the replayed stream cannot be a completion: {exc.message}{fault}"
            return problem(502, message, exc.code.value, headers=headers, protocol=protocol)
        return _provider_error(exc, headers, protocol)
    finally:
        with anyio.CancelScope(shield=True):
            await chunks.aclose()  # type: ignore[attr-defined]
    return JSONResponse(protocol.completion(collected, model=model, meta=meta), headers=headers)


def replay_server_for(playback: Playback) -> ReplayServer:
    """A replay server (not started) whose default routes answer from ``playback``, an engine another face shares:
    one set of play counts, call numbers and faults for both (the fault search's ``tape_server_url``)."""
    server = ReplayServer(playback.source, replay_options=playback.replay_options)
    assert server._default is not None  # built over a cassette
    server._default = _Target(None, playback.source, playback.replay_options, playback=playback)
    return server


def _announce(server: ReplayServer) -> None:
    if server.remote_warning is not None:
        print(server.remote_warning, file=sys.stderr, flush=True)
    lines = [f"chunktape: replaying on {server.url} (OpenAI base_url {server.url}/v1); Ctrl-C to stop"]
    lines.extend(f"  scenario {name}: {server.url}/scenarios/{name}/v1/chat/completions" for name in server.scenarios)
    print("\n".join(lines), flush=True)


def serve(
    cassettes: CassetteSource | Sequence[CassetteSource] = (),
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    replay_options: ReplayOptions | None = None,
    scenarios: str | os.PathLike[str] | Sequence[Scenario] | None = None,
    allow_remote: bool = False,
    limits: ServerLimits = ServerLimits(),  # noqa: B008 - ServerLimits is frozen
    on_ready: Callable[[ReplayServer], None] | None = None,
    script: str | os.PathLike[str] | Script | None = None,
    record: str | os.PathLike[str] | None = None,
    **replay: Unpack[ReplayKeywords],
) -> None:
    """Run the replay server in the foreground until Ctrl-C (what ``chunktape serve`` does).

    Binds first (a busy port or a non-loopback host raises ``LlmError(INVALID_CONFIG)`` with a one-line
    message), then calls ``on_ready(server)`` (default: print the URL and the scenario routes), then serves.
    The replay settings (``replay_options``, the keywords) are ``ReplayServer``'s, passed on as they are.
    For tests, use ``ReplayServer`` as a (async) context manager instead.
    """
    server = ReplayServer(
        cassettes,
        host=host,
        port=port,
        replay_options=replay_options,
        scenarios=scenarios,
        allow_remote=allow_remote,
        limits=limits,
        script=script,
        record=record,
        **replay,
    )
    (on_ready or _announce)(server)
    server.run()
