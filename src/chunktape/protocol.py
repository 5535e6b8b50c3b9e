"""The StreamChunk protocol (DeepSeek Harness ``dsh-stream/1``), ported to msgspec Structs.

Python attributes are snake_case; the wire names are the protocol's own camelCase (``blockType``,
``argumentsDelta``, ``inputTokens``), so a chunk encoded with ``msgspec.json`` reads exactly like the
protocol's documentation. Every chunk is frozen and tagged on ``type``.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, NewType, Self, TypeAlias

import msgspec

from chunktape.abort import AbortController, AbortSignal

__all__ = [
    "AbortController",
    "AbortSignal",
    "Block",
    "BlockEnd",
    "BlockStart",
    "BlockType",
    "CallId",
    "Finish",
    "FinishKind",
    "FinishReason",
    "GenerateOptions",
    "LlmAdapter",
    "Message",
    "PROTOCOL",
    "ReasoningBlock",
    "ReasoningDelta",
    "ReasoningOption",
    "Role",
    "StreamChunk",
    "TextBlock",
    "TextDelta",
    "TokenUsage",
    "ToolCallBlock",
    "ToolCallDelta",
    "ToolSpec",
    "UsageChunk",
    "aclose_stream",
    "attribution_headers",
]

PROTOCOL = "dsh-stream/1"

CallId = NewType("CallId", str)
"""Tool-call ids; ``CallId("call-123")`` mirrors the protocol's factory."""

BlockType: TypeAlias = Literal["text", "tool-call", "reasoning"]
FinishKind: TypeAlias = Literal["stop", "tool-calls", "length", "content-filter", "error", "cancelled"]
Role: TypeAlias = Literal["system", "user", "assistant", "tool"]


class _Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Common config: immutable, keyword-only, camelCase on the wire, optional fields omitted."""


class _Tagged(_Wire, frozen=True, kw_only=True, tag_field="type", gc=False):
    """Chunks and blocks hold no reference cycles, so the GC need not track them (1M-chunk cassettes)."""


# -- complete blocks (carried by block-end) ---------------------------------------------------


class TextBlock(_Tagged, frozen=True, kw_only=True, tag="text"):
    text: str


class ReasoningBlock(_Tagged, frozen=True, kw_only=True, tag="reasoning"):
    text: str


class ToolCallBlock(_Tagged, frozen=True, kw_only=True, tag="tool-call"):
    id: CallId
    name: str
    arguments: str
    """The assembled JSON text of the arguments, exactly as streamed."""


Block: TypeAlias = TextBlock | ReasoningBlock | ToolCallBlock


# -- chunks ------------------------------------------------------------------------------------


class BlockStart(_Tagged, frozen=True, kw_only=True, tag="block-start"):
    index: int
    block_type: BlockType


class TextDelta(_Tagged, frozen=True, kw_only=True, tag="text-delta"):
    index: int
    text: str


class ReasoningDelta(_Tagged, frozen=True, kw_only=True, tag="reasoning-delta"):
    """Extension: DeepSeek's ``reasoning_content`` (thinking) as its own block type."""

    index: int
    text: str


class ToolCallDelta(_Tagged, frozen=True, kw_only=True, tag="tool-call-delta"):
    index: int
    id: CallId | None = None
    name: str | None = None
    arguments_delta: str


class BlockEnd(_Tagged, frozen=True, kw_only=True, tag="block-end"):
    index: int
    block: Block


class TokenUsage(_Wire, frozen=True, kw_only=True, gc=False):
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int | None = None
    reasoning_tokens: int | None = None


class UsageChunk(_Tagged, frozen=True, kw_only=True, tag="usage"):
    usage: TokenUsage


class FinishReason(_Wire, frozen=True, kw_only=True, gc=False):
    kind: FinishKind
    detail: str | None = None


class Finish(_Tagged, frozen=True, kw_only=True, tag="finish"):
    reason: FinishReason


StreamChunk: TypeAlias = BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageChunk | Finish


# -- requests ----------------------------------------------------------------------------------


class Message(_Wire, frozen=True, kw_only=True):
    role: Role
    content: str | None = None
    tool_calls: list[ToolCallBlock] = []
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    """Sent back on assistant tool-call turns (DeepSeek's thinking-mode rule)."""


class ToolSpec(_Wire, frozen=True, kw_only=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}
    """A JSON schema."""


class GenerateOptions(_Wire, frozen=True, kw_only=True):
    """One request to an adapter. ``signal`` is runtime-only and never recorded."""

    model: str
    messages: list[Message]
    tools: list[ToolSpec] = []
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning: str | None = None
    """An opaque reasoning-effort id from the adapter's ``reasoning_options()``; never an enum."""
    extra: dict[str, Any] = {}
    """Provider-specific request fields."""
    signal: AbortSignal | None = None


class ReasoningOption(_Wire, frozen=True, kw_only=True):
    """One reasoning effort an adapter offers: an opaque id, a display name, whether it is the default."""

    id: str
    label: str = ""
    default: bool = False


# -- adapters ----------------------------------------------------------------------------------


async def aclose_stream(stream: object) -> None:
    """Close a stream that can be closed (an async generator), so its ``finally`` runs now, not at GC."""
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def attribution_headers() -> dict[str, str]:
    """Headers every provider request merges in, so providers can attribute traffic to chunktape."""
    from chunktape._version import __version__

    return {"User-Agent": f"chunktape/{__version__}", "X-Title": "chunktape"}


class LlmAdapter(abc.ABC):
    """Streams one generation as StreamChunks. Implement ``stream`` as an async generator.

    An adapter must raise ``LlmError(UNSUPPORTED_OPTION)`` for options it cannot honour, end promptly
    when ``options.signal`` aborts, and release its resources when the generator is closed.
    """

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """A short label recorded in cassettes, e.g. ``deepseek`` or ``scripted``."""

    @abc.abstractmethod
    def stream(self, options: GenerateOptions) -> AsyncIterator[StreamChunk]:
        """Yield the chunks of one generation."""

    @property
    def secrets(self) -> Sequence[str]:
        """Credentials this adapter uses; recorders make sure none of them reaches a cassette."""
        return ()

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        """The reasoning efforts this adapter accepts, in order; empty means none are configurable."""
        return ()

    async def aclose(self) -> None:
        """Release connections and files. Safe to call twice."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
