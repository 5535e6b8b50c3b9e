"""What a session decides and lists: its record mode, the calls made through it, and what counts as a miss."""

from __future__ import annotations

from enum import StrEnum

import msgspec

from chunktape._cassettes.model import RecordedRequest
from chunktape._errors import ErrorCode, LlmError

__all__ = ["MISS_CODES", "RecordMode", "SessionCall"]


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
    REWRITE = "rewrite"
    """pytest-recording's name: delete the cassette and record it again. As ``all``, the new recording replaces the
    old file only once it is saved as passed (a failed run keeps it); the pytest plugin also removes the cassette of
    a passing test that made no call."""

    @property
    def replaces(self) -> bool:
        """Whether this mode records every call and replaces the cassette (``all``, ``rewrite``)."""
        return self in (RecordMode.ALL, RecordMode.REWRITE)

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
