"""Staleness: how old a recording is, and the error a cassette older than its maximum age raises.

``parse_age("30d")`` reads a maximum age; ``stale(cassette, max_age, where)`` is the ``CASSETTE_STALE`` error of a
cassette recorded longer ago than that (``chunktape check --max-age``, the plugin's ``tape_max_age``). The age is
the cassette's ``meta.created_at``: when it was first recorded (appending with ``new_episodes`` keeps it).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final

from chunktape._cassettes.model import Cassette
from chunktape._errors import ErrorCode, LlmError

__all__ = ["AGE_UNITS", "age_words", "cassette_age", "parse_age", "stale"]

AGE_UNITS: Final = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
"""The units a maximum age is written in: ``90s``, ``45m``, ``12h``, ``30d``, ``2w``."""
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_age(value: object, where: str = "max_age") -> timedelta:
    """A maximum age: a ``timedelta``, or text such as ``30d`` (units s, m, h, d, w); else ``INVALID_CONFIG``."""
    if isinstance(value, timedelta):
        age = value
    elif isinstance(value, str) and (found := _AGE.match(value)):
        age = timedelta(seconds=float(found[1]) * AGE_UNITS[found[2]])
    else:
        also = "" if isinstance(value, str) else ", or a datetime.timedelta"
        raise LlmError(
            f"{where}={value!r} is not an age; give a number and a unit (s, m, h, d, w) such as '30d'{also}",
            ErrorCode.INVALID_CONFIG,
            hint="",
        )
    if age <= timedelta(0):
        raise LlmError(f"{where}={value!r} must be more than zero", ErrorCode.INVALID_CONFIG, hint="")
    return age


def cassette_age(cassette: Cassette, now: datetime | None = None) -> timedelta:
    """How long ago the cassette was recorded (its ``meta.created_at``; never negative)."""
    created = cassette.meta.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return max(timedelta(0), (now or datetime.now(UTC)) - created)


def age_words(age: timedelta) -> str:
    """``45 days``, ``3 hours``, ``12 minutes``, ``40 seconds``: the largest unit that fits, rounded down."""
    seconds = int(age.total_seconds())
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def stale(cassette: Cassette, max_age: timedelta, where: str, now: datetime | None = None) -> LlmError | None:
    """The ``CASSETTE_STALE`` error of a cassette recorded longer than ``max_age`` ago (``where`` names it, empty:
    the message starts with ``recorded``), or None."""
    age = cassette_age(cassette, now)
    if age <= max_age:
        return None
    created = cassette.meta.created_at.strftime("%Y-%m-%d")
    subject = f"{where} was recorded" if where else "recorded"
    return LlmError(
        f"{subject} {age_words(age)} ago ({created}), longer ago than the maximum age of {age_words(max_age)}",
        ErrorCode.CASSETTE_STALE,
    )
