"""One public face: each public module has one sorted ``__all__`` whose names all resolve."""

from __future__ import annotations

import importlib
import types

import pytest

PUBLIC_MODULES = [
    "chunktape",
    "chunktape.cassettes",
    "chunktape.faults",
    "chunktape.harness",
    "chunktape.http",
    "chunktape.providers",
    "chunktape.recorder",
    "chunktape.replayer",
    "chunktape.secrets",
    "chunktape.wire",
]

# Names DESIGN.md promises users; a release may add names, never drop these.
PROMISED = {
    "chunktape": {
        "AbortController",
        "AbortSignal",
        "Advice",
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
        # cassettes, recording, replay, sessions
        "Cancelled",
        "Cassette",
        "CassetteMeta",
        "CassetteSession",
        "Completed",
        "DEFAULT_MATCH",
        "Event",
        "FORMAT_VERSION",
        "Interaction",
        "Raised",
        "RecordMode",
        "RecordedRequest",
        "RecordingAdapter",
        "ReplayAdapter",
        "Timing",
        "load_cassette",
        "save_cassette",
        "use_cassette",
    },
    "chunktape.faults": {
        "Chaos",
        "Corrupt",
        "Disconnect",
        "FailFirst",
        "HttpError",
        "Latency",
        "STANDARD_FAULTS",
        "Stall",
        "Truncate",
    },
    "chunktape.harness": {
        "DoneEvent",
        "ErrorEvent",
        "RetryPolicy",
        "StreamMetrics",
        "TextEvent",
        "ToolCallEvent",
        "stream_with_retry",
    },
    "chunktape.http": {"FaultTransport", "ReplayServer", "import_vcr", "render_sse", "serve", "vcr_config"},
    "chunktape.providers": {"OpenAICompatAdapter", "ScriptedAdapter"},
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


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_nothing_but_all_is_reachable(name: str) -> None:
    """httpx's rule: a public module's public names are exactly its ``__all__``; its own submodules are the
    implementation (importable, never re-exported), and nothing it imports for itself leaks as a public name."""
    module = importlib.import_module(name)
    own = f"{name}."
    public = {
        attribute
        for attribute, value in ((attribute, getattr(module, attribute)) for attribute in dir(module))  # lazy too
        if attribute.isidentifier()  # pytest's assertion rewriting adds '@py_builtins' to plugin packages
        and not attribute.startswith("_")
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith(own))
    }
    exported = set(module.__all__) - {"__version__"}
    assert public == exported, f"{name}: public but not in __all__: {sorted(public - exported)}"
