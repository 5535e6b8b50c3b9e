"""The replay engine: which recorded interaction answers a request, and the call that plays it.

``Playback`` is what every replay face stands on: ``ReplayAdapter`` (chunk streams), ``ReplayServer`` and
``ReplayTransport`` (HTTP). It matches a live request to the first unplayed recorded interaction (repeats
allowed or not), keeps the played/held counts, chooses each call's fault, raises the misses
(``CASSETTE_MISMATCH``/``CASSETTE_EXHAUSTED``) with their hints, and plays an interaction on the chosen
timing. Every face holds its engine as ``playback`` (``ReplayAdapter.playback``, ``ReplayServer.playback``,
``ReplayTransport.playback``) for ``assert_all_played()``, ``play_counts``, ``calls`` and ``injected``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import NamedTuple

from chunktape import _abort as abort
from chunktape._cassettes.codec import LazyCassette, as_lazy
from chunktape._cassettes.matching import RequestMatcher
from chunktape._cassettes.model import Cancelled, Cassette, Interaction, Raised, RecordedRequest
from chunktape._cassettes.redaction import redact_request, secrets_to_redact
from chunktape._errors import LIBRARY_ADVICE, Advice, ErrorCode, LlmError
from chunktape._protocol import GenerateOptions, StreamChunk, aclose_stream
from chunktape._replayer.options import ReplayOptions
from chunktape._secrets import redact_text, scanner
from chunktape._virtual_time import now as clock
from chunktape.faults._plan import ActiveFault, FaultPlan, Reservation, reservation

__all__ = ["Hold", "Playback", "ReplayCall"]


class Hold:
    """The recorded interaction one call holds (uses up), if any, until the call gives it back."""

    __slots__ = ("_release", "index")

    def __init__(self, release: Callable[[int], None]) -> None:
        self._release = release
        self.index: int | None = None
        """The held interaction, or None (nothing reserved yet, or given back)."""

    def take(self, index: int) -> int:
        self.index = index
        return index

    def release(self, index: int | None = None) -> None:
        """Give the interaction back (once): the next matching call replays it."""
        if self.index is not None:
            held, self.index = self.index, None
            self._release(held)


class ReplayCall(NamedTuple):
    """One ``Playback.open()`` call: its number, its injected fault, its chunks and what it holds."""

    call: int
    """The 1-based number of the call (as ``Targeted(calls=...)`` counts them)."""
    fault_id: str | None
    """The id of the fault injected into this call, or None."""
    chunks: AsyncGenerator[StreamChunk, None]
    """The call's stream, as ``stream()`` would yield it; close it if it is not read to its end."""
    hold: Hold
    """The interaction the call holds once its chunks are read: a face that knows the stream never reached its
    consumer (a server whose client left) gives it back with ``hold.release()``, after closing ``chunks``."""


class Playback:
    """Answers each request with the first unplayed recorded interaction of ``cassette`` that matches.

    Identical requests replay in recorded order (so a recorded 429, 429, success retry replays as such); a
    played interaction is used up unless ``options.allow_repeats``. Recorded errors are raised at the same
    position, recordings that were cut short raise ``CASSETTE_EXHAUSTED`` when read past their end.
    """

    def __init__(
        self, cassette: Cassette | LazyCassette | str | os.PathLike[str], replay_options: ReplayOptions
    ) -> None:
        self.replay_options = replay_options
        """How this engine replays (validated when the options were built)."""
        self.source = as_lazy(cassette)
        self.fault_plan = FaultPlan(replay_options.faults)
        """The faults applied at replay time, with their per-call state (FailFirst counters, Chaos draws)."""
        self.injected: list[str | None] = []
        """Per call, the id of the fault injected into it, or None."""
        self.matcher = RequestMatcher(replay_options.match_on)
        # Live requests are redacted like the recorder did, so they still match. The environment's credentials
        # are read once, here: one set per engine, not a scan of os.environ per call.
        self._secrets = secrets_to_redact(replay_options.redact, allow=replay_options.allow_secrets)
        self._redacts = bool(scanner(self._secrets, patterns=False).literals)
        self.play_counts = [0] * len(self.source)
        """How often each recorded interaction was played."""
        self._unplayed_from = 0
        """Every interaction before this one was played: matching starts here (a long cassette played in order
        is matched in constant time per request, not in time growing with what was played)."""
        self.calls = 0
        """How many calls were made."""
        self.where = str(self.source.path) if self.source.path is not None else "the cassette"
        """The cassette as error messages name it."""

    @property
    def path(self) -> str | None:
        return None if self.source.path is None else str(self.source.path)

    @property
    def recorded_name(self) -> str:
        """The name of the adapter the cassette was recorded from (``replay`` when it does not say)."""
        return self.source.meta.adapter or "replay"

    # -- matching ------------------------------------------------------------------------------

    def as_recorded(self, options: GenerateOptions | RecordedRequest) -> RecordedRequest:
        """The request as the recorder would have stored it (same fields, same redaction): what ``select`` takes.

        A ``RecordedRequest`` with its fingerprint is taken as ``RecordedRequest.from_options`` made it: a caller
        that has one already (a session) does not pay for hashing the request twice.
        """
        if type(options) is not RecordedRequest or not options.fingerprint:
            options = RecordedRequest.from_options(options)
        return redact_request(options, self._secrets) if self._redacts else options

    def _candidates(self, request: RecordedRequest) -> list[int]:
        matcher = self.matcher
        return [index for index, recorded in enumerate(self.source.requests) if matcher(request, recorded)]

    def select(self, request: RecordedRequest) -> int:
        """The interaction that would answer ``request`` now; raises ``CASSETTE_MISMATCH`` / ``CASSETTE_EXHAUSTED``."""
        counts, matcher, recorded = self.play_counts, self.matcher, self.source.requests
        # The first unplayed match wins: stop there, so later requests need not even be decoded.
        for index in range(self._unplayed_from, len(recorded)):
            if counts[index] == 0 and matcher(request, recorded[index]):
                return index
        candidates = self._candidates(request)
        if not candidates:
            raise self.matcher.mismatch(request, self.source.requests, self.where)
        if self.replay_options.allow_repeats:
            return min(candidates, key=lambda index: (counts[index], index))
        numbers = ", ".join(f"#{index}" for index in candidates)
        raise LlmError(
            f"the request (model={request.model!r}) matches {len(candidates)} interaction(s) in {self.where} "
            f"({numbers}), all already played",
            ErrorCode.CASSETTE_EXHAUSTED,
            advice=Advice.RECORD_OR_REPEAT,
        )

    def can_play(self, options: GenerateOptions | RecordedRequest) -> bool:
        """Whether a call with ``options`` now would replay something (rather than mismatch or run out).

        ``options`` may be the request as ``RecordedRequest.from_options`` made it (see ``open``)."""
        try:
            self.select(self.as_recorded(options))
        except LlmError:
            return False
        return True

    def unplayed(self) -> list[int]:
        return [index for index, count in enumerate(self.play_counts) if count == 0]

    def assert_all_played(self, *, advice: str = LIBRARY_ADVICE[Advice.UNPLAYED]) -> None:
        """Fail if a recorded interaction was never played (the code under test made fewer calls); the message
        ends with ``advice``, the next step in the caller's face (the pytest plugin names ``--tape-mode``)."""
        unplayed = self.unplayed()
        if not unplayed:
            return
        requests = self.source.requests
        listed = "; ".join(f"#{index} {_describe(requests[index])}" for index in unplayed[:10])
        more = f"; and {len(unplayed) - 10} more" if len(unplayed) > 10 else ""
        raise AssertionError(
            redact_text(
                f"{len(unplayed)} of {len(requests)} recorded interaction(s) in {self.where} were never played: "
                f"{listed}{more}; {advice}"
            )
        )

    # -- holding -------------------------------------------------------------------------------

    def reserve(self, request: RecordedRequest) -> int:
        """Hold the interaction that answers ``request`` now, so concurrent calls with the same request get the
        next one; raises like ``select``."""
        index = self.select(request)
        counts = self.play_counts
        counts[index] += 1
        start = self._unplayed_from
        while start < len(counts) and counts[start]:
            start += 1
        self._unplayed_from = start
        return index

    def release(self, index: int) -> None:
        """Give back an interaction a call held without using it up (an injected failure): a retry replays it."""
        self.play_counts[index] -= 1
        if not self.play_counts[index]:
            self._unplayed_from = min(self._unplayed_from, index)

    def begin(self, options: GenerateOptions) -> tuple[int, ActiveFault | None]:
        """Count one call and choose its fault now (listed in ``injected``): its number and fault.

        For faces answering concurrent requests: they belong to this call, whatever other calls do meanwhile.
        A call whose abort signal fired already gets no fault (and no ``injected`` entry).
        """
        self.calls += 1
        signal = options.signal
        if signal is not None and signal.aborted:
            return self.calls, None
        fault = self.fault_plan.select(options) if self.fault_plan else None
        self.injected.append(None if fault is None else fault.fault_id)
        return self.calls, fault

    def hold(self, fault: ActiveFault | None, request: RecordedRequest, hold: Hold) -> Reservation[int]:
        """``with playback.hold(fault, request, hold) as index:``: the interaction answering ``request``, held in
        ``hold`` for the call; an injected ``HttpError`` fails it on entry, and a fault that does not use the
        interaction up gives it back on exit (``chunktape.faults._plan.reservation``)."""
        return reservation(fault, lambda: hold.take(self.reserve(request)), hold.release)

    # -- playing -------------------------------------------------------------------------------

    def open(self, options: GenerateOptions, *, request: RecordedRequest | None = None) -> ReplayCall:
        """Start one call now: count it and choose its fault at once (``begin``), and say which they are.

        Everything else (the injected HTTP error, matching, playing) happens as the returned ``chunks`` are
        read. ``request`` is ``options`` as ``RecordedRequest.from_options`` made it, for a caller that has it
        already (it is not hashed again).
        """
        number, fault = self.begin(options)
        signal = options.signal
        hold = Hold(self.release)
        if signal is not None and signal.aborted:
            return ReplayCall(call=number, fault_id=None, chunks=_raise(signal.error()), hold=hold)
        return ReplayCall(
            call=number,
            fault_id=None if fault is None else fault.fault_id,
            chunks=self._play(options, fault, options if request is None else request, hold),
            hold=hold,
        )

    async def _play(
        self, options: GenerateOptions, fault: ActiveFault | None, live: GenerateOptions | RecordedRequest, hold: Hold
    ) -> AsyncGenerator[StreamChunk, None]:
        signal = options.signal
        with self.hold(fault, self.as_recorded(live), hold) as index:
            interaction = self.source.interaction(index)
            if fault is None and self.replay_options.timing.is_instant:
                # The hot path: no sleeps, no wrapping.
                if signal is None:
                    for event in interaction.events:
                        yield event.chunk
                else:
                    for event in interaction.events:
                        if signal.aborted:
                            raise signal.error()
                        yield event.chunk
                self._end(interaction, index)
                return
            # Delays a fault injects (a stall, latency) shift the rest of the recorded schedule, not vanish into it.
            shift = (lambda: fault.delayed_s) if fault is not None else None
            chunks: AsyncIterator[StreamChunk] = self.timed(interaction, index, signal, shift)
            if fault is not None:
                chunks = fault.wrap(chunks, signal)
            try:
                async for chunk in chunks:
                    yield chunk
            finally:
                await aclose_stream(chunks)  # a fault's wrapper is typed as a plain AsyncIterator

    async def timed(
        self,
        interaction: Interaction,
        index: int,
        signal: abort.AbortSignal | None,
        shift: Callable[[], float] | None = None,
    ) -> AsyncGenerator[StreamChunk, None]:
        """The interaction's chunks released on this engine's ``timing``, ending with its recorded outcome.

        This is the stream a fault plan wraps; sleeps go through ``asyncio.sleep`` (virtual time works; in a
        server's task, a silence declared towards its client, whose clock may jump over it) and stop at once on
        cancellation or an abort.
        """
        start = clock()
        timing = self.replay_options.timing
        due = timing.offsets(interaction)
        instant = timing.is_instant
        for position, event in enumerate(interaction.events):
            if not instant:
                delay = start + due[position] + (shift() if shift is not None else 0.0) - clock()
                if delay > 0:
                    await abort.sleep(delay, signal)
            if signal is not None and signal.aborted:
                raise signal.error()
            yield event.chunk
        if not instant:
            delay = start + due[-1] + (shift() if shift is not None else 0.0) - clock()
            if delay > 0:
                await abort.sleep(delay, signal)
        self._end(interaction, index)

    def _end(self, interaction: Interaction, index: int) -> None:
        """Replay how the recorded stream ended."""
        outcome = interaction.outcome
        if type(outcome) is Raised:
            raise _raised(outcome)
        if type(outcome) is Cancelled:
            reason = f" ({outcome.reason})" if outcome.reason else ""
            raise LlmError(
                f"interaction #{index} of {self.where} was cut short after {len(interaction.events)} chunk(s)"
                f"{reason}; there is nothing more to replay",
                ErrorCode.CASSETTE_EXHAUSTED,
                hint="re-record the interaction to the end, or stop reading where the recording stops",
            )


async def _raise(error: LlmError) -> AsyncGenerator[StreamChunk, None]:
    raise error
    yield  # pragma: no cover - makes this an async generator


def _raised(outcome: Raised) -> LlmError:
    try:
        code = ErrorCode(outcome.code)
    except ValueError:  # recorded by a newer chunktape with a code this one does not know
        return LlmError(f"{outcome.code}: {outcome.message}", ErrorCode.INVALID_RESPONSE, status=outcome.status)
    return LlmError(outcome.message, code, status=outcome.status, retry_after=outcome.retry_after)


def _describe(request: RecordedRequest) -> str:
    last = request.messages[-1] if request.messages else None
    text = "" if last is None else f", last {last.role} message {last.text[:40]!r}"
    return f"(model {request.model!r}{text})"
