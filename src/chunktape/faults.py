"""Declarative fault specs: what can go wrong with a provider call, as data.

Every fault is a frozen msgspec Struct tagged on ``type`` so it encodes into cassettes, pytest markers
and scenario files (``{"type": "http-error", "status": 429, "retry_after": 2.0}``). This module only
describes faults; ``chunktape.replayer.injection`` applies them to a chunk stream and
``chunktape.http.transport`` to HTTP traffic.

Stream faults act on one ``stream()`` call:

``HttpError``   the call fails with ``PROVIDER_HTTP_ERROR`` before any chunk
``Disconnect``  the stream breaks with ``STREAM_ABORTED`` after N chunks, after T seconds, or inside the
                first block of a type; a disconnect never lets the ``finish`` chunk through
``Stall``       the stream goes silent for S seconds before chunk N, then continues
``Latency``     extra delay before the first chunk and between chunks (seeded jitter)
``Truncate``    the stream ends silently after at most N chunks, never with usage or finish
``Corrupt``     the stream breaks one protocol rule (``CORRUPT_RULES`` says which)

Selectors decide which calls a fault hits: a bare fault hits every call; ``FailFirst(n, fault)`` the first
n calls it sees; ``Chaos(rate, faults, seed)`` a reproducible random draw per call; ``Targeted(fault,
calls=..., model=..., match=...)`` only calls selected by number or by request.

Every fault has a stable ``fault_id`` (its ``id`` field, or one derived from its fields) that failure
messages quote together with the seed. ``STANDARD_FAULTS`` is the ordered catalogue the pytest fault matrix
runs. Invalid specs raise ``LlmError(INVALID_CONFIG)`` naming the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeAlias, assert_never, cast, get_args

import msgspec

from chunktape.errors import ErrorCode, LlmError
from chunktape.protocol import BlockType

__all__ = [
    "CORRUPT_KINDS",
    "CORRUPT_RULES",
    "Chaos",
    "Corrupt",
    "CorruptKind",
    "Disconnect",
    "FailFirst",
    "Fault",
    "HttpError",
    "Latency",
    "STANDARD_FAULTS",
    "Stall",
    "StreamFault",
    "Targeted",
    "Truncate",
    "fault_id",
    "parse_fault",
    "parse_faults",
]

CorruptKind: TypeAlias = Literal[
    "unpaired-block",
    "bad-index",
    "interleaved",
    "bad-arguments-json",
    "finish-not-last",
    "usage-after-finish",
    "duplicate-finish",
]
CORRUPT_KINDS: tuple[CorruptKind, ...] = get_args(CorruptKind)
CORRUPT_RULES: Mapping[CorruptKind, str] = MappingProxyType(
    {
        "unpaired-block": "block-pairs",
        "bad-index": "index-order",
        "interleaved": "index-order",
        "bad-arguments-json": "arguments-delta",
        "finish-not-last": "finish-last",
        "usage-after-finish": "usage-before-finish",
        "duplicate-finish": "finish-last",
    }
)
"""The ``StreamValidator`` rule each corruption kind breaks (the first violation a validator reports)."""

InsideBlock: TypeAlias = BlockType

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
Status = Annotated[int, msgspec.Meta(ge=100, le=599)]
Rate = Annotated[float, msgspec.Meta(ge=0, le=1)]


def _invalid(cls: type, field: str, problem: str) -> LlmError:
    return LlmError(f"invalid fault spec: {cls.__name__}.{field} {problem}", ErrorCode.INVALID_CONFIG)


class _FaultBase(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True, forbid_unknown_fields=True
):
    """Common config; ``id`` names the fault in failure messages and test ids (derived when omitted)."""

    id: str | None = None

    @property
    def fault_id(self) -> str:
        return fault_id(cast("Fault", self))

    def _check_count(self, field: str, value: int | None, minimum: int = 0) -> None:
        if value is not None and (type(value) is not int or value < minimum):
            raise _invalid(type(self), field, f"must be an integer >= {minimum}, got {value!r}")

    def _check_seconds(self, field: str, value: float | None) -> None:
        if value is not None and (
            not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0
        ):
            raise _invalid(type(self), field, f"must be a finite number of seconds >= 0, got {value!r}")


class HttpError(_FaultBase, frozen=True, tag="http-error"):
    """The call raises ``PROVIDER_HTTP_ERROR`` with this status (and Retry-After, in seconds) before any chunk."""

    status: Status
    retry_after: NonNegFloat | None = None
    message: str | None = None

    def __post_init__(self) -> None:
        if type(self.status) is not int or not 100 <= self.status <= 599:
            raise _invalid(HttpError, "status", f"must be an HTTP status between 100 and 599, got {self.status!r}")
        self._check_seconds("retry_after", self.retry_after)


class Disconnect(_FaultBase, frozen=True, tag="disconnect"):
    """The stream breaks with ``STREAM_ABORTED``: after N chunks, after T seconds of loop time (counted from
    the first read of the stream), right after the first delta of the first block of type ``inside``, or after
    N bytes (exactly one of the four).

    ``after_bytes`` counts the HTTP body in ``FaultTransport``, where the connection breaks after exactly that
    many bytes, mid-event; on a chunk stream (``ReplayAdapter``, the replay server), where a chunk cannot be
    split, it counts the UTF-8 bytes of streamed content (text, reasoning, tool-call arguments) and breaks
    once that many were delivered.

    A disconnect always breaks the stream: if the stream would finish earlier (fewer chunks, no such block,
    or done before T), it breaks just before the ``finish`` chunk instead.
    """

    after_chunks: NonNegInt | None = None
    after_s: NonNegFloat | None = None
    inside: InsideBlock | None = None
    after_bytes: NonNegInt | None = None

    def __post_init__(self) -> None:
        names = ("after_chunks", "after_s", "inside", "after_bytes")
        given = [name for name in names if getattr(self, name) is not None]
        if len(given) != 1:
            raise _invalid(Disconnect, "after_chunks", f"exactly one of {', '.join(names)} must be set, got {given}")
        self._check_count("after_chunks", self.after_chunks)
        self._check_count("after_bytes", self.after_bytes)
        self._check_seconds("after_s", self.after_s)
        if self.inside is not None and self.inside not in get_args(BlockType):
            raise _invalid(Disconnect, "inside", f"must be one of text, tool-call, reasoning, got {self.inside!r}")


class Stall(_FaultBase, frozen=True, tag="stall"):
    """Before chunk ``after_chunks`` (0 = before the first), the stream goes silent for ``seconds``, then goes on.

    A stream with fewer chunks stalls before it ends, so the silence always happens.
    """

    after_chunks: NonNegInt
    seconds: NonNegFloat

    def __post_init__(self) -> None:
        self._check_count("after_chunks", self.after_chunks)
        self._check_seconds("seconds", self.seconds)


class Latency(_FaultBase, frozen=True, tag="latency"):
    """Extra delay before the first chunk and before each later one, plus uniform jitter drawn from ``seed``."""

    first_chunk_s: NonNegFloat = 0.0
    between_s: NonNegFloat = 0.0
    jitter_s: NonNegFloat = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("first_chunk_s", "between_s", "jitter_s"):
            self._check_seconds(name, getattr(self, name))


class Truncate(_FaultBase, frozen=True, tag="truncate"):
    """The stream ends silently after at most ``after_chunks`` chunks, and never yields usage or finish."""

    after_chunks: NonNegInt

    def __post_init__(self) -> None:
        self._check_count("after_chunks", self.after_chunks)


class Corrupt(_FaultBase, frozen=True, tag="corrupt"):
    """The stream breaks the protocol rule ``CORRUPT_RULES[kind]``; ``seed`` picks among equivalent variants."""

    kind: CorruptKind
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in CORRUPT_KINDS:
            raise _invalid(Corrupt, "kind", f"unknown kind {self.kind!r}; valid kinds: {', '.join(CORRUPT_KINDS)}")


StreamFault: TypeAlias = HttpError | Disconnect | Stall | Latency | Truncate | Corrupt
"""A fault that acts on one stream."""

_STREAM_FAULT_TYPES = (HttpError, Disconnect, Stall, Latency, Truncate, Corrupt)


class FailFirst(_FaultBase, frozen=True, tag="fail-first"):
    """The first ``n`` calls this selector sees get ``fault``; later calls are served untouched."""

    n: NonNegInt
    fault: StreamFault

    def __post_init__(self) -> None:
        self._check_count("n", self.n)
        if not isinstance(self.fault, _STREAM_FAULT_TYPES):
            raise _invalid(FailFirst, "fault", f"must be a stream fault, got {type(self.fault).__name__}")


class Chaos(_FaultBase, frozen=True, tag="chaos"):
    """Each call gets one of ``faults`` with probability ``rate``, drawn reproducibly from ``seed``."""

    rate: Rate
    faults: list[StreamFault]
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not isinstance(self.rate, int | float) or not 0 <= self.rate <= 1:
            raise _invalid(Chaos, "rate", f"must be a probability in [0, 1], got {self.rate!r}")
        if not self.faults:
            raise _invalid(Chaos, "faults", "must list at least one fault")
        for position, fault in enumerate(self.faults):
            if not isinstance(fault, _STREAM_FAULT_TYPES):
                raise _invalid(Chaos, f"faults[{position}]", f"must be a stream fault, got {type(fault).__name__}")


class Targeted(_FaultBase, frozen=True, tag="targeted"):
    """Applies ``fault`` only to selected calls: all of the given selectors must match.

    ``calls`` are 1-based numbers counted over every ``stream()`` call of the adapter; ``model`` must equal
    the request's model; ``match`` is a regular expression searched in the text of the request's messages.
    A nested ``FailFirst``/``Chaos`` counts only the calls that pass the selectors.
    """

    fault: StreamFault | FailFirst | Chaos
    calls: list[PositiveInt] | None = None
    model: str | None = None
    match: str | None = None

    def __post_init__(self) -> None:
        if self.calls is None and self.model is None and self.match is None:
            raise _invalid(Targeted, "calls", "give at least one selector: calls, model or match")
        if self.calls is not None:
            for position, number in enumerate(self.calls):
                if type(number) is not int or number < 1:
                    raise _invalid(Targeted, f"calls[{position}]", f"must be a call number >= 1, got {number!r}")
        if self.match is not None:
            try:
                re.compile(self.match)
            except re.error as exc:
                raise _invalid(Targeted, "match", f"is not a valid regular expression ({exc})") from None
        if not isinstance(self.fault, (*_STREAM_FAULT_TYPES, FailFirst, Chaos)):
            raise _invalid(Targeted, "fault", f"must be a stream fault, FailFirst or Chaos, got {type(self.fault)}")


Fault: TypeAlias = HttpError | Disconnect | Stall | Latency | Truncate | Corrupt | FailFirst | Chaos | Targeted
"""Any fault spec, as accepted by ``ReplayAdapter(faults=...)``, markers and scenario files."""

_FAULT_TYPES = (*_STREAM_FAULT_TYPES, FailFirst, Chaos, Targeted)


def _num(value: float) -> str:
    return f"{value:g}"


def fault_id(fault: Fault) -> str:
    """The stable id of a fault: its ``id`` field, or one derived from its fields (``http-503``)."""
    if fault.id is not None:
        return fault.id
    match fault:
        case HttpError():
            return f"http-{fault.status}"
        case Disconnect():
            if fault.inside is not None:
                return f"disconnect-mid-{fault.inside}"
            if fault.after_s is not None:
                return f"disconnect-after-{_num(fault.after_s)}s"
            if fault.after_bytes is not None:
                return f"disconnect-after-{fault.after_bytes}-bytes"
            if fault.after_chunks == 0:
                return "disconnect-before-first-chunk"
            return f"disconnect-after-{fault.after_chunks}-chunks"
        case Stall():
            return f"stall-{_num(fault.seconds)}s-after-{fault.after_chunks}-chunks"
        case Latency():
            return f"latency-{_num(fault.first_chunk_s)}s-{_num(fault.between_s)}s"
        case Truncate():
            return f"truncate-after-{fault.after_chunks}-chunks"
        case Corrupt():
            return f"corrupt-{fault.kind}"
        case FailFirst():
            return f"fail-first-{fault.n}-{fault_id(fault.fault)}"
        case Chaos():
            return f"chaos-{_num(fault.rate)}"
        case Targeted():
            return f"targeted-{fault_id(fault.fault)}"
    assert_never(fault)


def _standard() -> dict[str, StreamFault]:
    faults: list[StreamFault] = [
        HttpError(id="http-429", status=429, retry_after=2.0, message="rate limit exceeded"),
        HttpError(id="http-500", status=500, message="internal server error"),
        HttpError(id="http-503", status=503, message="service unavailable"),
        HttpError(id="http-401", status=401, message="invalid API key"),
        HttpError(id="http-400", status=400, message="invalid request"),
        Disconnect(id="disconnect-before-first-chunk", after_chunks=0),
        Disconnect(id="disconnect-after-first-chunk", after_chunks=1),
        Disconnect(id="disconnect-mid-text", inside="text"),
        Disconnect(id="disconnect-mid-tool-call", inside="tool-call"),
        Stall(id="stall-30s", after_chunks=1, seconds=30.0),
        Truncate(id="truncate", after_chunks=3),
        *(Corrupt(id=f"corrupt-{kind}", kind=kind) for kind in CORRUPT_KINDS),
    ]
    return {fault_id(fault): fault for fault in faults}


STANDARD_FAULTS: Mapping[str, StreamFault] = MappingProxyType(_standard())
"""The standard fault catalogue, in order, by id: what the pytest fault matrix runs (``[http-429]``...)."""


def parse_fault(value: Fault | str | Mapping[str, Any]) -> Fault:
    """A fault from a Struct, a ``STANDARD_FAULTS`` id, or a dict as written in a scenario file or marker."""
    if isinstance(value, _FAULT_TYPES):
        return value
    if isinstance(value, str):
        try:
            return STANDARD_FAULTS[value]
        except KeyError:
            raise LlmError(
                f"unknown standard fault {value!r}; valid ids: {', '.join(STANDARD_FAULTS)}", ErrorCode.INVALID_CONFIG
            ) from None
    if isinstance(value, Mapping):
        try:
            fault: Fault = msgspec.convert(value, Fault)
            return fault
        except msgspec.ValidationError as exc:
            text = str(exc)
            if "`$.type`" in text:
                valid = ", ".join(sorted(str(cls.__struct_config__.tag) for cls in _FAULT_TYPES))
                text += f" (valid fault types: {valid})"
            raise LlmError(f"invalid fault spec: {text}", ErrorCode.INVALID_CONFIG) from None
    raise LlmError(
        f"invalid fault spec: expected a fault, a standard fault id or a mapping, got {type(value).__name__}",
        ErrorCode.INVALID_CONFIG,
    )


def parse_faults(values: Iterable[Fault | str | Mapping[str, Any]] | Fault | str | Mapping[str, Any]) -> list[Fault]:
    """``parse_fault`` over a sequence; an error names the position (``faults[2]``).

    A single fault (a Struct, a catalogue id, or one mapping) is taken as a list of one, never iterated.
    """
    if isinstance(values, str | Mapping | _FaultBase):
        values = [values]
    if not isinstance(values, Iterable):
        raise LlmError(
            f"faults must be a list of faults, catalogue ids or mappings, got {type(values).__name__}",
            ErrorCode.INVALID_CONFIG,
        )
    faults: list[Fault] = []
    for position, value in enumerate(values):
        try:
            faults.append(parse_fault(value))
        except LlmError as exc:
            raise LlmError(f"faults[{position}]: {exc.message}", ErrorCode.INVALID_CONFIG) from None
    return faults
