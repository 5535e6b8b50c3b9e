"""``ReplayOptions``: the one replay configuration every face takes (adapter, session, server, transports, plugin).

It is validated once, when it is built (an unknown name or a bad value is ``INVALID_CONFIG`` listing the valid
ones), and handed on as is. A face that takes the settings as keywords (``ReplayAdapter(cassette, timing=...)``)
types them with ``ReplayKeywords`` and builds the options with ``ReplayOptions.of(options, **keywords)``. This
module sits below the replayer, beside the fault specs and the matchers it parses with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict, Unpack, cast

from chunktape._cassettes.matching import DEFAULT_MATCH, Matcher, MatchOn, parse_match_on
from chunktape._errors import ErrorCode, LlmError
from chunktape._replayer.timing import Timing
from chunktape.faults import Fault, parse_faults

__all__ = ["ReplayKeywords", "ReplayOptions"]


class ReplayKeywords(TypedDict, total=False):
    """The replay settings as keywords, in the forms a caller may write them (``ReplayOptions`` normalises them)."""

    timing: Timing
    faults: Iterable[Fault | str | Mapping[str, Any]] | Fault | str
    match_on: MatchOn
    allow_repeats: bool
    redact: bool | Sequence[str]
    allow_secrets: Sequence[str]


_INSTANT = Timing.instant()


@dataclasses.dataclass(frozen=True, init=False, slots=True)
class ReplayOptions:
    """How a cassette is replayed: frozen, compared by value, hashable when its faults are (``Chaos`` and
    ``Targeted`` hold lists). Build it with keywords (``ReplayOptions(timing=Timing.recorded(), faults=["http-429"])``);
    the fault plan's per-call state (``FailFirst`` counters, ``Chaos`` draws) belongs to each adapter, not here."""

    timing: Timing
    """When chunks are released: ``Timing.instant()`` (the default), ``recorded(speed)`` or ``fixed(...)``."""
    faults: tuple[Fault, ...]
    """The faults injected at replay time, parsed (fault Structs, standard ids or mappings are accepted)."""
    match_on: tuple[str | Matcher, ...]
    """The matchers a request must pass, by name or callable (a ``"model,messages"`` string is accepted)."""
    allow_repeats: bool
    """Whether a played interaction may answer again (else a further identical call is ``CASSETTE_EXHAUSTED``)."""
    redact: bool | tuple[str, ...]
    """Redact live requests like the recorder did (True: declared and environment credentials; a sequence adds
    literals; False: none), so that a request recorded with a credential in it still matches."""
    allow_secrets: tuple[str, ...]
    """Values that stay as they are although they look like credentials."""

    def __init__(self, **settings: Unpack[ReplayKeywords]) -> None:
        unknown = sorted(set(settings) - set(_NAMES))
        if unknown:
            raise LlmError(
                f"unknown replay option(s) {', '.join(unknown)}; valid: {', '.join(_NAMES)}", ErrorCode.INVALID_CONFIG
            )
        timing = settings.get("timing", _INSTANT)
        if not isinstance(timing, Timing):
            raise LlmError(
                f"timing must be a Timing (Timing.instant(), Timing.recorded(speed), Timing.fixed(first_chunk_s, "
                f"between_s)), got {timing!r}",
                ErrorCode.INVALID_CONFIG,
            )
        allow_repeats = settings.get("allow_repeats", False)
        if not isinstance(allow_repeats, bool):
            raise LlmError(f"allow_repeats must be True or False, got {allow_repeats!r}", ErrorCode.INVALID_CONFIG)
        redact = settings.get("redact", True)
        if not isinstance(redact, bool):
            redact = _strings("redact", redact)
        init = object.__setattr__  # frozen: the fields are set once, here
        init(self, "timing", timing)
        init(self, "faults", tuple(parse_faults(settings.get("faults", ()))))
        init(self, "match_on", parse_match_on(settings.get("match_on", DEFAULT_MATCH)))
        init(self, "allow_repeats", allow_repeats)
        init(self, "redact", redact)
        init(self, "allow_secrets", _strings("allow_secrets", settings.get("allow_secrets", ())))

    @classmethod
    def of(cls, options: ReplayOptions | None = None, /, **changes: Unpack[ReplayKeywords]) -> ReplayOptions:
        """``options`` (default: the defaults) with ``changes`` applied: what a face does with its
        ``replay_options=`` and its keywords. Without changes, ``options`` itself (nothing is validated twice)."""
        if options is None:
            return cls(**changes)
        if not changes:
            return options
        merged: ReplayKeywords = {**options.keywords(), **changes}
        return cls(**merged)

    def keywords(self) -> ReplayKeywords:
        """These options as the keywords that build them again."""
        return cast("ReplayKeywords", {name: getattr(self, name) for name in _NAMES})


_NAMES = tuple(field.name for field in dataclasses.fields(ReplayOptions))


def _strings(name: str, values: object) -> tuple[str, ...]:
    items = tuple(values) if isinstance(values, Iterable) and not isinstance(values, str) else None
    if items is None or not all(isinstance(item, str) for item in items):
        raise LlmError(f"{name}= takes a list of str, got {values!r}", ErrorCode.INVALID_CONFIG)
    return items
