"""A provider's HTTP error answer, read once: ``Retry-After`` / ``retry-after-ms`` and the error body.

The adapter (live responses) and the vcrpy import (recorded ones) both use ``http_error``; anything that
reads a ``Retry-After`` value uses ``parse_retry_after``.
"""

from __future__ import annotations

import datetime
import email.utils
import math
import re
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from chunktape.errors import ErrorCode, LlmError
from chunktape.wire.openai_chat import error_from_payload

__all__ = ["MAX_RETRY_AFTER", "http_error", "parse_retry_after", "parse_retry_after_ms", "retry_after_from_headers"]

MAX_RETRY_AFTER = 86_400.0
"""The longest wait a provider can ask for (one day); longer ones (a date in 2099) are capped to it."""

_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_any_decoder = msgspec.json.Decoder()


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value, or None when it says nothing usable.

    Accepts delay-seconds (digits, or a plain non-negative decimal such as ``1.5``) and an HTTP-date (seconds
    from ``now``, a POSIX timestamp defaulting to ``time.time()``; a past date is 0). The result is capped at
    ``MAX_RETRY_AFTER``. Garbage (``nan``, ``inf``, ``-3``, ``1e9``, an unparseable date, empty) is None.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if _SECONDS.fullmatch(text):
        seconds = float(text)
    else:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # "-0000" means UTC without saying where the sender is
            when = when.replace(tzinfo=datetime.UTC)
        seconds = max(when.timestamp() - (time.time() if now is None else now), 0.0)
    if not math.isfinite(seconds):
        return None
    return min(seconds, MAX_RETRY_AFTER)


def parse_retry_after_ms(value: str | None) -> float | None:
    """OpenAI's ``retry-after-ms`` (milliseconds, digits or a plain decimal) in seconds, capped; else None."""
    if value is None or not _SECONDS.fullmatch(text := value.strip()):
        return None
    seconds = float(text) / 1000
    return min(seconds, MAX_RETRY_AFTER) if math.isfinite(seconds) else None


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    """A header by name in any case; a list of values (vcrpy's ``{name: [values]}``) gives its first."""
    for key, value in headers.items():
        if str(key).lower() == name:
            if isinstance(value, list | tuple):
                return str(value[0]) if value else None
            return None if value is None else str(value)
    return None


def retry_after_from_headers(headers: Mapping[str, Any] | None, *, now: float | None = None) -> float | None:
    """``retry-after-ms`` when usable, else ``Retry-After`` (see ``parse_retry_after``); header names in any case."""
    if not headers:
        return None
    millis = parse_retry_after_ms(_header(headers, "retry-after-ms"))
    if millis is not None:
        return millis
    return parse_retry_after(_header(headers, "retry-after"), now=now)


def http_error(
    status: int,
    body: bytes,
    headers: Mapping[str, Any] | None = None,
    *,
    who: str = "the provider",
    now: float | None = None,
) -> LlmError:
    """``PROVIDER_HTTP_ERROR`` for a non-2xx answer: ``status``, the provider's message and ``retry_after``.

    The body is read as JSON whatever its content type (DeepSeek serves error JSON as
    ``application/octet-stream``); other bodies give their first 500 characters. ``retry_after`` comes from
    the headers, else from the error object (``error.retry_after``...).
    """
    try:
        payload: Any = _any_decoder.decode(body)
    except msgspec.DecodeError:
        payload = None
    retry_after = retry_after_from_headers(headers, now=now)
    if isinstance(payload, dict):
        error = error_from_payload(payload, what=f"{who} answered HTTP {status}")
        message = error.message
        if retry_after is None:
            retry_after = error.retry_after
    else:
        text = body.decode(errors="replace").strip()
        message = f"{who} answered HTTP {status}" + (f": {text[:500]}" if text else "")
    return LlmError(message, ErrorCode.PROVIDER_HTTP_ERROR, status=status, retry_after=retry_after)
