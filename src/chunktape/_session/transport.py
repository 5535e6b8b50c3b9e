"""``CassetteSession.transport()``: an SDK's HTTP traffic replayed from a session's cassette, or recorded into it.

The pytest ``tape`` fixture's HTTP face (``tape.transport()``, ``tape.http_client()``): one transport that takes
the session's record mode, cassette path, faults (the fault matrix's too) and matchers, and routes each request
as the session routes an adapter call. A replayed request is answered in process by a ``ReplayTransport``
(faults at the HTTP level, no socket); a recorded one goes to the network through a ``RecordingTransport``.
Its recording is saved with the session's (at the fixture's teardown, by the test's outcome), never by
closing the client; its replays count for ``assert_all_played()`` (``--tape-strict``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx
import httpx2

from chunktape._cassettes.model import RecordedRequest
from chunktape._errors import LlmError
from chunktape._httpx import (
    AnyAsyncTransport,
    AnyRequest,
    AnyResponse,
    AnyTransport,
    DualTransport,
    HttpKind,
    aclose_inner,
    close_inner,
    default_tls,
)
from chunktape._recorder import RecordingAdapter
from chunktape._replayer.adapter import ReplayAdapter
from chunktape._replayer.options import ReplayOptions
from chunktape._replayer.playback import Playback
from chunktape._session.modes import SessionCall
from chunktape.http._protocols import protocol_for
from chunktape.http._recording_transport import RecordingTransport
from chunktape.http._replay_transport import ReplayTransport
from chunktape.http._routes import route_model


class Session(Protocol):
    """What the transport needs of the session it routes for (``CassetteSession``)."""

    path: Path
    calls: list[SessionCall]

    @property
    def replayer(self) -> ReplayAdapter | None: ...

    @property
    def replay_options(self) -> ReplayOptions: ...

    @property
    def recording(self) -> bool: ...

    virtual_time: bool

    def recording_settings(self) -> dict[str, Any]: ...

    def replays(self, playback: Playback | None, request: Callable[[], RecordedRequest]) -> bool: ...

    def attach_http(
        self,
        *,
        playback: Playback | None = None,
        recorder: RecordingAdapter | None = None,
        close: Callable[[], None] | None = None,
    ) -> None: ...

    def missed(self, error: LlmError) -> None: ...


__all__ = ["SessionTransport", "client_for", "network_transport"]


def network_transport(kind: HttpKind, *, sync: bool) -> AnyTransport | AnyAsyncTransport:
    """The real transport a recording sends through: ``kind``'s ``HTTPTransport`` (sync) or ``AsyncHTTPTransport``."""
    tls = default_tls(kind)
    if kind == "httpx2":
        return httpx2.HTTPTransport(verify=tls) if sync else httpx2.AsyncHTTPTransport(verify=tls)
    return httpx.HTTPTransport(verify=tls) if sync else httpx.AsyncHTTPTransport(verify=tls)


def client_for(transport: DualTransport, *, kind: HttpKind, sync: bool, **client: Any) -> Any:
    """A ``kind`` client (``Client`` when ``sync``, else ``AsyncClient``) on ``transport``."""
    library: Any = httpx2 if kind == "httpx2" else httpx
    return (library.Client if sync else library.AsyncClient)(transport=transport, **client)


def _chat_request(request: AnyRequest) -> RecordedRequest | None:
    """The model request ``request`` carries (chat completions, Messages, Responses), as a recorded request; None
    for any other request."""
    protocol = protocol_for(request.url.path) if request.method == "POST" else None
    if protocol is None:
        return None
    try:
        decoded = protocol.decode_request(request.content, model=route_model(request.url.path))
        return RecordedRequest.from_options(decoded.options)
    except LlmError:
        return None


class SessionTransport(DualTransport):
    """Replays ``session``'s cassette or records into it, request by request, per the session's mode.

    ``inner`` is the transport a recording goes through (default: ``network_transport(kind, sync=sync)``, built
    only when something is recorded). Closing the client closes ``inner``; the session saves the recording.
    """

    def __init__(
        self,
        session: Session,
        *,
        kind: HttpKind = "httpx2",
        sync: bool = False,
        inner: AnyTransport | AnyAsyncTransport | None = None,
    ) -> None:
        self.session = session
        self.kind = kind
        self.sync = sync
        self._inner = inner
        self.replay: ReplayTransport | None = None
        """What answers the replayed requests (None when the session has no cassette to replay)."""
        if session.replayer is not None:
            self.replay = ReplayTransport(
                session.replayer.source, session.replay_options, virtual_time=session.virtual_time
            )
            session.attach_http(playback=self.replay.playback)
        self.recording: RecordingTransport | None = None
        """What records the others, once one was recorded."""

    def _recorder(self) -> RecordingTransport:
        if self.recording is None:
            inner = self._inner or network_transport(self.kind, sync=self.sync)
            self.recording = RecordingTransport(inner, self.session.path, **self.session.recording_settings())
            self.session.attach_http(recorder=self.recording.recorder, close=lambda: close_inner(inner))
        return self.recording

    def _route(self, request: AnyRequest) -> ReplayTransport | RecordingTransport:
        """The transport this request goes to; a chat completion is listed in ``session.calls``."""
        chat = _chat_request(request)
        if chat is None and self.session.recording:
            return self._recorder()  # no chat completion: it passes through, unrecorded
        replay = self.replay
        replays = self.session.replays(None if replay is None else replay.playback, lambda: _known(chat))
        if chat is not None:
            self.session.calls.append(SessionCall(request=chat, recorded=not replays))
        if replays:
            assert replay is not None  # replays() says so
            return replay
        return self._recorder()

    def handle(self, request: AnyRequest) -> AnyResponse:
        request.read()
        try:
            return self._route(request).handle(request)
        except LlmError as error:
            self.session.missed(error)
            raise

    async def handle_async(self, request: AnyRequest) -> AnyResponse:
        await request.aread()
        try:
            return await self._route(request).handle_async(request)
        except LlmError as error:
            self.session.missed(error)
            raise

    def close(self) -> None:
        if self.recording is not None:
            close_inner(self.recording.inner)

    async def aclose(self) -> None:
        if self.recording is not None:
            await aclose_inner(self.recording.inner)


def _known(chat: RecordedRequest | None) -> RecordedRequest:
    assert chat is not None  # only new_episodes asks, and it records what is no chat completion
    return chat
