"""What the decoder, the encoder and the request codec of OpenAI Responses share: the usage object, how a response
ends, error codes and statuses, and how an output item opens by default."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chunktape._protocol import FinishKind, FinishReason, TokenUsage

__all__ = [
    "ERROR_STATUS",
    "PROTOCOL",
    "default_item",
    "finish_from_wire",
    "finish_to_wire",
    "server_item_type",
    "usage_from_wire",
    "usage_to_wire",
]

PROTOCOL = "responses"
"""The name of this wire protocol in chunks (``ProviderEvent.protocol``, ``BlockStart.opening``)."""

ERROR_STATUS: Mapping[str, int] = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "server_is_overloaded": 503,
    "slow_down": 503,
    "invalid_prompt": 400,
    "invalid_request_error": 400,
    "context_length_exceeded": 400,
}
"""The error codes of an in-stream ``error`` / ``response.failed`` and the HTTP status each means."""
_INCOMPLETE: Mapping[str, FinishKind] = {"max_output_tokens": "length", "content_filter": "content-filter"}
_USAGE_FIELDS = frozenset(
    {"input_tokens", "output_tokens", "total_tokens", "input_tokens_details", "output_tokens_details"}
)


def finish_from_wire(status: str, details: Any, *, tool_calls: bool) -> FinishReason:
    """How a response ended (``completed``, or ``incomplete`` with its ``incomplete_details``) as a finish."""
    if status == "incomplete":
        reason = details.get("reason") if isinstance(details, dict) else None
        kind = _INCOMPLETE.get(reason) if isinstance(reason, str) else None
        return FinishReason(
            kind=kind or "length",
            provider_reason="incomplete",
            details=details if isinstance(details, dict) else None,
        )
    return FinishReason(kind="tool-calls" if tool_calls else "stop", provider_reason=status)


def finish_to_wire(reason: FinishReason) -> tuple[str, dict[str, Any] | None]:
    """The terminal status and ``incomplete_details`` for a finish."""
    if reason.provider_reason == "incomplete" and reason.details is not None:
        return "incomplete", reason.details
    if reason.kind == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if reason.kind == "content-filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def usage_from_wire(usage: Mapping[str, Any]) -> TokenUsage:
    input_details = usage.get("input_tokens_details")
    output_details = usage.get("output_tokens_details")
    extra = {key: value for key, value in usage.items() if key not in _USAGE_FIELDS}
    return TokenUsage(
        input_tokens=_count(usage.get("input_tokens")) or 0,
        output_tokens=_count(usage.get("output_tokens")) or 0,
        cached_input_tokens=_count(input_details.get("cached_tokens")) if isinstance(input_details, dict) else None,
        reasoning_tokens=_count(output_details.get("reasoning_tokens")) if isinstance(output_details, dict) else None,
        extra=extra,
    )


def usage_to_wire(usage: TokenUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_input_tokens or 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
        **usage.extra,
    }


def server_item_type(name: str) -> str:
    """The output item type of a server tool by its name (``web_search`` -> ``web_search_call``)."""
    return name if name.endswith("_call") else f"{name}_call"


def default_item(kind: str, *, id: str, call_id: str | None = None, name: str | None = None) -> dict[str, Any]:
    """The item ``response.output_item.added`` carries for a block, when nothing else is known (the encoder's, and
    what the decoder compares an item with to know whether to keep it as the block's opening)."""
    if kind == "message":
        return {"id": id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
    if kind == "reasoning":
        return {"id": id, "type": "reasoning", "summary": []}
    if kind == "function_call":
        return {
            "id": id,
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id or "",
            "name": name or "",
        }
    return {"id": id, "type": kind, "status": "in_progress"}
