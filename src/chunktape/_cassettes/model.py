"""The cassette file format: what one recorded session holds, as msgspec Structs.

Field names follow the protocol's camelCase on the wire, so a ``.json`` cassette reads like the protocol's
documentation. New fields must get defaults (msgspec schema evolution); anything else bumps
``FORMAT_VERSION`` and adds a migration in ``codec.MIGRATIONS``.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Annotated, Any, TypeAlias

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import PROTOCOL, GenerateOptions, ReasoningOption, RequestFields, StreamChunk

__all__ = [
    "ERROR_STATUSES",
    "FORMAT_VERSION",
    "MAX_GAP_NS",
    "Cancelled",
    "Cassette",
    "CassetteMeta",
    "Completed",
    "Event",
    "Interaction",
    "Outcome",
    "Raised",
    "RecordedRequest",
    "ResponseMeta",
    "ToolRun",
    "request_fingerprint",
]

FORMAT_VERSION = 2
"""The cassette format this library writes; older files are migrated on load, newer ones refused.

Version 2 carries the Anthropic Messages and OpenAI Responses protocols: chunk types and fields a version-1 reader
does not know (``ProviderEvent``, server-tool blocks, signatures, citations, openings, cache writes, the provider's
own stop reason), so a file holding them says so, and an older chunktape refuses it as newer (``CASSETTE_VERSION``)
rather than as corrupt. Every version-1 file is a version-2 one as it is (``codec.MIGRATIONS[1]``)."""

MAX_GAP_NS = 3_600 * 10**9
"""The longest plausible wait in a recording: one hour. ``chunktape check`` flags an event or an end recorded
later than this after the call (a clock gone wrong, a hand edit), and a recorded-timing replay never sleeps
longer than this at once (it warns with ``SleepCappedWarning`` instead)."""


class _Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Immutable, keyword-only, camelCase on the wire, defaults omitted (small files, easy evolution)."""


class Event(_Wire, frozen=True, kw_only=True, gc=False):
    """One chunk and when it arrived, in nanoseconds since the ``stream()`` call (event-loop clock)."""

    t_ns: int
    chunk: StreamChunk


class Completed(_Wire, frozen=True, kw_only=True, tag_field="type", tag="completed"):
    """The stream ended normally ``t_ns`` after the call."""

    t_ns: int


ERROR_STATUSES = range(400, 600)
"""The HTTP statuses a ``Raised`` outcome may carry: an error answer (4xx/5xx), which a replay server can send."""

_ErrorStatus = Annotated[int, msgspec.Meta(ge=ERROR_STATUSES.start, le=ERROR_STATUSES.stop - 1)]


class Raised(_Wire, frozen=True, kw_only=True, tag_field="type", tag="raised"):
    """The stream raised an ``LlmError`` (or another exception, recorded as ``INVALID_RESPONSE``)."""

    t_ns: int
    code: str
    message: str
    status: _ErrorStatus | None = None
    """The HTTP error status (400-599), or None for an error that had none (a reset, a timeout...).

    Any other status is refused when built and when decoded (a file holding one is ``CASSETTE_CORRUPT``)."""
    retry_after: float | None = None
    exception_type: str | None = None
    """The original exception class when it was not an ``LlmError``."""

    def __post_init__(self) -> None:
        if self.status is not None and (type(self.status) is not int or self.status not in ERROR_STATUSES):
            raise LlmError(
                f"Raised.status must be an HTTP error status (400-599) or None, got {self.status!r}",
                ErrorCode.INVALID_CONFIG,
            )

    @classmethod
    def from_error(cls, error: LlmError, *, t_ns: int) -> Raised:
        """``error`` as recorded. A status that is not an HTTP error (a 3xx a client did not follow) is kept
        in the message only, so the cassette stays one a replay can serve."""
        status = error.status if error.status in ERROR_STATUSES else None
        message = error.message
        if error.status is not None and status is None and str(error.status) not in message:
            message = f"{message} (HTTP {error.status})"
        return cls(t_ns=t_ns, code=error.code.value, message=message, status=status, retry_after=error.retry_after)


class Cancelled(_Wire, frozen=True, kw_only=True, tag_field="type", tag="cancelled"):
    """The recording was cut short (consumer closed, task cancelled, abort signal, or a crash)."""

    t_ns: int
    reason: str | None = None


Outcome: TypeAlias = Completed | Raised | Cancelled


class RecordedRequest(RequestFields, frozen=True, kw_only=True):
    """A ``GenerateOptions`` without its runtime-only ``signal``, plus a ``fingerprint`` for matching."""

    fingerprint: str = ""
    """sha256 of the request's canonical JSON (keys sorted, fingerprint excluded)."""

    @classmethod
    def from_options(cls, options: RequestFields) -> RecordedRequest:
        """The request as recorded, from a ``GenerateOptions`` (or another recorded request)."""
        request = cls(**options.request_fields())
        return msgspec.structs.replace(request, fingerprint=request_fingerprint(request))

    def to_options(self) -> GenerateOptions:
        return GenerateOptions(**self.request_fields())


_canonical = msgspec.json.Encoder(order="sorted")


def request_fingerprint(request: RecordedRequest) -> str:
    """sha256 hex of the request's canonical JSON: sorted keys, without the fingerprint field itself."""
    canonical = msgspec.structs.replace(request, fingerprint="") if request.fingerprint else request
    try:
        encoded = _canonical.encode(canonical)
    except (TypeError, ValueError) as error:  # msgspec.EncodeError is a ValueError
        bad = [key for key, value in request.extra.items() if not _encodable(value)]
        where = f"extra field(s) {bad}" if bad else "a request field"
        raise LlmError(
            f"{where} cannot be recorded: {error}", ErrorCode.UNSUPPORTED_OPTION, hint="pass JSON-serialisable values"
        ) from None
    return hashlib.sha256(encoded).hexdigest()


def _encodable(value: object) -> bool:
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError):
        return False
    return True


class ResponseMeta(_Wire, frozen=True, kw_only=True):
    """What a provider's HTTP answer carried that the chunk protocol has no field for, kept so a replay over
    HTTP (``ReplayTransport``) answers as the provider did. Recorded by ``RecordingTransport``; None elsewhere."""

    id: str | None = None
    """The response id (``chatcmpl-...``)."""
    model: str | None = None
    """The model as answered (``gpt-4o-mini-2024-07-18``), not the requested name."""
    created: int | None = None
    system_fingerprint: str | None = None
    headers: dict[str, str] = {}
    """Selected response headers (request ids, ``openai-*``, rate limits); never credentials or cookies."""
    streamed: bool = True
    """False when the answer was one JSON ``chat.completion`` rather than an event stream."""
    finish_sent: bool = True
    """False when the stream carried no ``finish_reason`` (it ended with ``[DONE]`` alone)."""
    extras: dict[str, dict[str, Any]] = {}
    """Provider fields beyond the standard ones (``service_tier``, Groq's ``x_groq``...), by the event that
    carried them: ``first``, ``delta`` (the content events', sent again on every content event), ``finish``
    (Groq's ``x_groq.usage``), ``usage`` (the usage-only event), or ``completion`` for a JSON answer; and, under
    ``<place>.choice``, ``<place>.delta``, ``completion.message`` and ``<place>.usage``, the fields of its first
    choice, of its delta or message, and its usage object as sent (``chunktape._cassettes.response``)."""
    unkept: list[str] = []
    """Provider fields this recording could not keep (their value changed from event to event: per-token data),
    each as ``name (place)``: named, not dropped without a word."""


class Interaction(_Wire, frozen=True, kw_only=True):
    """One ``stream()`` call: the request, every chunk with its timing, and how the stream ended."""

    request: RecordedRequest
    events: list[Event]
    outcome: Outcome
    started_at: datetime | None = None
    """Wall-clock start (UTC), for humans; replay timing uses ``Event.t_ns`` only."""
    attempt: int = 1
    """1 for the first recorded call with this fingerprint, 2 for its first repeat (a retry), ..."""
    response: ResponseMeta | None = None
    """The provider's response metadata, when recorded at the HTTP layer (omitted otherwise)."""

    @property
    def chunks(self) -> list[StreamChunk]:
        return [event.chunk for event in self.events]


def _now() -> datetime:
    return datetime.now(UTC)


def _recorder() -> str:
    from chunktape._version import __version__

    return f"chunktape {__version__}"


class CassetteMeta(_Wire, frozen=True, kw_only=True):
    """Who recorded the cassette, when, against which adapter and protocol."""

    created_at: datetime = msgspec.field(default_factory=_now)
    recorder: str = msgspec.field(default_factory=_recorder)
    adapter: str = ""
    protocol: str = PROTOCOL
    tags: dict[str, str] = {}
    reasoning_options: list[ReasoningOption] = []
    """The recorded adapter's ``reasoning_options()``, so a replay offers the agent the same efforts."""


class ToolRun(_Wire, frozen=True, kw_only=True):
    """One tool execution of a recorded agent run, kept beside the model calls so a replay can answer it.

    ``content`` is exactly what the model received; ``result`` is the tool's value as JSON (the seed's
    ``{"error": true, "message": ...}`` when ``is_error``).
    """

    name: str
    arguments: dict[str, Any] = {}
    result: Any = None
    content: str = ""
    is_error: bool = False
    duration_ns: int = 0
    """How long the tool ran, on the event loop's clock (virtual under ``looptime``)."""
    call_id: str = ""
    """The model's id for the call it answered."""
    after_interaction: int = -1
    """The index of the interaction whose tool call it answered (-1: none recorded)."""


class Cassette(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A recorded session: a header and the interactions in the order their ``stream()`` calls began.

    Defaults are written out here (no ``omit_defaults``): ``version`` must be in every file.
    """

    version: int = FORMAT_VERSION
    meta: CassetteMeta = msgspec.field(default_factory=CassetteMeta)
    interactions: list[Interaction] = []
    tool_runs: list[ToolRun] = []
    """The tool executions of a recorded agent run, in the order they finished (empty: none recorded)."""
