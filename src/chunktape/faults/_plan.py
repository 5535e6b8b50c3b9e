"""Which faults fire on each call, and the one call that holds a recorded interaction for it.

Per ``stream()`` call (or HTTP request), a face that replays recordings does::

    active = plan.select(options)                    # counts the call; FailFirst/Chaos/Targeted decide here
    with reservation(active, reserve, release) as held:  # an HttpError raises here; nothing is reserved
        chunks = <the held interaction's chunks, timed, shifted by active.delayed_s>
        if active is not None:
            chunks = active.wrap(chunks, signal)     # the transforms (``chunktape.faults._transforms``)
        <stream chunks; close them>
    # on exit the interaction is released unless the fault consumed it: a retry replays it

A fault that fails the call (``HttpError``, ``Disconnect``, ``Truncate``, ``Corrupt``) does not consume the
recorded interaction; ``Stall`` and ``Latency`` serve it in full and consume it, unless the consumer abandoned
the stream before its end (e.g. its idle watchdog fired during a stall).

Several faults may fire on one call; they compose in the order given (an ``HttpError`` among them wins, as it
fails the call before any chunk). Every error they raise names the fault id and its seed.
"""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

import msgspec

from chunktape._protocol import AbortSignal, GenerateOptions, StreamChunk, aclose_stream
from chunktape.faults import _transforms as transforms
from chunktape.faults._chunks import CHUNKS
from chunktape.faults._specs import (
    STREAM_FAULT_TYPES,
    Always,
    Chaos,
    Corrupt,
    FailFirst,
    Fault,
    HttpError,
    Latency,
    Stall,
    StreamFault,
    Targeted,
    fault_id,
    parse_faults,
)

__all__ = ["ActiveFault", "FaultPlan", "FiredFault", "Reservation", "reservation"]

T = TypeVar("T")
R = TypeVar("R")
_CONSUMING = (Stall, Latency)


class FiredFault(msgspec.Struct, frozen=True, kw_only=True):
    """One stream fault chosen for a call, with the id and seed its failure messages quote."""

    fault: StreamFault
    fault_id: str
    seed: int

    @property
    def label(self) -> str:
        """How failure messages name the fault: its id and its seed."""
        return f"injected fault {self.fault_id} (seed {self.seed})"


class ActiveFault:
    """The faults that fire on one call; ``before_stream()`` then ``wrap()`` apply them."""

    __slots__ = ("_outcome", "call", "delayed_s", "fired")

    def __init__(self, fired: Sequence[FiredFault], *, call: int) -> None:
        if not fired:
            raise ValueError("an ActiveFault needs at least one fired fault")
        self.fired = tuple(fired)
        self.call = call
        """The 1-based number of the ``stream()`` call this applies to."""
        self._outcome: Literal["pending", "served", "abandoned"] = "pending"
        self.delayed_s = 0.0
        """Seconds of delay the faults injected so far; a timed source shifts its schedule by this much."""

    @property
    def fault_id(self) -> str:
        return "+".join(item.fault_id for item in self.fired)

    @property
    def seed(self) -> int:
        return self.fired[0].seed

    @property
    def consumes_interaction(self) -> bool:
        """Whether this call uses up the recorded interaction.

        False at once when a fault fails the call (``HttpError``, ``Disconnect``, ``Truncate``, ``Corrupt``),
        so a retry replays the interaction. ``Stall`` and ``Latency`` serve the whole interaction: True,
        unless the stream was abandoned before its end (a consumer's idle timeout during a stall), which
        this property reports once the wrapped stream has closed.
        """
        if not all(isinstance(item.fault, _CONSUMING) for item in self.fired):
            return False
        return self._outcome != "abandoned"

    @property
    def http_error(self) -> tuple[FiredFault, HttpError] | None:
        """The ``HttpError`` that fired, if one did: it fails the call before anything is sent."""
        for item in self.fired:
            if isinstance(item.fault, HttpError):
                return item, item.fault
        return None

    def before_stream(self) -> None:
        """Raise the injected ``PROVIDER_HTTP_ERROR`` if an ``HttpError`` fired; otherwise do nothing."""
        fired = self.http_error
        if fired is not None:
            raise transforms.http_error(fired[1], fired[0].label)

    def wrap(self, chunks: AsyncIterator[StreamChunk], signal: AbortSignal | None) -> AsyncIterator[StreamChunk]:
        """The faulty view of a chunk stream; closing it closes ``chunks``. Delays honour ``signal``."""
        return self.apply(chunks, CHUNKS, signal)

    def apply(
        self, items: AsyncIterator[T], codec: transforms.Codec[T], signal: AbortSignal | None
    ) -> AsyncIterator[T]:
        """The faulty view of any stream whose items ``codec`` describes (an HTTP body's frames...)."""
        stream = items
        for item in self.fired:
            stream = transforms.apply(item.fault, item.label, stream, codec, signal, self._delayed)
        return self._track(stream, codec)

    def _delayed(self, seconds: float) -> None:
        self.delayed_s += seconds

    async def _track(self, stream: AsyncIterator[T], codec: transforms.Codec[T]) -> AsyncIterator[T]:
        try:
            async for item in stream:
                if codec.finishes(item):
                    # Served: a consumer may stop at the finish without reading on to the end.
                    self._outcome = "served"
                yield item
            self._outcome = "served"
        finally:
            if self._outcome != "served":
                self._outcome = "abandoned"
            await aclose_stream(stream)

    def __repr__(self) -> str:
        return f"ActiveFault({self.fault_id!r}, seed={self.seed}, call={self.call})"


# -- selection ---------------------------------------------------------------------------------


def _seed_of(fault: StreamFault) -> int:
    return fault.seed if isinstance(fault, Latency | Corrupt) else 0


def _leaf(fault: StreamFault, *, name: str | None = None, seed: int | None = None) -> FiredFault:
    return FiredFault(fault=fault, fault_id=name or fault_id(fault), seed=_seed_of(fault) if seed is None else seed)


class _Selector:
    """Per-plan state of one fault spec: decides, call by call, whether (and which) stream fault fires."""

    def __init__(self, fault: Fault | FailFirst | Always | Chaos) -> None:
        self.fault = fault
        self.seen = 0
        self._rng = random.Random(fault.seed) if isinstance(fault, Chaos) else None
        self._inner = _Selector(fault.fault) if isinstance(fault, Targeted) else None
        self._pattern = re.compile(fault.match) if isinstance(fault, Targeted) and fault.match is not None else None

    def draw(self, options: GenerateOptions, call: int) -> FiredFault | None:
        fault = self.fault
        self.seen += 1
        match fault:
            case FailFirst():
                if self.seen > fault.n:
                    return None
                return _leaf(fault.fault, name=fault.id)
            case Always():
                return _leaf(fault.fault, name=fault.id)
            case Chaos():
                assert self._rng is not None
                # Always draw twice, so call n's outcome depends only on the seed and n.
                roll = self._rng.random()
                pick = self._rng.randrange(len(fault.faults))
                if roll >= fault.rate:
                    return None
                return _leaf(fault.faults[pick], name=fault.id, seed=fault.seed)
            case Targeted():
                assert self._inner is not None
                if fault.calls is not None and call not in fault.calls:
                    return None
                if fault.model is not None and options.model != fault.model:
                    return None
                if self._pattern is not None and not self._pattern.search(_request_text(options)):
                    return None
                if fault.calls is not None and isinstance(fault.fault, STREAM_FAULT_TYPES):
                    fired: FiredFault | None = _leaf(fault.fault)  # each listed call is a target of its own
                else:
                    fired = self._inner.draw(options, call)
                if fired is not None and fault.id is not None:
                    return msgspec.structs.replace(fired, fault_id=fault.id)
                return fired
            case _:
                # The rule of ``chunktape.faults._specs``: transient once (the retry replays), permanent always.
                return _leaf(fault) if self.seen == 1 or not fault.transient else None


def _request_text(options: GenerateOptions) -> str:
    return "\n".join(message.text for message in options.messages if message.text)


class FaultPlan:
    """The faults of one adapter, with their per-call state (call counter, FailFirst counters, Chaos draws).

    Every spec sees every call (a ``Targeted`` one only the calls it selects) and fires per the transient/permanent
    rule of ``chunktape.faults._specs``; all that fire on a call apply.
    The same plan over the same calls always makes the same choices.
    """

    def __init__(self, faults: Iterable[Fault | str | Mapping[str, Any]] = ()) -> None:
        self.faults: tuple[Fault, ...] = tuple(parse_faults(faults))
        self.calls = 0
        """How many calls ``select`` has seen."""
        self._selectors = [_Selector(fault) for fault in self.faults]

    def __bool__(self) -> bool:
        return bool(self.faults)

    def stream_faults(self) -> Iterator[StreamFault]:
        """Every stream fault this plan can fire, nested ones included (for a layer to check it can apply them)."""
        for fault in self.faults:
            yield from _leaves(fault)

    def select(self, options: GenerateOptions) -> ActiveFault | None:
        """Count one ``stream()`` call and return the faults that fire on it, if any."""
        self.calls += 1
        fired = [item for selector in self._selectors if (item := selector.draw(options, self.calls)) is not None]
        return ActiveFault(fired, call=self.calls) if fired else None


def _leaves(fault: Fault) -> Iterator[StreamFault]:
    match fault:
        case FailFirst() | Always() | Targeted():
            yield from _leaves(fault.fault)
        case Chaos():
            yield from fault.faults
        case _:
            yield fault


class Reservation(Generic[R]):
    """The interaction one call holds: ``reserve()`` on entry, after an injected ``HttpError`` had its chance
    to fail the call (then nothing is held); ``release(held)`` on exit unless the fault consumed it.

    Build it with ``reservation``; enter it in the same task that streams the call, and leave it only once the
    faulty stream was closed (its end decides whether an abandoned ``Stall`` consumed the interaction).
    """

    __slots__ = ("_active", "_held", "_release", "_reserve")

    def __init__(self, active: ActiveFault | None, reserve: Callable[[], R], release: Callable[[R], None]) -> None:
        self._active = active
        self._reserve = reserve
        self._release = release

    def __enter__(self) -> R:
        if self._active is not None:
            # An injected HTTP error fails the call before matching: the provider never got that far.
            self._active.before_stream()
        self._held = self._reserve()
        return self._held

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._active is not None and not self._active.consumes_interaction:
            # An injected failure never uses up the recording: the retry replays it.
            self._release(self._held)


def reservation(active: ActiveFault | None, reserve: Callable[[], R], release: Callable[[R], None]) -> Reservation[R]:
    """``with reservation(active, reserve, release) as held:``: the one way a call holds a recorded interaction."""
    return Reservation(active, reserve, release)
