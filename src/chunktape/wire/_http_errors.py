"""A provider's errors, read once: ``Retry-After`` / ``retry-after-ms``, error bodies and in-band error objects.

The adapter (live responses) and the vcrpy import (recorded ones) both use ``http_error``; the chunk decoder
uses ``error_from_payload`` for in-band errors; anything that reads a ``Retry-After`` value uses
``parse_retry_after``. ``not_an_event_stream`` and ``snippet`` serve every streamed protocol alike.
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

from chunktape._errors import ErrorCode, LlmError

__all__ = [
    "MAX_RETRY_AFTER",
    "clamp_retry_after",
    "error_from_payload",
    "header_value",
    "http_error",
    "not_an_event_stream",
    "parse_retry_after",
    "parse_retry_after_ms",
    "retry_after_from_headers",
    "snippet",
]

MAX_RETRY_AFTER = 86_400.0
"""The longest wait a provider can ask for (one day); longer ones (a date in 2099) are capped to it."""

_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_any_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


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


def header_value(headers: Mapping[str, Any], name: str) -> str | None:
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
    millis = parse_retry_after_ms(header_value(headers, "retry-after-ms"))
    if millis is not None:
        return millis
    return parse_retry_after(header_value(headers, "retry-after"), now=now)


def error_from_payload(
    payload: Any, *, what: str = "the provider reported an error", now: float | None = None
) -> LlmError:
    """Build an ``LlmError`` from an error object or body (``{"error": {...}}``, ``{"message": ...}``, text).

    The message starts with the provider's own message, verbatim, then says what it is and where it came
    from: ``"Rate limit reached (rate_limit_error; deepseek answered HTTP 429)"``. ``PROVIDER_HTTP_ERROR``
    with ``status`` when the payload names an HTTP status, else ``STREAM_ABORTED``. ``retry_after`` comes
    from ``retry_after`` / ``retry_after_seconds`` / ``retryAfter`` (seconds or an HTTP-date) or
    ``retry_after_ms`` on the error object, its ``metadata`` (or ``metadata.headers``), or the body.
    """
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    message: str
    status: int | None = None
    notes: list[str] = []
    if isinstance(error, dict):
        raw = error.get("message")
        message = raw if isinstance(raw, str) and raw.strip() else _encoder.encode(error).decode()
        for key in ("status_code", "status", "code"):
            value = error.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
                status = value
                break
        kind = error.get("type") or error.get("code")
        if isinstance(kind, str) and kind and kind not in message:
            notes.append(kind)
    else:
        message = str(error)
    notes.append(what)
    text = f"{message} ({'; '.join(notes)})"
    retry_after = _payload_retry_after(payload, error, now=now)
    if status is not None:
        return LlmError(text, ErrorCode.PROVIDER_HTTP_ERROR, status=status, retry_after=retry_after)
    return LlmError(text, ErrorCode.STREAM_ABORTED, retry_after=retry_after)


def clamp_retry_after(value: object) -> float | None:
    """A number of seconds as a usable wait: None unless a finite non-negative number, capped at a day."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return min(float(value), MAX_RETRY_AFTER)


def _seconds(value: Any, *, scale: float = 1.0, now: float | None = None) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return clamp_retry_after(value / scale)
    if isinstance(value, str):
        return parse_retry_after_ms(value) if scale != 1.0 else parse_retry_after(value, now=now)
    return None


def _payload_retry_after(payload: Any, error: Any, *, now: float | None) -> float | None:
    places: list[Any] = [error]
    if isinstance(error, dict):
        places.append(error.get("metadata"))
    places.append(payload)
    for place in places:
        if not isinstance(place, dict):
            continue
        seconds = _seconds(place.get("retry_after_ms"), scale=1000.0)
        for key in ("retry_after", "retry_after_seconds", "retryAfter"):
            if seconds is None:
                seconds = _seconds(place.get(key), now=now)
        headers = place.get("headers")
        if seconds is None and isinstance(headers, dict):
            seconds = retry_after_from_headers(headers, now=now)
        if seconds is not None:
            return seconds
    return None


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
        error = error_from_payload(payload, what=f"{who} answered HTTP {status}", now=now)
        message = error.message
        if retry_after is None:
            retry_after = error.retry_after
    else:
        text = body.decode(errors="replace").strip()
        message = f"{who} answered HTTP {status}" + (f": {text[:500]}" if text else "")
    return LlmError(message, ErrorCode.PROVIDER_HTTP_ERROR, status=status, retry_after=retry_after)


def not_an_event_stream(
    body: bytes, content_type: str | None, *, who: str = "the provider", streams: str = "chat completions"
) -> LlmError:
    """A 2xx body that held no SSE at all (an HTML page, a proxy's login form): ``INVALID_RESPONSE`` with a snippet.

    A JSON error object (whatever the content type) becomes ``error_from_payload``'s error instead. ``streams``
    names what the endpoint should have streamed, for the hint.
    """
    try:
        payload: Any = _any_decoder.decode(body)
    except msgspec.DecodeError:
        payload = None
    if isinstance(payload, dict) and payload.get("error") is not None:
        return error_from_payload(payload, what=f"{who} answered with an error")
    kind = content_type or "no content-type"
    return LlmError(
        f"{who} answered with something that is not an event stream ({kind}): {snippet(body, 200)}",
        ErrorCode.INVALID_RESPONSE,
        hint=f"check the base URL (a proxy or login page?) and that the endpoint streams {streams}",
    )


def snippet(data: str | bytes, limit: int = 120) -> str:
    """The start of a body or payload, quoted, for an error message (bytes decoded leniently)."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
