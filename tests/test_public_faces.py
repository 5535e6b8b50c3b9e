"""The public faces: few, listed, each with one sorted ``__all__`` that is exactly what it shows (httpx's rule);
every other module is private by its name; the README and docs import only what the faces export."""

from __future__ import annotations

import importlib
import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FACES = [
    "chunktape",
    "chunktape.cli",
    "chunktape.faults",
    "chunktape.harness",
    "chunktape.http",
    "chunktape.providers",
    "chunktape.pytest",
    "chunktape.secrets",
    "chunktape.wire",
]
"""The modules a user imports. Every other module has an underscore in its dotted name: it is the implementation."""

# Names the design contract promises users; a release may add names, never drop these.
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


@pytest.mark.parametrize("name", FACES)
def test_all_is_sorted_unique_and_resolvable(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported)
    assert len(set(exported)) == len(exported)
    for attribute in exported:
        assert hasattr(module, attribute), f"{name}.{attribute} is exported but missing"
    assert PROMISED.get(name, set()) <= set(exported)


@pytest.mark.parametrize("name", FACES)
def test_nothing_but_all_is_reachable(name: str) -> None:
    """httpx's rule: a face's public names are exactly its ``__all__`` (its lazy names loaded first); the faces
    below it are importable as submodules, never re-exported, and nothing it imports for itself leaks."""
    module = importlib.import_module(name)
    for attribute in module.__all__:
        getattr(module, attribute)
    public = {
        attribute
        for attribute, value in vars(module).items()
        if attribute.isidentifier()  # pytest's assertion rewriting adds '@py_builtins' to plugin packages
        and not attribute.startswith("_")
        and not (isinstance(value, types.ModuleType) and value.__name__ in FACES)
    }
    exported = set(module.__all__) - {"__version__"}
    assert public == exported, f"{name}: public but not in __all__: {sorted(public - exported)}"


def _modules() -> list[str]:
    found = []
    for path in (ROOT / "src" / "chunktape").rglob("*.py"):
        parts = list(path.relative_to(ROOT / "src").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append(".".join(parts))
    return found


def test_every_module_outside_the_faces_is_private_by_its_name() -> None:
    public = sorted(module for module in _modules() if not any(part.startswith("_") for part in module.split(".")))
    assert public == FACES


_IMPORT = re.compile(r"^\s*from (chunktape[\w.]*) import \(?([\w, \n]+?)\)?\s*$", re.M)


@pytest.mark.parametrize(
    "document", sorted(str(path.relative_to(ROOT)) for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
)
def test_the_docs_import_only_what_a_face_exports(document: str) -> None:
    text = (ROOT / document).read_text()
    wrong = []
    for module_name, names in _IMPORT.findall(text):
        if module_name not in FACES:
            wrong.append(f"{module_name} is not a public face")
            continue
        exported = set(importlib.import_module(module_name).__all__)
        wrong += [f"{module_name}.{name}" for name in re.findall(r"\w+", names) if name not in exported]
    assert wrong == []


def test_the_faces_export_a_few_hundred_names_at_most() -> None:
    total = sum(len(importlib.import_module(face).__all__) for face in FACES)
    assert total <= 200, total
