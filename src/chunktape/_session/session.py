"""``use_cassette``: record or replay one cassette, picked by a vcrpy-style record mode.

Beside the model calls, a session records and replays an agent run's tool executions (``tools()``), and it checks
each call's reasoning effort against the adapter it goes to, as the service would, before any stream starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from chunktape._cassettes.model import Cassette, RecordedRequest, ToolRun
from chunktape._cassettes.store import failed_path, shift_tool_runs
from chunktape._errors import LIBRARY_ADVICE, Advice, ErrorCode, LlmError
from chunktape._httpx import HttpKind
from chunktape._protocol import GenerateOptions, LlmAdapter, ReasoningOption, StreamChunk, check_reasoning
from chunktape._recorder import LIBRARY_SECRET_ADVICE, RUN_TAG, RecordingAdapter, none_completed
from chunktape._replayer.adapter import ReplayAdapter
from chunktape._replayer.options import ReplayKeywords, ReplayOptions
from chunktape._replayer.playback import Playback
from chunktape._session.modes import MISS_CODES, RecordMode, SessionCall
from chunktape.harness._tools import Tool, ToolRunner
from chunktape.harness._tooltape import (
    RecordingToolRunner,
    ReplayingToolRunner,
    ToolDivergence,
    ToolTape,
    VerifyingToolRunner,
)

if TYPE_CHECKING:
    from chunktape._session.transport import SessionTransport

__all__ = ["CassetteSession", "use_cassette"]


class CassetteSession(LlmAdapter):
    """The adapter ``use_cassette`` returns (and the pytest ``tape`` fixture yields): replays, records, or both,
    for one cassette file.

    ``path``, ``mode``, ``calls`` (every call, in order), ``cassette`` (what the file holds, or will hold once
    saved), ``injected`` and ``miss`` are for test fixtures and reports. Save happens on ``aclose()`` / leaving
    ``async with``, or on ``close()`` where no event loop runs (a sync pytest fixture's teardown).

    It routes each call to a replayer or a recorder (built only when something is recorded), so it is not a
    ``WrappingAdapter``: it has no one inner adapter.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        live: Callable[[], LlmAdapter] | None,
        mode: str | RecordMode,
        replay_options: ReplayOptions | None = None,
        validate: bool = True,
        run_id: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.mode = RecordMode.parse(mode)
        self.replay_options = ReplayOptions() if replay_options is None else replay_options
        """How the cassette is replayed; its ``redact`` and ``allow_secrets`` also apply to what is recorded."""
        self.calls: list[SessionCall] = []
        self.miss: LlmError | None = None
        """The first cassette miss (not found, mismatch, exhausted) a call raised, even if the caller caught it."""
        self.virtual_time = False
        """Whether this session's replays run in virtual time (the pytest plugin sets it for fault runs and timed
        replays): a sync client's replayed body then waits on a virtual clock of its own (``ReplayTransport``)."""
        self._live_factory = live
        self._live: LlmAdapter | None = None
        self._validate = validate
        self._run_id = run_id
        self._recorder: RecordingAdapter | None = None
        self._replayer: ReplayAdapter | None = None
        self._saved: Cassette | None = None
        self._http_recorders: list[RecordingAdapter] = []
        self._saved_recorders: set[int] = set()
        self._http_playbacks: list[Playback] = []
        self._closers: list[Callable[[], None]] = []
        self._save_done = False
        self._failed: bool | None = None
        self._closed = False
        self.tool_divergences: list[ToolDivergence] = []
        """What a ``tools(..., verify=True)`` runner found: real tool results that differ from the recording."""
        self._tool_tape: ToolTape | None = None
        self.written: Path | None = None
        """The file this session wrote on save: ``path``, ``failed_path``, or None when nothing was recorded."""
        if self.path.exists() and not self.mode.replaces:
            self._replayer = ReplayAdapter(self.path, replay_options=self.replay_options)

    @property
    def name(self) -> str:
        if self._replayer is not None:
            return self._replayer.name
        return self._live.name if self._live is not None else "cassette"

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        """The recorded adapter's efforts when replaying; the live adapter's once one was built."""
        if self._replayer is not None:
            return self._replayer.reasoning_options()
        return self._live.reasoning_options() if self._live is not None else ()

    @property
    def replayer(self) -> ReplayAdapter | None:
        return self._replayer

    @property
    def recorder(self) -> RecordingAdapter | None:
        return self._recorder

    @property
    def injected(self) -> list[str | None]:
        """Per replayed call, the id of the fault injected into it, or None."""
        return [] if self._replayer is None else list(self._replayer.injected)

    @property
    def recording(self) -> bool:
        """Whether a miss is recorded live (rather than raised)."""
        if self.mode is RecordMode.NONE:
            return False
        return self.mode is not RecordMode.ONCE or self._replayer is None

    @property
    def cassette(self) -> Cassette:
        """What the cassette file holds after this session: replayed and newly recorded interactions."""
        if self._saved is not None:
            return self._saved
        base = self._replayer.cassette if self._replayer is not None else Cassette()
        recorders = self._recorders()
        if not recorders:
            return base
        recorded = [recorder.cassette() for recorder in recorders]
        interactions = [item for cassette in recorded for item in cassette.interactions]
        # Only the adapter calls' recorder (first) runs tools, so the runs' interaction numbers stay right.
        tool_runs = [run for cassette in recorded for run in cassette.tool_runs]
        if self.mode is RecordMode.NEW_EPISODES:
            return Cassette(
                meta=base.meta,
                interactions=[*base.interactions, *interactions],
                tool_runs=[*base.tool_runs, *shift_tool_runs(tool_runs, len(base.interactions))],
            )
        return Cassette(meta=recorded[0].meta, interactions=interactions, tool_runs=tool_runs)

    def _recorders(self) -> list[RecordingAdapter]:
        """Every recorder writing this cassette: the adapter calls', then each HTTP transport's."""
        return [*([self._recorder] if self._recorder is not None else []), *self._http_recorders]

    def recording_settings(self) -> dict[str, Any]:
        """The keywords a recorder of this session's cassette takes (``RecordingAdapter``, ``RecordingTransport``):
        its redaction, and whether it appends (and under which run tag) per the mode."""
        # new_episodes and once append (under the cassette lock, re-reading the file): another process may
        # create the cassette between now and our save, and replacing it would lose its interactions. all
        # replaces, but only once per run: later writers of the same run (tagged with it) add to it.
        append = self.mode in (RecordMode.NEW_EPISODES, RecordMode.ONCE)
        tags = {RUN_TAG: self._run_id} if self.mode.replaces and self._run_id is not None else {}
        return {
            "redact": self.replay_options.redact,
            "allow_secrets": self.replay_options.allow_secrets,
            "append": append,
            "tags": tags,
        }

    def replays(self, playback: Playback | None, request: Callable[[], RecordedRequest]) -> bool:
        """Whether a call goes to ``playback`` (True) or is recorded (False), per the mode; ``request()`` is asked
        only when the mode must know whether it can play. Raises ``CASSETTE_NOT_FOUND`` when it can do neither."""
        if self._closed:
            raise LlmError(f"the cassette session for {self.path} is closed", ErrorCode.INVALID_CONFIG)
        if playback is not None and (self.mode is not RecordMode.NEW_EPISODES or playback.can_play(request())):
            return True
        if self.mode is RecordMode.NONE:
            raise LlmError(f"{self.path} does not exist", ErrorCode.CASSETTE_NOT_FOUND, advice=Advice.RECORD)
        return False

    def attach_http(
        self,
        *,
        playback: Playback | None = None,
        recorder: RecordingAdapter | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        """What an HTTP face of this session (``transport()``, the plugin's server) replays with or records into:
        ``assert_all_played()`` checks the playback, ``save()`` writes the recorder with the rest, and ``close``
        runs when the session closes (after the save)."""
        if playback is not None:
            self._http_playbacks.append(playback)
        if recorder is not None:
            self._http_recorders.append(recorder)
        if close is not None:
            self._closers.append(close)

    def missed(self, error: LlmError) -> None:
        """Note a cassette miss that a call raised (the first one is kept in ``miss``)."""
        if error.code in MISS_CODES and self.miss is None:
            self.miss = error

    def transport(self, *, kind: HttpKind = "httpx2", sync: bool = False) -> SessionTransport:
        """A transport for an SDK's ``kind`` client (``sync``: ``Client``, else ``AsyncClient``) that replays this
        cassette or records into it per the mode, with the session's faults, matchers and timing (faults apply at
        the HTTP level: ``ReplayTransport``). Its recordings are saved with the session's, never by closing the
        client."""
        from chunktape._session.transport import SessionTransport

        return SessionTransport(self, kind=kind, sync=sync)

    def http_client(self, *, kind: HttpKind = "httpx2", sync: bool = False, **client: Any) -> Any:
        """An httpx2 or httpx client (``sync``: ``Client``, else ``AsyncClient``) on ``transport(...)``; ``client``
        are the client's own keywords (``timeout=``, ``headers=``...)."""
        from chunktape._session.transport import client_for

        return client_for(self.transport(kind=kind, sync=sync), kind=kind, sync=sync, **client)

    def tools(self, tools: Mapping[str, Tool] | None = None, *, verify: bool = False) -> ToolRunner:
        """The ``ToolRunner`` for an agent run on this cassette (pass it to ``run_agent``), picked by the mode.

        Recording (``all``; ``once`` without a cassette): runs ``tools`` and records each execution beside the
        model calls. Replaying (``none``; ``once`` with a cassette): answers from the recorded executions and
        calls no tool; a call not on tape raises ``CASSETTE_MISMATCH``. With ``Timing.recorded(speed)`` each answer
        takes its recorded duration (scaled), in event-loop time. ``new_episodes``: replays what is on
        tape, runs and records the rest. ``verify=True`` (replaying): runs the real ``tools`` instead, gives the
        model the recorded results, and lists every divergence in ``tool_divergences`` (and warns
        ``ToolDivergenceWarning``). Runners of one session share its recording: each recorded run answers once.
        """
        records = self.mode.replaces or (self.mode is RecordMode.ONCE and self._replayer is None)
        needs_tools = records or verify
        if needs_tools and tools is None:
            why = f"record mode {self.mode.value!r} records them" if records else "verify=True runs them"
            raise LlmError(f"tools() needs the real tools: {why}", ErrorCode.INVALID_CONFIG, hint="pass tools={...}")
        if records:
            return RecordingToolRunner(tools or {}, self._record_tool)
        tape = self._tool_tape
        if tape is None:
            recorded = self._replayer.source.tool_runs if self._replayer is not None else []
            tape = self._tool_tape = ToolTape(recorded, str(self.path))
        if verify:
            return VerifyingToolRunner(tools or {}, tape, self.tool_divergences)
        fallback = None
        if self.mode is RecordMode.NEW_EPISODES and tools is not None:
            fallback = RecordingToolRunner(tools, self._record_tool)
        timing = self.replay_options.timing
        return ReplayingToolRunner(tape, fallback, time_scale=1e-9 / timing.speed if timing.kind == "recorded" else 0)

    def _record_tool(self, run: ToolRun) -> None:
        self._recording_adapter().record_tool(run)

    def _recording_adapter(self) -> RecordingAdapter:
        if self._recorder is None:
            if self._live_factory is None:
                raise LlmError(
                    f"record mode {self.mode.value!r} needs to record {self.path} but no live adapter factory was "
                    "given (use_cassette(..., live=...))",
                    ErrorCode.INVALID_CONFIG,
                )
            self._live = self._live_factory()
            self._recorder = RecordingAdapter(
                self._live, self.path, validate=self._validate, **self.recording_settings()
            )
        return self._recorder

    def _open(self, options: GenerateOptions, request: RecordedRequest) -> AsyncGenerator[StreamChunk, None]:
        """The stream of the adapter this call goes to, given the request hashed once; the call is listed."""
        replayer = self._replayer
        if self.replays(None if replayer is None else replayer.playback, lambda: request):
            assert replayer is not None  # replays() says so
            check_reasoning(replayer, options)
            self.calls.append(SessionCall(request=request, recorded=False))
            return replayer.open(options, request=request).chunks
        recorder = self._recording_adapter()
        check_reasoning(recorder.inner, options)
        self.calls.append(SessionCall(request=request, recorded=True))
        return recorder.record(options, request)

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        try:
            async with contextlib.aclosing(self._open(options, RecordedRequest.from_options(options))) as chunks:
                async for chunk in chunks:
                    yield chunk
        except LlmError as error:
            self.missed(error)
            raise

    def assert_all_played(self, *, advice: str = LIBRARY_ADVICE[Advice.UNPLAYED]) -> None:
        """Fail if a replayable interaction was never played (by the adapter calls, or by any HTTP face), or a
        recorded tool run this session's ``tools()`` could answer; the message ends with ``advice`` (the caller's
        face)."""
        replayers = [*([self._replayer.playback] if self._replayer is not None else []), *self._http_playbacks]
        if replayers:
            # Each face plays the file with its own counts: an interaction is unplayed if no face played it.
            unplayed = [set(replayer.unplayed()) for replayer in replayers]
            if set.intersection(*unplayed):
                least = min(zip(unplayed, replayers, strict=True), key=lambda pair: len(pair[0]))[1]
                least.assert_all_played(advice=advice)
        runs = [] if self._tool_tape is None else self._tool_tape.unplayed()
        if runs:
            listed = "; ".join(f"{run.name}({run.arguments})" for run in runs[:10])
            raise AssertionError(f"{len(runs)} recorded tool run(s) in {self.path} were never played: {listed}")

    @property
    def failed_path(self) -> Path:
        """The first name ``save(failed=True)`` tries: ``<name>.failed<suffix>`` beside the cassette (``written``
        names the file it used: ``<name>.failed-2<suffix>`` and on when an earlier failed recording is there)."""
        return failed_path(self.path)

    def save(self, *, failed: bool | None = None, secret_advice: str = LIBRARY_SECRET_ADVICE) -> Path | None:
        """Write what was recorded (once; no event loop needed) and return the file written, None if nothing was.

        ``failed=True`` is for a recording whose test failed: it goes to ``failed_path``, for inspection, and the
        cassette is left as it was, so a failed run never replaces a good cassette. Only the interactions this
        session recorded are kept there (in ``new_episodes`` mode, not the replayed ones). ``failed=None``
        decides by the recording itself: if no recorded call completed (a down server, a wrong URL or key, an
        interrupt before the reply), it is kept aside too, since replaying it would replay the failure rather
        than the provider; pass ``failed=False`` to keep such a recording as the cassette. A credential left in
        the recording raises ``SECRET_DETECTED`` and the recording is kept aside, redacted (see
        ``RecordingAdapter.save``). A save that failed otherwise (a full disk) is tried again by the next
        ``save()``, ``aclose()`` or ``close()``, with the same ``failed`` decision unless one is passed.
        """
        if self._save_done:
            return self.written
        recorders = [recorder for recorder in self._recorders() if id(recorder) not in self._saved_recorders]
        if not recorders and not self._saved_recorders:
            self._save_done = True
            return None
        if failed is None:
            everything = [item for recorder in self._recorders() for item in recorder.interactions]
            failed = self._failed if self._failed is not None else none_completed(everything)
        self._failed = failed
        problem: LlmError | None = None
        for recorder in recorders:  # each is saved, even after one failed
            if recorder is not self._recorders()[0] and self.mode.replaces and self._run_id is None:
                recorder.append = True  # the first writer replaced the cassette; the others add to it
            try:
                saved = recorder.save(failed=failed, secret_advice=secret_advice)
            except LlmError as error:
                if error.code is ErrorCode.SECRET_DETECTED:  # kept aside, redacted: nothing left to retry
                    self.written = recorder.written
                    self._saved_recorders.add(id(recorder))
                problem = problem or error
                continue
            self._saved_recorders.add(id(recorder))
            self.written = self.written or recorder.written
            if saved is not None and not failed:
                self._saved = saved  # the last save re-read the file: it holds every writer's interactions
        if problem is not None and problem.code is not ErrorCode.SECRET_DETECTED:
            raise problem  # a full disk: the next save() tries the recorders not yet saved again
        self._save_done = True
        if problem is not None:
            raise problem
        return self.written

    async def aclose(self) -> None:
        """Save what was recorded and close the live adapter (once)."""
        await self._finish(failed=None)

    async def __aexit__(self, *exc_info: object) -> None:
        """Leaving ``async with`` on an exception keeps the recording aside, as a failed test's is."""
        await self._finish(failed=True if exc_info and exc_info[0] is not None else None)

    async def _finish(self, *, failed: bool | None) -> None:
        if self._closed and self._save_done:
            return
        self._closed = True
        try:
            self.save(failed=failed)
        finally:
            self._close_http()
            live, self._live = self._live, None
            if live is not None:
                await live.aclose()

    def _close_http(self) -> None:
        closers, self._closers = self._closers, []
        for close in closers:
            close()

    def close(self, *, failed: bool | None = None, secret_advice: str = LIBRARY_SECRET_ADVICE) -> Path | None:
        """``save(...)``, then close a live adapter the factory built, where no event loop is running.

        For sync teardown (a pytest fixture used by async tests): saving needs no loop, and the live adapter's
        ``aclose()`` runs on a private loop that is closed afterwards; the thread's current loop is not touched.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise LlmError(
                "CassetteSession.close() cannot run inside an event loop; await aclose() instead",
                ErrorCode.INVALID_CONFIG,
                hint="",
            )
        if self._closed and self._save_done:
            return self.written
        self._closed = True
        try:
            return self.save(failed=failed, secret_advice=secret_advice)
        finally:
            self._close_http()
            live, self._live = self._live, None
            if live is not None:
                # A loop of its own, ended as asyncio.run ends one, that leaves the thread's current loop alone.
                with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
                    runner.run(live.aclose())


def use_cassette(
    path: str | os.PathLike[str],
    *,
    live: Callable[[], LlmAdapter] | None = None,
    mode: str | RecordMode = RecordMode.NONE,
    replay_options: ReplayOptions | None = None,
    validate: bool = True,
    run_id: str | None = None,
    **replay: Unpack[ReplayKeywords],
) -> CassetteSession:
    """An adapter that replays ``path`` or records into it with ``live()``, per ``mode`` (vcrpy semantics).

    ``live`` is a factory, called only when something is actually recorded, so a real adapter and its API key
    are never needed to replay. Use it as ``async with use_cassette(...) as adapter:``; it saves on exit.
    The replay settings are ``replay_options`` with the keywords (``timing=``, ``faults=``, ``match_on=``, ...) applied,
    checked now even when this run records: a bad matcher, fault or timing must not pass while recording and
    fail only later, offline, in CI. ``redact`` and ``allow_secrets`` apply to the recording too.
    ``run_id`` names the run in ``all`` mode: sessions sharing it (pytest-xdist workers of one run) together
    replace the cassette once, each adding its recording, instead of the last one replacing the others'.
    """
    return CassetteSession(
        path,
        live=live,
        mode=mode,
        replay_options=ReplayOptions.of(replay_options, **replay),
        validate=validate,
        run_id=run_id,
    )
