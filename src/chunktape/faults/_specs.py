"""Declarative fault specs: what can go wrong with a provider call, as data.

Every fault is a frozen msgspec Struct tagged on ``type`` so it encodes into cassettes, pytest markers
and scenario files (``{"type": "http-error", "status": 429, "retry_after": 2.0}``). This module only
describes faults; ``chunktape.faults._plan`` chooses them per call and ``chunktape.faults._transforms``
applies them, to a chunk stream or (through ``chunktape.http._fault_transport``) to an HTTP body.

Stream faults act on one ``stream()`` call:

``HttpError``   the call fails with ``PROVIDER_HTTP_ERROR`` before any chunk
``StreamError`` after N chunks the provider reports an error inside the stream (``PROVIDER_HTTP_ERROR`` with
                its status): each protocol's own in-band form, Anthropic's ``error`` event (``overloaded_error``
                for 529), OpenAI Responses' ``response.failed``, a chat-completions ``error`` object
``Disconnect``  the stream breaks with ``STREAM_ABORTED`` after N chunks, after T seconds, or inside the
                first block of a type; a disconnect never lets the ``finish`` chunk through
``Stall``       the stream goes silent for S seconds before chunk N, then continues
``Latency``     extra delay before the first chunk and between chunks (seeded jitter)
``Truncate``    the stream ends silently after at most N chunks, never with usage or finish
``Corrupt``     the stream breaks one protocol rule (``CORRUPT_RULES`` says which), or, with
                ``kind="malformed-data"``, carries data a client cannot parse (``INVALID_RESPONSE``)

Which calls a fault hits follows one rule, the way real providers fail (this paragraph is where it is
written down; the README, ``chunktape demo``, the pytest fault matrix, ``play --fault`` and scenario files
all follow it):

- every stream fault is **transient** or **permanent** (``fault.transient``). Transient: a retry of the same
  request succeeds -- HTTP 408, 409, 429 and 5xx (an in-stream error of those statuses too), every disconnect,
  stall, latency, truncation and corrupt stream. Permanent: any other HTTP status (400, 401, 403, 404, 422...):
  the request fails however often it is sent.
- a bare transient fault fires **once**, on the first call it sees, and the retry replays the recording; a
  bare permanent fault fires on **every** call.
- ``Targeted(fault, calls=[...])`` fires on each call it lists; with only ``model=``/``match=`` it counts
  the calls it selects, and the rule above applies to them (a transient fault on the first of them).
- the wrappers override the rule: ``FailFirst(n, fault)`` the first n calls it sees (``FailFirst(1, f)``:
  once), ``Always(fault)`` every call it sees; ``Chaos(rate, faults, seed)`` draws anew for every call.

Every fault has a stable ``fault_id`` (its ``id`` field, or one derived from its fields) that failure
messages quote together with the seed. ``STANDARD_FAULTS`` is the ordered catalogue the pytest fault matrix
runs. Invalid specs raise ``LlmError(INVALID_CONFIG)`` naming the field: each field constraint is stated
once, in its type (``msgspec.Meta``), which msgspec checks on decode and ``_FaultBase`` on construction.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType, NoneType, UnionType
from typing import Annotated, Any, Literal, TypeAlias, Union, assert_never, cast, get_args, get_origin, get_type_hints

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import BlockType

__all__ = [
    "Always",
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
    "StreamError",
    "StreamFault",
    "Targeted",
    "Truncate",
    "fault_id",
    "is_transient",
    "parse_fault",
    "parse_faults",
]

ProtocolCorruptKind: TypeAlias = Literal[
    "unpaired-block",
    "bad-index",
    "interleaved",
    "bad-arguments-json",
    "finish-not-last",
    "usage-after-finish",
    "duplicate-finish",
]
CorruptKind: TypeAlias = ProtocolCorruptKind | Literal["malformed-data"]
"""The protocol kinds, plus ``malformed-data``: data a client cannot parse (before chunk 1-3, by ``seed``)."""
CORRUPT_KINDS: tuple[ProtocolCorruptKind, ...] = get_args(ProtocolCorruptKind)
"""The kinds that break a protocol rule (each has a ``CORRUPT_RULES`` entry and a ``STANDARD_FAULTS`` entry)."""
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
"""The ``StreamValidator`` rule each protocol kind breaks (the first violation a validator reports);
``malformed-data`` breaks no rule: a client cannot even parse it."""

InsideBlock: TypeAlias = BlockType

NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]
Status = Annotated[int, msgspec.Meta(ge=100, le=599)]
Rate = Annotated[float, msgspec.Meta(ge=0, le=1)]


def _invalid(cls: type, field: str, problem: str) -> LlmError:
    return LlmError(f"invalid fault spec: {cls.__name__}.{field} {problem}", ErrorCode.INVALID_CONFIG)


@functools.cache
def _field_types(cls: type[msgspec.Struct]) -> tuple[tuple[str, Any], ...]:
    hints = get_type_hints(cls, include_extras=True)
    return tuple((name, hints[name]) for name in cls.__struct_fields__)


def _literal_values(annotation: Any) -> tuple[str, ...]:
    """The values of a ``Literal`` field (optional or not), or () for any other type."""
    if get_origin(annotation) in (Union, UnionType):
        return tuple(value for arg in get_args(annotation) if arg is not NoneType for value in _literal_values(arg))
    return get_args(annotation) if get_origin(annotation) is Literal else ()


def _check_field(cls: type[msgspec.Struct], name: str, annotation: Any, value: Any) -> None:
    """Check one field against its declared type and ``Meta`` constraints, with msgspec itself."""
    try:
        msgspec.convert(value, annotation)
    except msgspec.ValidationError as exc:
        values = _literal_values(annotation)
        if values:
            raise _invalid(cls, name, f"{value!r} is unknown; valid {name}s: {', '.join(values)}") from None
        problem, _, at = str(exc).partition(" - at `$")
        raise _invalid(cls, name + at.rstrip("`"), f"{problem[:1].lower()}{problem[1:]}, got {value!r}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise _invalid(cls, name, f"must be a finite number, got {value!r}")


class _FaultBase(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True, forbid_unknown_fields=True
):
    """Common config; ``id`` names the fault in failure messages and test ids (derived when omitted)."""

    id: str | None = None

    def __post_init__(self) -> None:
        # msgspec enforces the Meta constraints only when decoding; a fault built in Python is checked here.
        cls = type(self)
        for name, annotation in _field_types(cls):
            _check_field(cls, name, annotation, getattr(self, name))

    @property
    def fault_id(self) -> str:
        return fault_id(cast("Fault", self))

    @property
    def transient(self) -> bool:
        """Whether a retry of the same request succeeds (the fault fires once) rather than failing again."""
        return is_transient(cast("Fault", self))


class HttpError(_FaultBase, frozen=True, tag="http-error"):
    """The call raises ``PROVIDER_HTTP_ERROR`` with this status (and Retry-After, in seconds) before any chunk."""

    status: Status
    retry_after: NonNegFloat | None = None
    message: str | None = None


class StreamError(_FaultBase, frozen=True, tag="stream-error"):
    """After ``after_chunks`` chunks the provider reports an error inside the stream, which ends there: the call
    raises ``PROVIDER_HTTP_ERROR`` with this status (Anthropic's 529 ``overloaded_error``, a 500 ``server_error``).

    Over HTTP it is the answer's own in-band error (Anthropic's ``error`` event, OpenAI Responses'
    ``response.failed``, a chat-completions ``error`` object) after a 200; like a disconnect it never lets the
    ``finish`` chunk through: a shorter stream reports it just before its finish.
    """

    after_chunks: NonNegInt = 1
    status: Status = 500
    retry_after: NonNegFloat | None = None
    message: str | None = None


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
        super().__post_init__()
        names = ("after_chunks", "after_s", "inside", "after_bytes")
        given = [name for name in names if getattr(self, name) is not None]
        if len(given) != 1:
            raise _invalid(Disconnect, "after_chunks", f"exactly one of {', '.join(names)} must be set, got {given}")


class Stall(_FaultBase, frozen=True, tag="stall"):
    """Before chunk ``after_chunks`` (0 = before the first), the stream goes silent for ``seconds``, then goes on.

    A stream with fewer chunks stalls before it ends, so the silence always happens.
    """

    after_chunks: NonNegInt
    seconds: NonNegFloat


class Latency(_FaultBase, frozen=True, tag="latency"):
    """Extra delay before the first chunk and before each later one, plus uniform jitter drawn from ``seed``."""

    first_chunk_s: NonNegFloat = 0.0
    between_s: NonNegFloat = 0.0
    jitter_s: NonNegFloat = 0.0
    seed: int = 0


class Truncate(_FaultBase, frozen=True, tag="truncate"):
    """The stream ends silently after at most ``after_chunks`` chunks, and never yields usage or finish."""

    after_chunks: NonNegInt


class Corrupt(_FaultBase, frozen=True, tag="corrupt"):
    """The stream breaks the protocol rule ``CORRUPT_RULES[kind]``; ``seed`` picks among equivalent variants."""

    kind: CorruptKind
    seed: int = 0


StreamFault: TypeAlias = HttpError | StreamError | Disconnect | Stall | Latency | Truncate | Corrupt
"""A fault that acts on one stream."""

STREAM_FAULT_TYPES = (HttpError, StreamError, Disconnect, Stall, Latency, Truncate, Corrupt)
"""The classes of ``StreamFault``, for ``isinstance``."""


class FailFirst(_FaultBase, frozen=True, tag="fail-first"):
    """The first ``n`` calls this selector sees get ``fault``; later calls are served untouched."""

    n: NonNegInt
    fault: StreamFault


class Always(_FaultBase, frozen=True, tag="always"):
    """``fault`` on every call this selector sees, transient or not: a provider that keeps failing."""

    fault: StreamFault


class Chaos(_FaultBase, frozen=True, tag="chaos"):
    """Each call gets one of ``faults`` with probability ``rate``, drawn reproducibly from ``seed``."""

    rate: Rate
    faults: Annotated[list[StreamFault], msgspec.Meta(min_length=1)]
    seed: int = 0


class Targeted(_FaultBase, frozen=True, tag="targeted"):
    """Applies ``fault`` only to selected calls: all of the given selectors must match.

    ``calls`` are 1-based numbers counted over every ``stream()`` call of the adapter; ``model`` must equal
    the request's model; ``match`` is a regular expression searched in the text of the request's messages.
    A nested ``FailFirst``/``Chaos`` counts only the calls that pass the selectors.
    """

    fault: StreamFault | FailFirst | Always | Chaos
    calls: list[PositiveInt] | None = None
    model: str | None = None
    match: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.calls is None and self.model is None and self.match is None:
            raise _invalid(Targeted, "calls", "give at least one selector: calls, model or match")
        if self.match is not None:
            try:
                re.compile(self.match)
            except re.error as exc:
                raise _invalid(Targeted, "match", f"is not a valid regular expression ({exc})") from None


Fault: TypeAlias = (
    HttpError | StreamError | Disconnect | Stall | Latency | Truncate | Corrupt | FailFirst | Always | Chaos | Targeted
)
"""Any fault spec, as accepted by ``ReplayAdapter(faults=...)``, markers and scenario files."""

_FAULT_TYPES = (*STREAM_FAULT_TYPES, FailFirst, Always, Chaos, Targeted)

_TRANSIENT_STATUSES = frozenset({408, 409, 429})


def is_transient(fault: Fault) -> bool:
    """The transient/permanent rule of the module docstring: HTTP 408, 409, 429 and 5xx and every other stream
    fault are transient; ``Always`` is permanent, ``FailFirst`` transient, the others as the faults they hold."""
    match fault:
        case HttpError() | StreamError():
            return fault.status in _TRANSIENT_STATUSES or fault.status >= 500
        case Disconnect() | Stall() | Latency() | Truncate() | Corrupt():
            return True
        case FailFirst():
            return True
        case Always():
            return False
        case Chaos():
            return all(is_transient(inner) for inner in fault.faults)
        case Targeted():
            return is_transient(fault.fault)
    assert_never(fault)


def _num(value: float) -> str:
    return f"{value:g}"


def fault_id(fault: Fault) -> str:
    """The stable id of a fault: its ``id`` field, or one derived from its fields (``http-503``)."""
    if fault.id is not None:
        return fault.id
    match fault:
        case HttpError():
            return f"http-{fault.status}"
        case StreamError():
            return f"stream-error-{fault.status}-after-{fault.after_chunks}-chunks"
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
        case Always():
            return f"always-{fault_id(fault.fault)}"
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
        # What Anthropic's API does when it is overloaded: a 529, or an overloaded_error event mid-stream.
        HttpError(id="http-529", status=529, message="overloaded"),
        StreamError(id="error-mid-stream", after_chunks=1, status=529, message="overloaded"),
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
