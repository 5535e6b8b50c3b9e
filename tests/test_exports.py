"""One public face: each public module has one sorted ``__all__`` whose names all resolve."""

from __future__ import annotations

import importlib

import pytest

PUBLIC_MODULES = ["chunktape", "chunktape.providers"]

# Names DESIGN.md promises users; a release may add names, never drop these.
PROMISED = {
    "chunktape": {
        "AbortController",
        "AbortSignal",
        "BlockEnd",
        "BlockStart",
        "CallId",
        "ErrorCode",
        "Finish",
        "FinishReason",
        "GenerateOptions",
        "LlmAdapter",
        "LlmError",
        "Message",
        "ReasoningBlock",
        "ReasoningDelta",
        "StreamChunk",
        "StreamValidator",
        "TextBlock",
        "TextDelta",
        "TokenUsage",
        "ToolCallBlock",
        "ToolCallDelta",
        "ToolSpec",
        "UsageChunk",
        "attribution_headers",
        "validate",
    },
    "chunktape.providers": {"ScriptedAdapter"},
}


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_sorted_unique_and_resolvable(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    assert len(set(exported)) == len(exported)
    for attribute in exported:
        assert hasattr(module, attribute), f"{name}.{attribute} is exported but missing"
    assert PROMISED.get(name, set()) <= set(exported)
