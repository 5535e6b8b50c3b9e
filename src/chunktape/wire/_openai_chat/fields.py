"""What the decoder, the encoder and the request codec of OpenAI chat completions share: field names, the
``finish_reason`` vocabulary and the ``usage`` object, each mapped in both directions once.
"""

from __future__ import annotations

from typing import Any

import msgspec

from chunktape._protocol import FinishKind, FinishReason, TokenUsage, ToolCallBlock

__all__ = [
    "DONE",
    "WireUsage",
    "finish_from_wire",
    "finish_to_wire",
    "tool_call_to_wire",
    "usage_from_wire",
    "usage_to_wire",
]

DONE = "[DONE]"
"""The ``data:`` payload that ends an OpenAI stream."""

# -- the usage object, typed and lenient (unknown fields are ignored) -------------------------------


class _PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class WireUsage(msgspec.Struct):
    """The ``usage`` object of a chunk or a completion."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_cache_hit_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


_FINISH_FROM_WIRE: dict[str, FinishKind] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool-calls",
    "function_call": "tool-calls",
    "content_filter": "content-filter",
    "error": "error",
    "cancelled": "cancelled",
}
_FINISH_TO_WIRE: dict[FinishKind, str] = {
    "stop": "stop",
    "length": "length",
    "tool-calls": "tool_calls",
    "content-filter": "content_filter",
    "error": "error",
    "cancelled": "cancelled",
}


def finish_from_wire(reason: str) -> FinishReason:
    """Map a ``finish_reason``; unknown ones (``insufficient_system_resource``) are errors with the reason."""
    kind = _FINISH_FROM_WIRE.get(reason)
    if kind is None:
        return FinishReason(kind="error", detail=reason)
    return FinishReason(kind=kind)


def usage_from_wire(usage: WireUsage) -> TokenUsage:
    """The provider's ``usage`` object (DeepSeek's or OpenAI's cache fields) as ``TokenUsage``."""
    cached = usage.prompt_cache_hit_tokens
    if cached is None and usage.prompt_tokens_details is not None:
        cached = usage.prompt_tokens_details.cached_tokens
    details = usage.completion_tokens_details
    return TokenUsage(
        input_tokens=usage.prompt_tokens or 0,
        output_tokens=usage.completion_tokens or 0,
        cached_input_tokens=cached,
        reasoning_tokens=details.reasoning_tokens if details is not None else None,
    )


def finish_to_wire(reason: FinishReason) -> str:
    """The ``finish_reason`` for a finish; an ``error`` with an unknown detail sends the detail itself back."""
    if reason.kind == "error" and reason.detail and reason.detail not in _FINISH_FROM_WIRE:
        return reason.detail
    return _FINISH_TO_WIRE[reason.kind]


def usage_to_wire(usage: TokenUsage) -> dict[str, Any]:
    """``TokenUsage`` as the ``usage`` object, with both cache fields so either kind of client reads it."""
    wire: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }
    if usage.cached_input_tokens is not None:
        wire["prompt_tokens_details"] = {"cached_tokens": usage.cached_input_tokens}
        wire["prompt_cache_hit_tokens"] = usage.cached_input_tokens
    if usage.reasoning_tokens is not None:
        wire["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return wire


def tool_call_to_wire(call: ToolCallBlock) -> dict[str, Any]:
    """A complete tool call as an assistant message lists it (in a request's history or a completion)."""
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
