"""What the decoder, the encoder and the request codec of Anthropic Messages share: stop reasons, the usage
object, error types and statuses, and how a content block opens by default, each mapped both ways once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chunktape._protocol import FinishKind, FinishReason, TokenUsage

__all__ = [
    "ERROR_STATUS",
    "PROTOCOL",
    "STOP_REASONS",
    "default_opening",
    "error_type",
    "finish_from_wire",
    "finish_to_wire",
    "usage_from_wire",
    "usage_to_wire",
]

PROTOCOL = "anthropic"
"""The name of this wire protocol in chunks (``ProviderEvent.protocol``, ``BlockStart.opening``)."""

STOP_REASONS: Mapping[str, FinishKind] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool-calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content-filter",
}
"""Anthropic's stop reasons and the kind of finish each is; the reason itself is kept as ``provider_reason``."""
_FROM_KIND: Mapping[FinishKind, str] = {
    "stop": "end_turn",
    "tool-calls": "tool_use",
    "length": "max_tokens",
    "content-filter": "refusal",
    "error": "end_turn",
    "cancelled": "end_turn",
}

ERROR_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""Anthropic's error types and the HTTP status each is answered with (``overloaded_error`` is 529)."""
_TYPE_OF_STATUS = {status: kind for kind, status in ERROR_STATUS.items()}

_USAGE_FIELDS = frozenset({"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"})


def finish_from_wire(reason: str | None, stop_sequence: str | None = None, details: Any = None) -> FinishReason:
    """A ``stop_reason`` (with its ``stop_sequence`` and ``stop_details``) as a finish; an unknown reason is an
    ``error`` finish naming it (``detail``), as chat completions' unknown finish reasons are."""
    kind = STOP_REASONS.get(reason or "end_turn")
    return FinishReason(
        kind=kind or "error",
        detail=None if kind is not None else reason,
        provider_reason=reason if kind is not None else None,
        stop_sequence=stop_sequence,
        details=details if isinstance(details, dict) else None,
    )


def finish_to_wire(reason: FinishReason) -> str:
    """The ``stop_reason`` for a finish: its own when it is Anthropic's, else the one its kind means (an
    ``error`` finish naming an unknown reason sends that reason back)."""
    if reason.provider_reason is not None and reason.provider_reason in STOP_REASONS:
        return reason.provider_reason
    if reason.kind == "error" and reason.detail:
        return reason.detail
    return _FROM_KIND[reason.kind]


def error_type(status: int | None) -> str:
    """The Anthropic error ``type`` for an HTTP status (``api_error`` for other 5xx and none)."""
    if status is None:
        return "api_error"
    return _TYPE_OF_STATUS.get(status, "api_error" if status >= 500 else "invalid_request_error")


def usage_from_wire(usage: Mapping[str, Any]) -> TokenUsage:
    """The usage object (``message_start``'s, updated by ``message_delta``'s) as ``TokenUsage``: ``input_tokens``
    counts every input token, cache reads and writes included, so it means what it means for the other protocols."""
    read = _count(usage.get("cache_read_input_tokens"))
    written = _count(usage.get("cache_creation_input_tokens"))
    details = usage.get("output_tokens_details")
    thinking = _count(details.get("thinking_tokens")) if isinstance(details, dict) else None
    extra = {key: value for key, value in usage.items() if key not in _USAGE_FIELDS}
    if thinking is not None and isinstance(details, dict) and set(details) == {"thinking_tokens"}:
        del extra["output_tokens_details"]
    else:
        thinking = None
    return TokenUsage(
        input_tokens=(_count(usage.get("input_tokens")) or 0) + (read or 0) + (written or 0),
        output_tokens=_count(usage.get("output_tokens")) or 0,
        cached_input_tokens=read,
        cache_write_tokens=written,
        reasoning_tokens=thinking,
        extra=extra,
    )


def usage_to_wire(usage: TokenUsage) -> dict[str, Any]:
    """``TokenUsage`` as Anthropic's usage object (``input_tokens`` without the cache reads and writes)."""
    read, written = usage.cached_input_tokens, usage.cache_write_tokens
    wire: dict[str, Any] = {"input_tokens": max(usage.input_tokens - (read or 0) - (written or 0), 0)}
    if written is not None:
        wire["cache_creation_input_tokens"] = written
    if read is not None:
        wire["cache_read_input_tokens"] = read
    wire["output_tokens"] = usage.output_tokens
    if usage.reasoning_tokens is not None:
        wire["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    for key, value in usage.extra.items():
        wire.setdefault(key, value)
    return wire


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def default_opening(kind: str, *, id: str | None = None, name: str | None = None) -> dict[str, Any]:
    """The ``content_block`` that opens a block of ``kind`` when nothing else is known (the encoder's, and what
    the decoder compares an opening with to know whether to keep it)."""
    if kind == "text":
        return {"type": "text", "text": ""}
    if kind == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    if kind in ("tool_use", "server_tool_use"):
        return {"type": kind, "id": id or "", "name": name or "", "input": {}}
    return {"type": kind}
