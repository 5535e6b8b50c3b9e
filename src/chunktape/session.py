"""``use_cassette``: record or replay one cassette, picked by a vcrpy-style record mode.

Beside the model calls, a session records and replays an agent run's tool executions (``tools()``), and it checks
each call's reasoning effort against the adapter it goes to, as the service would, before any stream starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Unpack

import msgspec

from chunktape.cassettes.codec import shift_tool_runs
from chunktape.cassettes.model import Cassette, RecordedRequest, ToolRun
from chunktape.errors import LIBRARY_ADVICE, Advice, ErrorCode, LlmError
from chunktape.faults import Fault
from chunktape.harness.tools import Tool, ToolRunner
from chunktape.harness.tooltape import (
    RecordingToolRunner,
    ReplayingToolRunner,
    ToolDivergence,
    ToolTape,
    VerifyingToolRunner,
)
from chunktape.protocol import GenerateOptions, LlmAdapter, ReasoningOption, StreamChunk, check_reasoning
from chunktape.recorder.recording import LIBRARY_SECRET_ADVICE, RUN_TAG, RecordingAdapter, failed_path, none_completed
from chunktape.replay_options import ReplayKeywords, ReplayOptions
from chunktape.replayer.replaying import ReplayAdapter

__all__ = ["MISS_CODES", "CassetteSession", "RecordMode", "SessionCall", "use_cassette"]


class RecordMode(StrEnum):
    """When a session records, as in vcrpy."""

    NONE = "none"
    """Replay only; a request without a recording raises, the live adapter is never built."""
    ONCE = "once"
    """Record if the cassette does not exist yet, else replay only. If another writer creates it meanwhile
    (a pytest-xdist worker recording the same cassette), this session's recording is added to it."""
    NEW_EPISODES = "new_episodes"
    """Replay what matches, record (and append) what does not."""
    ALL = "all"
    """Always record, replacing the cassette; sessions given one ``run_id`` replace it once, together."""

    @classmethod
    def parse(cls, value: str | RecordMode) -> RecordMode:
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(mode.value for mode in cls)
            raise LlmError(f"unknown record mode {value!r}; valid modes: {valid}", ErrorCode.INVALID_CONFIG) from None


class SessionCall(msgspec.Struct, frozen=True, kw_only=True):
    """One ``stream()`` call made through a session, and whether it was recorded live or replayed."""

    request: RecordedRequest
    recorded: bool


MISS_CODES = frozenset({ErrorCode.CASSETTE_NOT_FOUND, ErrorCode.CASSETTE_MISMATCH, ErrorCode.CASSETTE_EXHAUSTED})
"""The codes of a cassette miss: the request had no recording to replay."""


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
        options: ReplayOptions | None = None,
        validate: bool = True,
        run_id: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.mode = RecordMode.parse(mode)
        self.options = ReplayOptions() if options is None else options
        """How the cassette is replayed; its ``redact`` and ``allow_secrets`` also apply to what is recorded."""
        self.calls: list[SessionCall] = []
        self.miss: LlmError | None = None
        """The first cassette miss (not found, mismatch, exhausted) a call raised, even if the caller caught it."""
        self.fault: Fault | None = None
        """The fault a ``tape_fault_matrix`` run is about (set by the pytest plugin; None elsewhere)."""
        self.fault_id: str | None = None
        """That run's test id (``http-429``), or None."""
        self.owner_closes = False
        """True when the session's owner (the pytest fixture, at teardown) saves and closes it: ``aclose()`` and
        leaving ``async with`` then do nothing, so the code under test cannot save it before its outcome is known."""
        self._live_factory = live
        self._live: LlmAdapter | None = None
        self._validate = validate
        self._run_id = run_id
        self._recorder: RecordingAdapter | None = None
        self._replayer: ReplayAdapter | None = None
        self._saved: Cassette | None = None
        self._save_done = False
        self._failed: bool | None = None
        self._closed = False
        self.tool_divergences: list[ToolDivergence] = []
        """What a ``tools(..., verify=True)`` runner found: real tool results that differ from the recording."""
        self._tool_tape: ToolTape | None = None
        self.written: Path | None = None
        """The file this session wrote on save: ``path``, ``failed_path``, or None when nothing was recorded."""
        if self.path.exists() and self.mode is not RecordMode.ALL:
            self._replayer = ReplayAdapter(self.path, options=self.options)

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
        if self._recorder is None:
            return base
        recorded = self._recorder.cassette()
        if self.mode is RecordMode.NEW_EPISODES:
            return Cassette(
                meta=base.meta,
                interactions=[*base.interactions, *recorded.interactions],
                tool_runs=[*base.tool_runs, *shift_tool_runs(recorded.tool_runs, len(base.interactions))],
            )
        return recorded

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
        records = self.mode is RecordMode.ALL or (self.mode is RecordMode.ONCE and self._replayer is None)
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
        timing = self.options.timing
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
            # new_episodes and once append (under the cassette lock, re-reading the file): another process may
            # create the cassette between now and our save, and replacing it would lose its interactions. all
            # replaces, but only once per run: later writers of the same run (tagged with it) add to it.
            append = self.mode in (RecordMode.NEW_EPISODES, RecordMode.ONCE)
            tags = {RUN_TAG: self._run_id} if self.mode is RecordMode.ALL and self._run_id is not None else {}
            self._recorder = RecordingAdapter(
                self._live,
                self.path,
                redact=self.options.redact,
                allow_secrets=self.options.allow_secrets,
                validate=self._validate,
                append=append,
                tags=tags,
            )
        return self._recorder

    def _open(self, options: GenerateOptions, request: RecordedRequest) -> AsyncGenerator[StreamChunk, None]:
        """The stream of the adapter this call goes to, given the request hashed once; the call is listed."""
        if self._closed:
            raise LlmError(f"the cassette session for {self.path} is closed", ErrorCode.INVALID_CONFIG)
        replayer = self._replayer
        if replayer is not None and (self.mode is not RecordMode.NEW_EPISODES or replayer.can_play(request)):
            check_reasoning(replayer, options)
            self.calls.append(SessionCall(request=request, recorded=False))
            return replayer.open(options, request=request).chunks
        if self.mode is RecordMode.NONE:
            raise LlmError(f"{self.path} does not exist", ErrorCode.CASSETTE_NOT_FOUND, advice=Advice.RECORD)
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
            if error.code in MISS_CODES and self.miss is None:
                self.miss = error
            raise

    def assert_all_played(self, *, advice: str = LIBRARY_ADVICE[Advice.UNPLAYED]) -> None:
        """Fail if a replayable interaction, or a recorded tool run this session's ``tools()`` could answer, was never
        played; the message ends with ``advice`` (the caller's face)."""
        if self._replayer is not None:
            self._replayer.assert_all_played(advice=advice)
        unplayed = [] if self._tool_tape is None else self._tool_tape.unplayed()
        if unplayed:
            listed = "; ".join(f"{run.name}({run.arguments})" for run in unplayed[:10])
            raise AssertionError(f"{len(unplayed)} recorded tool run(s) in {self.path} were never played: {listed}")

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
        recorder = self._recorder
        if recorder is None:
            self._save_done = True
            return None
        if failed is None:
            failed = self._failed if self._failed is not None else none_completed(recorder.interactions)
        self._failed = failed
        try:
            saved = recorder.save(failed=failed, secret_advice=secret_advice)
        except LlmError as error:
            if error.code is ErrorCode.SECRET_DETECTED:  # kept aside, redacted: nothing left to retry
                self.written = recorder.written
                self._save_done = True
            raise
        self._save_done = True
        self.written = recorder.written
        if saved is not None and not failed:
            self._saved = saved
        return self.written

    async def aclose(self) -> None:
        """Save what was recorded and close the live adapter (once); nothing when ``owner_closes``."""
        await self._finish(failed=None)

    async def __aexit__(self, *exc_info: object) -> None:
        """Leaving ``async with`` on an exception keeps the recording aside, as a failed test's is."""
        await self._finish(failed=True if exc_info and exc_info[0] is not None else None)

    async def _finish(self, *, failed: bool | None) -> None:
        if self.owner_closes or (self._closed and self._save_done):
            return
        self._closed = True
        try:
            self.save(failed=failed)
        finally:
            live, self._live = self._live, None
            if live is not None:
                await live.aclose()

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
            live, self._live = self._live, None
            if live is not None:
                loop = asyncio.new_event_loop()
                try:
                    loop.run_until_complete(live.aclose())
                finally:
                    loop.close()


def use_cassette(
    path: str | os.PathLike[str],
    *,
    live: Callable[[], LlmAdapter] | None = None,
    mode: str | RecordMode = RecordMode.NONE,
    options: ReplayOptions | None = None,
    validate: bool = True,
    run_id: str | None = None,
    **replay: Unpack[ReplayKeywords],
) -> CassetteSession:
    """An adapter that replays ``path`` or records into it with ``live()``, per ``mode`` (vcrpy semantics).

    ``live`` is a factory, called only when something is actually recorded, so a real adapter and its API key
    are never needed to replay. Use it as ``async with use_cassette(...) as adapter:``; it saves on exit.
    The replay settings are ``options`` with the keywords (``timing=``, ``faults=``, ``match_on=``, ...) applied,
    checked now even when this run records: a bad matcher, fault or timing must not pass while recording and
    fail only later, offline, in CI. ``redact`` and ``allow_secrets`` apply to the recording too.
    ``run_id`` names the run in ``all`` mode: sessions sharing it (pytest-xdist workers of one run) together
    replace the cassette once, each adding its recording, instead of the last one replacing the others'.
    """
    return CassetteSession(
        path, live=live, mode=mode, options=ReplayOptions.of(options, **replay), validate=validate, run_id=run_id
    )
