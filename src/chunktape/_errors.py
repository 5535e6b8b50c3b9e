"""Every failure a user can meet, with a stable code.

The hierarchy is deliberately flat, so that policy code switches on ``error.code`` and never on
classes or message text::

    Exception
     └── LlmError                  code: ErrorCode, status, retry_after, recoverable
          └── ProtocolViolation    code PROTOCOL_VIOLATION, plus the rule broken and the chunk position

Codes are part of the public contract: once released, a code is never renamed or removed
(``tests/test_errors.py`` pins the table).

**Advice per face.** A cassette miss carries an ``Advice`` key (why it missed) rather than a fixed next step,
so each face words it in its own knobs: ``str(error)`` uses the library's (``mode="new_episodes"``,
``match_on=``, ``allow_repeats=True``); the pytest plugin, the CLI and the replay server pass their tables to
``error.render(...)`` (``--tape-mode``, ``chunktape record``, ``--match-on``/``--repeat``/``POST /reset``).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final, TypeAlias


class ErrorCode(StrEnum):
    """The stable error codes. Add new ones at the end; never rename or remove one."""

    PROVIDER_HTTP_ERROR = "PROVIDER_HTTP_ERROR"
    STREAM_ABORTED = "STREAM_ABORTED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    PROTOCOL_VIOLATION = "PROTOCOL_VIOLATION"
    UNSUPPORTED_OPTION = "UNSUPPORTED_OPTION"
    INVALID_RESPONSE = "INVALID_RESPONSE"
    CASSETTE_NOT_FOUND = "CASSETTE_NOT_FOUND"
    CASSETTE_MISMATCH = "CASSETTE_MISMATCH"
    CASSETTE_EXHAUSTED = "CASSETTE_EXHAUSTED"
    CASSETTE_CORRUPT = "CASSETTE_CORRUPT"
    CASSETTE_VERSION = "CASSETTE_VERSION"
    SECRET_DETECTED = "SECRET_DETECTED"
    INVALID_CONFIG = "INVALID_CONFIG"
    SCRIPT_EXHAUSTED = "SCRIPT_EXHAUSTED"
    CASSETTE_UNWRITABLE = "CASSETTE_UNWRITABLE"
    CASSETTE_STALE = "CASSETTE_STALE"


class Advice(StrEnum):
    """Why a replay missed, as a key each face words in its own knobs (see ``LlmError.render``)."""

    RECORD = "record"
    """The cassette does not exist: record it."""
    RECORD_OR_MATCH = "record-or-match"
    """No recorded interaction matches the request: record it, or match on fewer fields."""
    RECORD_OR_REPEAT = "record-or-repeat"
    """Every matching interaction was played: record the extra call, or let interactions play again."""
    UNPLAYED = "unplayed"
    """Recorded interactions were never played (``assert_all_played``): the code made fewer calls."""


AdviceWords: TypeAlias = Mapping[Advice | ErrorCode, str]
"""A face's next steps: by ``Advice`` key first, then by code for errors that carry no advice."""

LIBRARY_ADVICE: Final[AdviceWords] = {
    Advice.RECORD: 'record it: use_cassette(path, live=..., mode="once")',
    Advice.RECORD_OR_MATCH: 're-record with mode="new_episodes", or relax match_on=',
    Advice.RECORD_OR_REPEAT: 'record the extra call (mode="new_episodes") or pass allow_repeats=True',
    Advice.UNPLAYED: 'the code made fewer calls than were recorded; re-record with mode="all" to drop them',
}
"""The library's words (the arguments of ``use_cassette`` / ``ReplayAdapter``): what ``str(error)`` says."""

# What to do next, appended to the message when the raiser gave no more specific hint and the face has no words
# for it. Free of any face's knobs: a face that lacks an entry must not speak another's.
_DEFAULT_HINTS: dict[ErrorCode, str] = {
    ErrorCode.PROVIDER_HTTP_ERROR: "check the status; 408, 429 and 5xx are worth a retry",
    ErrorCode.STREAM_ABORTED: "the connection broke mid-stream; retrying the request usually helps",
    ErrorCode.TIMEOUT: "raise the timeout or retry",
    ErrorCode.CANCELLED: "the caller aborted the stream; nothing to fix",
    ErrorCode.PROTOCOL_VIOLATION: "the adapter emitted an invalid chunk sequence; fix the adapter",
    ErrorCode.UNSUPPORTED_OPTION: "remove the option or use an adapter that supports it",
    ErrorCode.INVALID_RESPONSE: "the provider sent something unparseable; record it and report it",
    ErrorCode.CASSETTE_NOT_FOUND: "check the path, or record the cassette first",
    ErrorCode.CASSETTE_MISMATCH: "record the request, or match on fewer fields",
    ErrorCode.CASSETTE_EXHAUSTED: "record the extra call, or let recorded interactions play again",
    ErrorCode.CASSETTE_CORRUPT: "re-record the cassette, or run `chunktape recover` on its journal",
    ErrorCode.CASSETTE_VERSION: "upgrade chunktape to read this cassette",
    ErrorCode.SECRET_DETECTED: "redact it (`chunktape redact`) or list it in allow_secrets",
    ErrorCode.INVALID_CONFIG: "fix the named field",
    ErrorCode.SCRIPT_EXHAUSTED: "give the ScriptedAdapter one turn per stream() call, or cycle=True",
    ErrorCode.CASSETTE_UNWRITABLE: "pick a cassette path whose folder exists (or can be created) and is writable",
    ErrorCode.CASSETTE_STALE: "re-record the cassette",
}

_RECOVERABLE_CODES = frozenset({ErrorCode.STREAM_ABORTED, ErrorCode.TIMEOUT})


class LlmError(Exception):
    """A failure with a stable ``code``; ``str()`` starts with ``[CODE]`` and says what to do next."""

    def __init__(
        self,
        message: str,
        code: ErrorCode | str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        cause: BaseException | None = None,
        hint: str | None = None,
        advice: Advice | None = None,
        detail: str | None = None,
    ) -> None:
        try:
            self.code = ErrorCode(code)
        except ValueError:
            valid = ", ".join(c.value for c in ErrorCode)
            raise ValueError(f"unknown LlmError code {code!r}; valid codes: {valid}") from None
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.hint = hint
        """The raiser's own next step; it wins over any face's words."""
        self.advice = advice
        """Why a replay missed, for each face to word the next step (``render``)."""
        self.detail = detail
        """What follows the next step: a long explanation, such as a mismatch's closest request and diff."""
        if cause is not None:
            self.__cause__ = cause

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__

    @property
    def recoverable(self) -> bool:
        """True when retrying the same request may succeed (408, 429, 5xx, aborted streams, timeouts)."""
        if self.code in _RECOVERABLE_CODES:
            return True
        if self.code is ErrorCode.PROVIDER_HTTP_ERROR and self.status is not None:
            return self.status in (408, 429) or 500 <= self.status <= 599
        return False

    def next_step(self, words: AdviceWords = LIBRARY_ADVICE) -> str:
        """What to do next in a face's ``words``: the raiser's ``hint``, else the words for ``advice``, else for
        the code, else the code's knob-free default."""
        if self.hint is not None:
            return self.hint
        if self.advice is not None and self.advice in words:
            return words[self.advice]
        return words.get(self.code) or _DEFAULT_HINTS.get(self.code, "")

    def render(self, words: AdviceWords = LIBRARY_ADVICE) -> str:
        """``[CODE] message; next step. detail``, the next step in a face's ``words`` (``str()`` is the library's)."""
        text = f"[{self.code.value}] {self.message}"
        if self.status is not None and f"{self.status}" not in self.message:
            text += f" (HTTP {self.status})"
        hint = self.next_step(words)
        if hint and hint not in self.message:
            text += f"; {hint}"
        return f"{text}. {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={value!r}"
            for name, value in (("status", self.status), ("retry_after", self.retry_after))
            if value is not None
        )
        return f"{type(self).__name__}({self.message!r}, {self.code.value!r}{extra})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments need help to survive pickling (pytest-xdist, multiprocessing).
        return (_rebuild, (type(self), self.__dict__.copy(), self.args))


class ProtocolViolation(LlmError):
    """A stream broke one of the StreamChunk rules; ``rule`` names it, ``position`` is the 0-based chunk."""

    def __init__(self, rule: str, position: int, detail: str) -> None:
        super().__init__(f"rule {rule!r} broken at chunk #{position}: {detail}", ErrorCode.PROTOCOL_VIOLATION)
        self.rule = rule
        self.position = position


def _rebuild(cls: type[LlmError], state: dict[str, Any], args: tuple[Any, ...]) -> LlmError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error
