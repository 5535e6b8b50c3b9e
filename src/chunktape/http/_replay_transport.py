"""``ReplayTransport``: a chunk cassette answering an SDK's model requests in process, no socket.

Hand it to the SDK's httpx2 or httpx client, sync or async (one object serves all four)::

    transport = ReplayTransport("tests/cassettes/agent.msgpack", faults=["http-429"])
    sdk = openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key="test",
                             http_client=httpx2.AsyncClient(transport=transport))

Each ``POST .../chat/completions``, ``.../messages`` (Anthropic) or ``.../responses`` (OpenAI Responses) is
answered in that protocol (``chunktape.http._protocols``); it is matched, played and timed by the replay engine
``ReplayAdapter`` stands on
(the same keywords; ``playback`` is that engine, ``chunktape._replayer.Playback``), then rendered in the provider's
wire format with the metadata ``RecordingTransport`` kept (``Interaction.response``: id, answered model, ``created``,
``system_fingerprint``, headers, extras, no invented ``finish_reason``):

- a streamed request gets the event stream, released on the chosen timing (``asyncio.sleep``, so virtual time
  works; a sync client sleeps for real, or on a virtual clock of its own with ``virtual_time=True``); a request
  with ``stream: false`` the whole ``chat.completion``;
- the client's read timeout (``request.extensions["timeout"]``, what an SDK's ``timeout=`` sets) holds as over a
  socket (``chunktape.http._timeouts``): a wait longer than it (a stall, latency, a slow recorded gap) raises the
  request's library's ``ReadTimeout`` when it passes, which SDKs raise as their timeout error and retry. The
  response is handed over with its first event of content, as the replay server sends its head, so a silence
  before it times out the request itself (openai's own ``max_retries`` then retries it);
- a client that gives up (its timeout fired, it closed the body) before the recorded ending or the finish leaves
  the interaction unplayed: its retry replays it;
- a recorded HTTP error (a 429 before any chunk) is answered with its status, message and ``Retry-After``, so
  the SDK raises its own error and runs its own retry; a recorded reset mid-stream breaks the body with the
  library's ``ReadError`` (``ReadTimeout`` for a recorded timeout): the SDK's connection error; a recorded
  in-band error is sent in-band; a recording cut short ends the body there, without ``[DONE]``.

**Faults** apply at the event level, as ``FaultTransport`` applies them (same plan, same SSE-frame transforms,
same refusals): ``HttpError`` answers with its status before matching; a fault that fails the call leaves
the interaction unplayed, so the SDK's retry replays it. Only ``HttpError`` applies to a ``stream: false``
request.

**A miss** (no recorded interaction matches: ``CASSETTE_MISMATCH``; all played: ``CASSETTE_EXHAUSTED``; a
request that is no chat completion: ``CASSETTE_MISMATCH``) raises that ``LlmError`` from the transport. It is
no httpx error, so the openai SDK (and those built on it) lets it through unchanged, without retrying:
``except LlmError`` in a test sees the closest recorded request and the diff.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import AsyncIterator, Callable, Mapping
from typing import NamedTuple, Unpack

import msgspec

from chunktape._cassettes.codec import LazyCassette
from chunktape._cassettes.model import Cassette, Interaction, Raised
from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import (
    AnyRequest,
    AnyResponse,
    AsyncBody,
    DualTransport,
    LoopBody,
    read_error,
    response,
    sent_response,
)
from chunktape._protocol import Finish, aclose_stream
from chunktape._replayer.options import ReplayKeywords, ReplayOptions
from chunktape._replayer.playback import Hold, Playback
from chunktape._virtual_time import VirtualTimeLoop
from chunktape.faults._plan import ActiveFault, FaultPlan, Reservation
from chunktape.faults._sse import check_faults, faulted
from chunktape.http._protocols import CrossProtocolWarning, Renderer, WireProtocol, across_message, protocol_for
from chunktape.http._render import error_headers
from chunktape.http._rendered import Rendered
from chunktape.http._routes import route_model
from chunktape.http._timeouts import TimedBody

__all__ = ["ReplayTransport"]

_encoder = msgspec.json.Encoder()
_HEAD_PIECES = 2
"""The pieces a response waits for before its head is handed over: the opening role event and the first event after
it, as the replay server sends its head with the first bytes of content (a silence before them times out the
request itself, as over a socket)."""
_BROKEN = frozenset({ErrorCode.STREAM_ABORTED.value, ErrorCode.TIMEOUT.value})
"""Recorded outcomes that broke the connection rather than arriving in the body."""


class _Whole(NamedTuple):
    """An answer sent whole: an error or a JSON completion."""

    status: int
    headers: dict[str, str]
    content: bytes


class _Instant(NamedTuple):
    """An instant, fault-free event stream: its rendered bytes, handed over unread as a server's body (as a timed
    stream's is), which spares building the response the cost of reading them into it."""

    headers: dict[str, str]
    content: bytes


class _Streamed(NamedTuple):
    """An event stream released as it is read; ``held`` is left once it is closed."""

    headers: dict[str, str]
    pieces: AsyncIterator[bytes]
    held: Reservation[int]
    hold: Hold


def _error(
    protocol: WireProtocol, status: int, message: str, retry_after: float | None, headers: Mapping[str, str] = {}
) -> _Whole:
    body = protocol.error_body(message, status=status, retry_after=retry_after)
    head = {**headers, **error_headers(retry_after), "content-type": "application/json"}
    return _Whole(status, head, _encoder.encode(body))


class ReplayTransport(DualTransport):
    """Answers chat completions from ``cassette``; ``replay_options`` (or their keywords) are ``ReplayAdapter``'s;
    faults apply to the HTTP events (see the module docstring). ``injected`` lists the fault id per request (or None).
    ``playback`` is the replay engine: ``assert_all_played()``, ``play_counts``, ``calls``.

    Raises ``INVALID_CONFIG`` for a fault with no form on the wire (``FaultTransport``'s refusals).
    """

    def __init__(
        self,
        cassette: Cassette | LazyCassette | str | os.PathLike[str],
        replay_options: ReplayOptions | None = None,
        *,
        virtual_time: bool = False,
        **replay: Unpack[ReplayKeywords],
    ) -> None:
        self.playback = Playback(cassette, ReplayOptions.of(replay_options, **replay))
        """Matching, play counts, the faults' plan and timing (``assert_all_played()``, ``play_counts``)."""
        check_faults(self.playback.fault_plan)
        self.virtual_time = virtual_time
        """For sync clients: whether a body's waits (timing, stalls, the read timeout) run on a virtual clock of its
        own, which jumps over them, rather than in real time. An async client's loop decides for itself."""
        self._rendered: Rendered[bytes] = Rendered()
        self._warnings: Rendered[str | None] = Rendered()

    @classmethod
    def over(cls, playback: Playback, *, virtual_time: bool = False) -> ReplayTransport:
        """A transport answering from ``playback``, a replay engine another face shares (one set of play counts,
        call numbers and faults for both: the fault search's stand-in for ``tape``)."""
        transport = cls.__new__(cls)
        transport.playback = playback
        check_faults(playback.fault_plan)
        transport.virtual_time = virtual_time
        transport._rendered = Rendered()
        transport._warnings = Rendered()
        return transport

    @property
    def plan(self) -> FaultPlan:
        """The faults with their per-request state; they apply to the HTTP events, not to a chunk stream."""
        return self.playback.fault_plan

    @property
    def injected(self) -> list[str | None]:
        return self.playback.injected

    def assert_all_played(self) -> None:
        """Fail if a recorded interaction was never played (``ReplayAdapter.assert_all_played``)."""
        self.playback.assert_all_played()

    def _answer(self, request: AnyRequest) -> _Whole | _Instant | _Streamed:
        path = request.url.path  # unquoted anew on each look
        protocol = protocol_for(path) if request.method == "POST" else None
        if protocol is None:
            raise LlmError(
                f"{request.method} {request.url} is no model request: a ReplayTransport answers POST "
                "...chat/completions, .../messages and .../responses only",
                ErrorCode.CASSETTE_MISMATCH,
            )
        chat = protocol.decode_request(request.content, model=route_model(path))
        engine = self.playback
        _, active = engine.begin(chat.options)
        failed = active.http_error if active is not None else None
        if failed is not None:
            item, fault = failed
            return _error(
                protocol, fault.status, f"{fault.message or 'provider error'} [{item.label}]", fault.retry_after
            )
        hold = Hold(engine.release)
        held = engine.hold(active, engine.as_recorded(chat.options), hold)
        index = held.__enter__()
        interaction = engine.source.interaction(index)
        meta = interaction.response
        self._warn_across(index, interaction, protocol, chat.options.model)
        headers = dict(meta.headers) if meta is not None else {}
        outcome = interaction.outcome
        in_stream = meta is not None and meta.streamed and protocol.name != "chat"  # an error event after the head
        if type(outcome) is Raised and outcome.status is not None and not interaction.events and not in_stream:
            held.__exit__(None, None, None)
            return _error(protocol, outcome.status, outcome.message, outcome.retry_after, headers)
        if not chat.streaming:
            held.__exit__(None, None, None)
            if type(outcome) is Raised:
                return _error(protocol, outcome.status or 502, outcome.message, outcome.retry_after, headers)
            body = protocol.completion(interaction.chunks, model=chat.options.model, meta=meta)
            return _Whole(200, {**headers, "content-type": "application/json"}, _encoder.encode(body))
        headers["content-type"] = "text/event-stream; charset=utf-8"
        broken = type(outcome) is Raised and outcome.code in _BROKEN
        if active is None and engine.replay_options.timing.is_instant and not broken:
            held.__exit__(None, None, None)
            key = (protocol.name, chat.options.model, chat.include_usage)
            content = self._rendered.get(index, interaction, key)
            if content is None:  # rendered once; a later play (allow_repeats) sends the same bytes
                content = protocol.render(interaction, model=chat.options.model, include_usage=chat.include_usage)
                self._rendered.put(index, interaction, key, content, len(content))
            return _Instant(headers, content)
        renderer = protocol.renderer(model=chat.options.model, include_usage=chat.include_usage, meta=meta)
        pieces = self._events(request, interaction, index, renderer, active, hold)
        if active is not None:
            pieces = _faulty(pieces, active, request, renderer.error)
        return _Streamed(headers, pieces, held, hold)

    async def _events(
        self,
        request: AnyRequest,
        interaction: Interaction,
        index: int,
        renderer: Renderer,
        active: ActiveFault | None,
        hold: Hold,
    ) -> AsyncIterator[bytes]:
        """The event stream on the adapter's timing, shifted by the delays a fault injects, ending as recorded.

        A client that closes it before the recorded ending (or the finish) reached it, because it gave up (its read
        timeout fired during a stall or a slow recorded gap) or stopped reading, leaves the interaction unplayed:
        its retry replays it, as the replay server does for a client that left."""
        delivered = False
        try:
            yield renderer.head()
            shift = (lambda: active.delayed_s) if active is not None else None
            try:
                async for chunk in self.playback.timed(interaction, index, None, shift):
                    piece = renderer.chunk(chunk)
                    if type(chunk) is Finish:
                        delivered = True  # a client may stop at the finish without reading on to the end
                    if piece:
                        yield piece
            except LlmError:
                pass  # the recorded outcome, rendered below
            outcome = interaction.outcome
            if type(outcome) is Raised and outcome.code in _BROKEN:
                delivered = True  # the recorded break is the recorded ending
                message = f"{outcome.message} (replayed from {self.playback.path or 'the cassette'})"
                raise read_error(request, message, timeout=outcome.code == ErrorCode.TIMEOUT.value)
            ending = renderer.outcome(outcome).data
            delivered = True
            yield ending
        finally:
            if not delivered:
                hold.release()

    def handle(self, request: AnyRequest) -> AnyResponse:
        request.read()
        answer = self._answer(request)
        if isinstance(answer, _Instant):
            return sent_response(request, 200, headers=answer.headers, body=answer.content)
        if isinstance(answer, _Whole):
            return response(request, answer.status, headers=answer.headers, content=answer.content)
        timed = TimedBody(answer.pieces, request)
        body = LoopBody(timed, lambda: _release(timed, answer), loop_factory=self._loop_factory())
        try:
            body.run(lambda: timed.prefetch(_HEAD_PIECES))
        except BaseException:
            body.close()
            raise
        return response(request, 200, headers=answer.headers, stream=body)

    async def handle_async(self, request: AnyRequest) -> AnyResponse:
        await request.aread()
        answer = self._answer(request)
        if isinstance(answer, _Instant):
            return sent_response(request, 200, headers=answer.headers, body=answer.content)
        if isinstance(answer, _Whole):
            return response(request, answer.status, headers=answer.headers, content=answer.content)
        timed = TimedBody(answer.pieces, request)
        try:
            await timed.prefetch(_HEAD_PIECES)
        except BaseException:
            await _release(timed, answer)
            raise
        return response(request, 200, headers=answer.headers, stream=AsyncBody(timed, lambda: _release(timed, answer)))

    def _loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        return VirtualTimeLoop if self.virtual_time else asyncio.new_event_loop

    def _warn_across(self, index: int, interaction: Interaction, protocol: WireProtocol, model: str) -> None:
        """Warn when the interaction was recorded on another protocol than the route it is served on (the message is
        worked out once per interaction and route: it scans every event)."""
        key = (protocol.name, model)
        message = self._warnings.get(index, interaction, key)
        if message is None:
            message = self._warnings.put(index, interaction, key, across_message(interaction, protocol, model) or "")
        if message:
            warnings.warn(message, CrossProtocolWarning, stacklevel=6)


async def _faulty(
    pieces: AsyncIterator[bytes], active: ActiveFault, request: AnyRequest, report: Callable[[LlmError], bytes]
) -> AsyncIterator[bytes]:
    frames = faulted(pieces, active, request, report)
    try:
        async for frame in frames:
            yield frame.data
    finally:
        await aclose_stream(frames)


async def _release(timed: TimedBody, answer: _Streamed) -> None:
    """The body was closed: close the stream (its end decides whether a fault used the interaction up), then
    give the interaction back unless it was."""
    try:
        await timed.aclose()
    finally:
        answer.held.__exit__(None, None, None)
        if timed.timed_out:  # the client gave up waiting: whatever it had, it never took the answer
            answer.hold.release()
