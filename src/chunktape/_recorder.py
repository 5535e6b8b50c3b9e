"""``RecordingAdapter``: wraps any adapter and records each stream as it passes through (a tee)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import warnings
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from chunktape._cassettes.codec import open_cassette
from chunktape._cassettes.journal import Journal, journal_path
from chunktape._cassettes.model import (
    Cancelled,
    Cassette,
    CassetteMeta,
    Completed,
    Event,
    Interaction,
    Outcome,
    Raised,
    RecordedRequest,
    ResponseMeta,
    ToolRun,
)
from chunktape._cassettes.redaction import (
    REDACTED,
    check_secrets,
    env_secrets,
    redact,
    redact_interaction,
    redact_request,
    redact_tool_runs,
    secrets_to_redact,
)
from chunktape._cassettes.response import ResponseSink, redacted_meta, response_sink
from chunktape._cassettes.store import append_interactions, failed_path, save_cassette, save_new
from chunktape._errors import ErrorCode, LlmError, ProtocolViolation
from chunktape._protocol import (
    BlockEnd,
    Finish,
    GenerateOptions,
    LlmAdapter,
    StreamChunk,
    ToolCallBlock,
    WrappingAdapter,
)
from chunktape._validation import StreamValidator

__all__ = [
    "LIBRARY_SECRET_ADVICE",
    "RUN_TAG",
    "JournalWriteWarning",
    "ProviderClock",
    "RecordingAdapter",
    "RecordingCall",
    "StreamViolationWarning",
    "none_completed",
    "raised_from",
    "sent_as",
]

RUN_TAG = "chunktape.run"
"""``CassetteMeta.tags`` key naming the run that wrote a cassette. A recorder whose tags carry it writes like
``--tape-mode all`` across pytest-xdist workers: the first writer of a run replaces the file, later writers of
the same run add to it, so the cassette holds that run's union rather than its last writer's."""
LIBRARY_SECRET_ADVICE = "pass its value in allow_secrets=[...]"
"""How a library user accepts a credential that ``save`` refused (faces pass their own to ``save``)."""


class StreamViolationWarning(UserWarning):
    """A recorded stream broke a StreamChunk rule. It is recorded as-is, so the violation can be replayed."""


class JournalWriteWarning(UserWarning):
    """The journal could not be written (disk full, quota, I/O error): recording goes on in memory only."""


class _Slot:
    """One interaction while it is being recorded; frozen into an ``Interaction`` on save."""

    __slots__ = ("attempt", "events", "id", "outcome", "request", "response", "started_at", "violation")

    def __init__(self, id: int, request: RecordedRequest, started_at: datetime, attempt: int) -> None:
        self.id = id
        self.request = request
        self.started_at = started_at
        self.attempt = attempt
        self.events: list[Event] = []
        self.outcome: Outcome | None = None
        self.violation: ProtocolViolation | None = None
        self.response: ResponseMeta | None = None

    def freeze(self) -> Interaction:
        outcome = self.outcome
        if outcome is None:
            t_ns = self.events[-1].t_ns if self.events else 0
            if self.events and type(self.events[-1].chunk) is Finish:
                # A consumer that breaks out of ``async for`` at finish leaves the generator unclosed; the
                # stream itself was complete.
                outcome = Completed(t_ns=t_ns)
            else:
                outcome = Cancelled(t_ns=t_ns, reason="still streaming when the recorder was closed")
        return Interaction(
            request=self.request,
            events=list(self.events),
            outcome=outcome,
            started_at=self.started_at,
            attempt=self.attempt,
            response=self.response,
        )


def raised_from(error: Exception, *, t_ns: int) -> Raised:
    """How an exception that is not an ``LlmError`` is recorded: ``INVALID_RESPONSE``, naming its class."""
    return Raised(
        t_ns=t_ns,
        code=ErrorCode.INVALID_RESPONSE.value,
        message=f"{type(error).__name__}: {error}",
        exception_type=f"{type(error).__module__}.{type(error).__qualname__}",
    )


def none_completed(interactions: Sequence[Interaction]) -> bool:
    """Whether a recording holds interactions and none of them completed (a down server, a wrong URL or key, a
    Ctrl-C before the first chunk): what was recorded is not the provider's answer and must not take a cassette's
    place."""
    return bool(interactions) and not any(type(item.outcome) is Completed for item in interactions)


def loop_clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time``, or ``time.monotonic`` itself where that is all ``loop.time`` does (asyncio's own loops): the
    same clock, read twice a chunk, without a Python frame per read. A loop in virtual time keeps its own."""
    if getattr(loop.time, "__func__", None) is asyncio.BaseEventLoop.time:
        return time.monotonic
    return loop.time


class ProviderClock:
    """Time attributable to the provider: spent waiting on the inner stream, not in the consumer's hands.

    The tee is pull-based, so a consumer that works between chunks delays the next read; counting that time
    would make a replay (which the same consumer slows down again) count it twice. ``now`` is the clock in
    seconds: the event loop's (``loop.time``) for async streams, ``time.monotonic`` for sync ones.
    """

    __slots__ = ("_now", "_since", "elapsed")

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._since: float | None = now()
        self.elapsed = 0.0

    def waiting(self) -> None:
        self._since = self._now()

    def arrived(self) -> int:
        """Stop the wait (if one is running) and return the provider time so far, in ns."""
        if self._since is not None:
            self.elapsed += self._now() - self._since
            self._since = None
        return round(self.elapsed * 1e9)


def _stopped(events: list[Event], t_ns: int, reason: str) -> Completed | Cancelled:
    """How a stream the consumer stopped (closed, cancelled, aborted) ended: complete if the finish chunk was
    already out (nothing was cut), else cut short for ``reason``."""
    if events and type(events[-1].chunk) is Finish:
        return Completed(t_ns=t_ns)
    return Cancelled(t_ns=t_ns, reason=reason)


def _close_validator(slot: _Slot, validator: StreamValidator | None) -> None:
    if validator is None:
        return
    try:
        validator.close()
    except ProtocolViolation as violation:
        slot.violation = violation


class RecordingCall:
    """One interaction being recorded, fed by whoever decodes the stream: ``chunk()`` per chunk as it arrives
    (journaled at once, validated), then ``end(outcome)`` once. ``RecordingAdapter.stream`` drives one per call;
    ``RecordingTransport`` drives one per HTTP exchange, from the bytes it tees."""

    __slots__ = ("_journal", "_recorder", "_slot", "_validator")

    def __init__(self, recorder: RecordingAdapter, slot: _Slot, journal: Journal | None) -> None:
        self._recorder = recorder
        self._slot = slot
        self._journal = journal
        self._validator = StreamValidator() if recorder.validate else None

    @property
    def events(self) -> list[Event]:
        return self._slot.events

    @property
    def ended(self) -> bool:
        return self._slot.outcome is not None

    def respond(self, response: ResponseMeta) -> None:
        """Keep the provider's response metadata with the interaction (journaled with its end, then written with
        the cassette): call it before ``end``."""
        self._slot.response = response

    def chunk(self, t_ns: int, chunk: StreamChunk) -> None:
        slot = self._slot
        slot.events.append(Event(t_ns=t_ns, chunk=chunk))
        if self._journal is not None:
            try:
                self._journal.event(slot.id, t_ns, chunk)
            except LlmError as error:
                self._recorder._journal_failed(error)
                self._journal = None
        if self._validator is not None:
            try:
                self._validator.feed(chunk)
            except ProtocolViolation as violation:
                slot.violation, self._validator = violation, None

    def end(self, outcome: Outcome) -> None:
        """Record how the stream ended (a completed stream's validation is closed first); later calls do nothing."""
        slot = self._slot
        if slot.outcome is not None:
            return
        if type(outcome) is Completed:
            _close_validator(slot, self._validator)
        slot.outcome = outcome
        if self._journal is not None:
            try:
                self._journal.end(slot.id, outcome, slot.response)
            except LlmError as error:
                self._recorder._journal_failed(error)

    def warn(self, *, strict: bool = False) -> None:
        """Warn about a recorded violation (see ``RecordingAdapter``)."""
        self._recorder._warn(self._slot, strict=strict)


def sent_as(protocol: str, *, streaming: bool, include_usage: bool) -> str:
    """How an HTTP call was sent beyond its request (``RecordingAdapter.begin``'s ``sent``): its wire protocol, whether
    it asked for a stream, and whether for the stream's usage."""
    return f"{protocol} stream={streaming} usage={include_usage}"


class RecordingAdapter(WrappingAdapter):
    """Forwards every ``stream()`` call to ``inner`` and records it as one interaction of a cassette.

    Each chunk reaches the caller as soon as ``inner`` yields it and is appended to a journal next to the
    cassette at once, so a crash loses nothing received. The cassette itself is written on ``aclose()``
    (or leaving ``async with``), after credentials are redacted (``redact``) and checked.

    ``redact``: True redacts the credentials in use (``inner.secrets`` and ``*_API_KEY`` / ``*_TOKEN`` /
    ``*_SECRET`` environment values); a sequence adds more literals to redact; False redacts nothing. A
    credential still present at save raises ``SECRET_DETECTED`` unless listed in ``allow_secrets``.
    ``append`` adds to an existing cassette instead of replacing it.

    **Failures of the disk.** A journal that cannot be created (no permission, a parent that is a file, a
    read-only folder, no space, a link planted at its name) raises ``CASSETTE_UNWRITABLE`` naming the path from
    the first ``stream()`` call, before ``inner`` is called: nothing was received, so nothing is lost. A journal
    write that fails mid-stream (disk full, quota, I/O error) never breaks the caller's stream: every chunk still
    reaches the caller and is kept in memory, the journal keeps what it had (it is no longer written) and a
    ``JournalWriteWarning`` names it; the save then writes everything, or raises ``CASSETTE_UNWRITABLE`` if the
    disk is still full, leaving the journal in place and the recording in memory (``save()`` again later).

    **Threads.** One recorder may be shared by threads, each running its own event loop: journal creation,
    interaction numbering and journal writes are locked, so every ``stream()`` call is its own interaction in
    one journal and one cassette. A stream still running when the recorder is closed (saved) goes on for its
    caller; its later chunks are kept in memory only (the saved cassette marks it cut short; ``save()`` again
    writes the rest).
    """

    def __init__(
        self,
        inner: LlmAdapter,
        cassette: str | os.PathLike[str],
        *,
        redact: bool | Sequence[str] = True,
        allow_secrets: Sequence[str] = (),
        validate: bool = True,
        append: bool = False,
        journal: bool = True,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(inner)
        self.path = Path(cassette)
        self.journal_path = journal_path(self.path)
        self.redact = redact
        self.allow_secrets = tuple(allow_secrets)
        self.validate = validate
        self.append = append
        # What requests are redacted with, read once (the environment's credentials included): not a scan of
        # os.environ per call. The save reads them again, so a credential that appears later is still caught.
        self._request_secrets = self._secrets()
        self.meta = CassetteMeta(
            adapter=inner.name, tags=dict(tags or {}), reasoning_options=list(inner.reasoning_options())
        )
        self._use_journal = journal
        self._journal: Journal | None = None
        self._lock = threading.Lock()
        self._slots: list[_Slot] = []
        self._tool_runs: list[ToolRun] = []
        self._attempts: Counter[tuple[str, str]] = Counter()
        """Calls so far per (request fingerprint, how it was sent): a repeat of the very same call is its next
        attempt; two calls whose requests differ only where a request holds nothing (stream or not, the wire
        protocol, the usage report asked for: what matching ignores) are not each other's retry."""
        self._closed = False
        self._close_saved = False
        self.written: Path | None = None
        """The file the last save wrote: ``path``, a ``failed_path``, or None."""
        if append and self.path.exists():
            self._attempts.update((request.fingerprint, "") for request in open_cassette(self.path).requests)

    @property
    def interactions(self) -> list[Interaction]:
        """What was recorded so far, in the order the ``stream()`` calls began (unredacted)."""
        return [slot.freeze() for slot in self._slots]

    @property
    def tool_runs(self) -> list[ToolRun]:
        """The tool executions recorded so far, in the order they finished (unredacted)."""
        return list(self._tool_runs)

    def record_tool(self, run: ToolRun) -> ToolRun:
        """Keep one tool execution of an agent run beside the model calls (journaled at once); returns it as kept.

        Without an ``after_interaction``, it is set to the interaction that made the call ``run.call_id`` (the
        latest one when no recorded call has that id)."""
        with self._lock:
            if run.after_interaction < 0 and self._slots:
                run = msgspec.structs.replace(run, after_interaction=self._caller(run.call_id))
            self._tool_runs.append(run)
            journal = self._journal
        if journal is not None:
            try:
                journal.tool(run)
            except LlmError as error:
                self._journal_failed(error)
        return run

    def _caller(self, call_id: str) -> int:
        for slot in reversed(self._slots):
            for event in slot.events:
                chunk = event.chunk
                if type(chunk) is BlockEnd and type(chunk.block) is ToolCallBlock and chunk.block.id == call_id:
                    return slot.id
        return len(self._slots) - 1

    def _begin(self, request: RecordedRequest, sent: str = "") -> tuple[_Slot, Journal | None]:
        """Number the interaction and journal its request, under the lock (threads may share the recorder)."""
        # Redact the request before the journal sees it; chunks are redacted at save.
        request = redact_request(request, self._request_secrets)
        with self._lock:
            if self._closed:
                raise LlmError(f"the RecordingAdapter for {self.path} is closed", ErrorCode.INVALID_CONFIG)
            journal = self._journal
            if self._use_journal and journal is None:
                # Raises CASSETTE_UNWRITABLE before anything is numbered or streamed.
                journal = self._journal = Journal(journal_path(self.path), self.meta, cassette=self.path)
                self.journal_path = journal.path  # another live recorder of this cassette may own the first
            key = (request.fingerprint, sent)
            self._attempts[key] += 1
            slot = _Slot(len(self._slots), request, datetime.now(UTC), self._attempts[key])
            self._slots.append(slot)
        if journal is not None:
            try:
                journal.begin(slot.id, request, slot.started_at, slot.attempt)
            except LlmError as error:
                self._journal_failed(error)
                journal = None
        return slot, journal

    def _journal_failed(self, error: LlmError) -> None:
        """A journal write failed: say so, and go on in memory (a warnings-as-errors filter must not break the
        caller's stream; the save reports a disk still full as ``CASSETTE_UNWRITABLE``)."""
        message = f"{error.message}; recording goes on in memory and is written when {self.path} is saved"
        with contextlib.suppress(JournalWriteWarning):
            warnings.warn(message, JournalWriteWarning, stacklevel=4)

    def begin(
        self, options: GenerateOptions, request: RecordedRequest | None = None, *, sent: str = ""
    ) -> RecordingCall:
        """Start recording one interaction for ``options`` (numbered, its request journaled) and return it;
        ``request`` is ``options`` as ``RecordedRequest.from_options`` made it, when the caller has it already;
        ``sent`` says how an HTTP call sent it beyond the request (its protocol, streamed or not): a call is
        ``attempt`` 2, 3, ... only of an earlier call with the same request sent the same way.

        Raises ``CASSETTE_UNWRITABLE`` when the journal cannot be created, ``INVALID_CONFIG`` once closed.
        """
        slot, journal = self._begin(RecordedRequest.from_options(options) if request is None else request, sent)
        return RecordingCall(self, slot, journal)

    def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        return self.record(options)

    async def record(
        self, options: GenerateOptions, request: RecordedRequest | None = None, *, sent: str = ""
    ) -> AsyncGenerator[StreamChunk, None]:
        """``stream(options)``, given ``request`` (``options`` as ``RecordedRequest.from_options`` made it) when the
        caller has it already, so the request is hashed once per call; ``sent`` as ``begin`` takes it."""
        clock = ProviderClock(loop_clock(asyncio.get_running_loop()))
        call = self.begin(options, request, sent=sent)
        events = call.events
        iterator: AsyncGenerator[StreamChunk, None] | None = None
        outcome: Outcome | None = None
        sink = ResponseSink()  # an HTTP adapter (OpenAICompatAdapter) reports its answer's metadata here
        sinks = response_sink()
        try:
            iterator = self.inner.stream(options)
            now, feed = clock._now, call.chunk
            while True:
                # ``clock.waiting()`` and ``clock.arrived()``, inlined: they run once per chunk.
                since = clock._since = now()
                token = sinks.set(sink)  # only while the inner stream runs, never across our own yield
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    break
                finally:
                    sinks.reset(token)
                elapsed = clock.elapsed = clock.elapsed + (now() - since)
                clock._since = None
                feed(round(elapsed * 1e9), chunk)
                yield chunk
            outcome = Completed(t_ns=clock.arrived())
        except LlmError as error:
            signal = options.signal
            if error.code is ErrorCode.CANCELLED and signal is not None and signal.aborted:
                outcome = _stopped(events, clock.arrived(), "abort signal")
            else:
                outcome = Raised.from_error(error, t_ns=clock.arrived())
            call.warn()
            raise
        except GeneratorExit:
            outcome = _stopped(events, clock.arrived(), "consumer closed the stream")
            raise
        except asyncio.CancelledError:
            outcome = _stopped(events, clock.arrived(), "task cancelled")
            raise
        except Exception as error:
            outcome = raised_from(error, t_ns=clock.arrived())
            call.warn()
            raise
        finally:
            if sink.observer is not None:
                call.respond(redacted_meta(sink.observer.meta(), self._secrets()))
            call.end(outcome or Cancelled(t_ns=clock.arrived(), reason="interrupted"))
            if iterator is not None:
                await iterator.aclose()
        call.warn(strict=True)

    def _warn(self, slot: _Slot, *, strict: bool = False) -> None:
        """Warn about a recorded violation; on error paths a warnings-as-errors filter must not mask the error."""
        if slot.violation is None:
            return
        message = f"interaction #{slot.id} for {self.path}: {slot.violation}; recorded as-is"
        if strict:
            warnings.warn(message, StreamViolationWarning, stacklevel=2)
            return
        with contextlib.suppress(StreamViolationWarning):
            warnings.warn(message, StreamViolationWarning, stacklevel=2)

    def _secrets(self) -> list[str]:
        return secrets_to_redact(self.redact, declared=self.inner.secrets, allow=self.allow_secrets)

    def cassette(self) -> Cassette:
        """The cassette as it would be saved now (redacted, not yet checked)."""
        secrets = self._secrets()
        interactions = [slot.freeze() for slot in self._slots]
        tool_runs = list(self._tool_runs)
        if secrets:
            interactions = [redact_interaction(item, secrets) for item in interactions]
            tool_runs = redact_tool_runs(tool_runs, secrets)
        return Cassette(meta=self.meta, interactions=interactions, tool_runs=tool_runs)

    @property
    def failed_path(self) -> Path:
        """The first name ``save(failed=True)`` tries: ``<name>.failed<suffix>`` beside the cassette."""
        return failed_path(self.path)

    def _keep_failed(self, cassette: Cassette, *, mode: int | None = None) -> Path:
        """Keep ``cassette`` beside the cassette under the first free failed name: an earlier failed recording
        holds what was never saved anywhere else, so it is never replaced (nor removed by a later save)."""
        return save_new(cassette, (failed_path(self.path, number) for number in range(1, 1000)), mode=mode)

    def save(self, *, failed: bool | None = False, secret_advice: str = LIBRARY_SECRET_ADVICE) -> Cassette | None:
        """Write what was recorded (nothing is written if nothing was recorded) and drop the journal.

        ``failed=True`` keeps a recording that must not replace the cassette (its test failed, nothing was
        streamed) beside it instead; ``failed=None`` decides by the recording itself: kept aside if no call
        completed (a down server, a wrong URL or key, an interrupt before the reply), since replaying it would
        replay the failure rather than the provider. Kept aside means, for inspection: in ``failed_path``, or
        ``<name>.failed-2<suffix>`` (-3, ...) when an earlier one is there; ``written`` names the file. A
        credential found at save is never written, nor is the recording lost: it is kept the same way with every
        credential replaced (mode 0600) and ``SECRET_DETECTED`` says so; ``secret_advice`` tells the user how to
        allow a value that is not a real credential, in the words of the face they use. Failed recordings are
        never removed by chunktape.
        """
        if not self._slots and not self._tool_runs:
            self._drop_journal()
            self.written = None
            return None
        if failed is None:
            failed = none_completed(self.interactions)
        destination = self.failed_path if failed else self.path
        cassette = self.cassette()
        literals = [*self.inner.secrets, *env_secrets().values()]
        try:
            # A failed recording's name is chosen when it is written (failed-2, -3... beside an earlier one): the
            # message names the file only once it is known (``_keep_redacted``'s "kept in").
            named = "the failed recording" if failed else destination
            check_secrets(cassette, literals, allow=self.allow_secrets, destination=named)
        except LlmError as error:
            raise self._keep_redacted(cassette, literals, error, secret_advice) from None
        written = cassette
        if failed:
            destination = self._keep_failed(cassette)
        elif self.append or RUN_TAG in self.meta.tags:
            join = None if self.append else self._same_run
            written = append_interactions(
                destination, cassette.interactions, cassette.meta, join=join, tool_runs=cassette.tool_runs
            )
        else:
            save_cassette(cassette, destination)
        self.written = destination
        self._drop_journal()
        return written

    def _same_run(self, meta: CassetteMeta) -> bool:
        return meta.tags.get(RUN_TAG) == self.meta.tags[RUN_TAG]

    def _keep_redacted(self, cassette: Cassette, literals: Sequence[str], error: LlmError, advice: str) -> LlmError:
        """Keep ``cassette`` in ``failed_path`` with every credential replaced, private; drop the journal
        (it holds them in clear); return the error to raise, saying where it went and how to accept it."""
        allowed = set(self.allow_secrets)
        redacted = redact(cassette, [secret for secret in literals if secret not in allowed])
        kept = self.written = self._keep_failed(redacted, mode=0o600)
        self._drop_journal()
        hint = f"if it is not a real credential, {advice} and record again"
        if all(a.request == b.request for a, b in zip(cassette.interactions, redacted.interactions, strict=True)):
            # A credential in a request would stop the redacted recording from matching it on replay.
            hint += f"; or keep the redacted recording as the cassette: mv {kept} {self.path}"
        return LlmError(
            f"{error.message}; the recording was kept in {kept} with every credential replaced by {REDACTED} "
            "(mode 0600)",
            ErrorCode.SECRET_DETECTED,
            hint=hint,
        )

    def _drop_journal(self) -> None:
        if self._journal is not None:
            self._journal.close(remove=True)
            self._journal = None

    async def aclose(self) -> None:
        """Close to new streams and save the cassette, once: later calls do nothing, unless the save failed (a
        disk still full): then they try it again. A credential found at save is not retried: it was kept."""
        self._closed = True
        if self._close_saved:
            return
        try:
            self.save()
        except LlmError as error:
            self._close_saved = error.code is ErrorCode.SECRET_DETECTED
            raise
        self._close_saved = True
