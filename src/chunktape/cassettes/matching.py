"""Deciding which recorded interaction answers a request, and explaining it when none does.

A matcher is any ``(live, recorded) -> bool`` over two ``RecordedRequest``; built-in ones are referred to by
name. The ``CASSETTE_MISMATCH`` error shows the closest recorded request and a field-by-field diff, like
vcrpy's best error message, with credentials masked: it ends up in CI logs and the replay server's error body.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import msgspec

from chunktape.cassettes.model import RecordedRequest
from chunktape.errors import ErrorCode, LlmError
from chunktape.secrets import redact_text

__all__ = ["DEFAULT_MATCH", "MATCHERS", "MatchOn", "Matcher", "RequestMatcher", "diff_requests"]

Matcher: TypeAlias = Callable[[RecordedRequest, RecordedRequest], bool]
"""``matcher(live, recorded)`` is true when ``recorded`` may answer ``live``."""

MatchOn: TypeAlias = str | Matcher | Sequence[str | Matcher]


def _params(live: RecordedRequest, recorded: RecordedRequest) -> bool:
    return (
        live.max_tokens == recorded.max_tokens
        and live.temperature == recorded.temperature
        and live.reasoning == recorded.reasoning
        and live.extra == recorded.extra
    )


def _field(name: str) -> Matcher:
    def match(live: RecordedRequest, recorded: RecordedRequest) -> bool:
        return bool(getattr(live, name) == getattr(recorded, name))

    match.__name__ = name
    return match


MATCHERS: dict[str, Matcher] = {
    "model": _field("model"),
    "messages": _field("messages"),
    "tools": _field("tools"),
    "max_tokens": _field("max_tokens"),
    "temperature": _field("temperature"),
    "reasoning": _field("reasoning"),
    "extra": _field("extra"),
    "params": _params,
    "last_message": lambda live, recorded: live.messages[-1:] == recorded.messages[-1:],
    "fingerprint": _field("fingerprint"),
}
"""Matchers by name; ``params`` is the generation parameters: max_tokens, temperature, reasoning, extra."""

DEFAULT_MATCH: tuple[str, ...] = ("model", "messages", "tools", "params")
_ADVICE = "re-record with --tape-mode new_episodes, or relax match_on"


class RequestMatcher:
    """``match_on`` resolved once into named predicates; callable as ``matcher(live, recorded)``."""

    __slots__ = ("_checks", "_fast")

    def __init__(self, match_on: MatchOn = DEFAULT_MATCH) -> None:
        items: Sequence[str | Matcher] = [match_on] if isinstance(match_on, str) or callable(match_on) else match_on
        checks: list[tuple[str, Matcher]] = []
        for item in items:
            if isinstance(item, str):
                if item not in MATCHERS:
                    valid = ", ".join(sorted(MATCHERS))
                    raise LlmError(f"unknown matcher {item!r}; valid matchers: {valid}", ErrorCode.INVALID_CONFIG)
                checks.append((item, MATCHERS[item]))
            elif callable(item):
                checks.append((getattr(item, "__name__", repr(item)), item))
            else:
                raise LlmError(f"a matcher must be a name or a callable, got {item!r}", ErrorCode.INVALID_CONFIG)
        self._checks = tuple(checks)
        # The default set covers every request field: compare whole requests minus the fingerprint at once.
        self._fast = tuple(name for name, _ in checks) == DEFAULT_MATCH

    def __call__(self, live: RecordedRequest, recorded: RecordedRequest) -> bool:
        if self._fast:
            return (
                live.model == recorded.model
                and live.messages == recorded.messages
                and live.tools == recorded.tools
                and _params(live, recorded)
            )
        return all(check(live, recorded) for _, check in self._checks)

    def failing(self, live: RecordedRequest, recorded: RecordedRequest) -> list[str]:
        """The names of the matchers that reject ``recorded`` for ``live``."""
        return [name for name, check in self._checks if not check(live, recorded)]

    def mismatch(self, live: RecordedRequest, recorded: Sequence[RecordedRequest], where: str) -> LlmError:
        """The ``CASSETTE_MISMATCH`` error for ``live``: the closest recorded request and a readable diff."""
        summary = f"model={live.model!r}, {len(live.messages)} message(s)"
        if not recorded:
            return LlmError(
                redact_text(f"no recorded interaction matches the request ({summary}): {where} holds no interactions"),
                ErrorCode.CASSETTE_MISMATCH,
            )
        scored = []
        for index, candidate in enumerate(recorded):
            diff = diff_requests(candidate, live)
            scored.append((len(self.failing(live, candidate)), len(diff), index, diff))
        _, _, index, diff = min(scored, key=lambda item: item[:3])
        failing = ", ".join(self.failing(live, recorded[index])) or "none"
        lines = "\n".join(f"    {line}" for line in diff[:12])
        more = f"\n    ... and {len(diff) - 12} more difference(s)" if len(diff) > 12 else ""
        return LlmError(
            redact_text(
                f"no recorded interaction in {where} matches the request ({summary}); {_ADVICE}. "
                f"Closest is interaction #{index} (failing matchers: {failing}), recorded vs requested:\n{lines}{more}"
            ),
            ErrorCode.CASSETTE_MISMATCH,
            hint="",  # the advice is in the message, before the diff
        )


def diff_requests(recorded: RecordedRequest, live: RecordedRequest) -> list[str]:
    """Readable differences ``path: recorded X, requested Y`` between two requests (fingerprints ignored)."""
    old = msgspec.to_builtins(msgspec.structs.replace(recorded, fingerprint=""))
    new = msgspec.to_builtins(msgspec.structs.replace(live, fingerprint=""))
    lines: list[str] = []
    _diff(old, new, "", lines)
    return lines


def _diff(old: Any, new: Any, path: str, out: list[str]) -> None:
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted({*old, *new}, key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(f"{where}: recorded {_short(old[key])}, requested (absent)")
            elif key not in old:
                out.append(f"{where}: recorded (absent), requested {_short(new[key])}")
            else:
                _diff(old[key], new[key], where, out)
        return
    if isinstance(old, list) and isinstance(new, list):
        for position in range(max(len(old), len(new))):
            where = f"{path}[{position}]"
            if position >= len(new):
                out.append(f"{where}: recorded {_short(old[position])}, requested (absent)")
            elif position >= len(old):
                out.append(f"{where}: recorded (absent), requested {_short(new[position])}")
            else:
                _diff(old[position], new[position], where, out)
        return
    out.append(f"{path or 'request'}: recorded {_short(old)}, requested {_short(new)}")


def _short(value: Any, limit: int = 80) -> str:
    """``value`` for a diff line: credentials masked first, so that cutting it short cannot leave half a key."""
    text = redact_text(msgspec.json.encode(value).decode() if not isinstance(value, str) else repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."
