"""The StreamChunk protocol (DeepSeek Harness ``dsh-stream/1``), ported to msgspec Structs.

Python attributes are snake_case; the wire names are the protocol's own camelCase (``blockType``,
``argumentsDelta``, ``inputTokens``), so a chunk encoded with ``msgspec.json`` reads exactly like the
protocol's documentation. Every chunk is frozen and tagged on ``type``.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import Any, Literal, NewType, Self, TypeAlias

import msgspec

from chunktape._abort import AbortController, AbortSignal
from chunktape._errors import ErrorCode, LlmError

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
    "NAMED_ON_THE_WIRE",
    "PROTOCOL",
    "ProviderEvent",
    "ReasoningBlock",
    "ReasoningDelta",
    "ReasoningOption",
    "Reply",
    "ReplyBuilder",
    "RequestFields",
    "Role",
    "ServerToolCallBlock",
    "ServerToolResultBlock",
    "StreamChunk",
    "TextBlock",
    "TextDelta",
    "TokenUsage",
    "ToolCallBlock",
    "ToolCallDelta",
    "ToolSpec",
    "UsageChunk",
    "WrappingAdapter",
    "aclose_stream",
    "attribution_headers",
    "check_reasoning",
]

PROTOCOL = "dsh-stream/1"

CallId = NewType("CallId", str)
"""Tool-call ids; ``CallId("call-123")`` mirrors the protocol's factory."""

BlockType: TypeAlias = Literal["text", "tool-call", "reasoning", "server-tool-call", "server-tool-result"]
"""``server-tool-call`` / ``server-tool-result``: a tool the provider runs itself (Anthropic's ``server_tool_use`` and
``web_search_tool_result``, a Responses ``web_search_call``): recorded and replayed, never for the agent to run."""
FinishKind: TypeAlias = Literal["stop", "tool-calls", "length", "content-filter", "error", "cancelled"]
Role: TypeAlias = Literal["system", "user", "assistant", "tool"]


class _Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Common config: immutable, keyword-only, camelCase on the wire, optional fields omitted."""


class _Tagged(_Wire, frozen=True, kw_only=True, tag_field="type", gc=False):
    """Chunks and blocks hold no reference cycles, so the GC need not track them (1M-chunk cassettes)."""


# -- complete blocks (carried by block-end) ---------------------------------------------------


class TextBlock(_Tagged, frozen=True, kw_only=True, tag="text"):
    text: str
    citations: list[Any] | None = None
    """The block's citations as the provider sent them (Anthropic's ``citations``, a Responses part's
    ``annotations``), in order; None when the block had no citations field at all (``[]``: it had, empty)."""


class ReasoningBlock(_Tagged, frozen=True, kw_only=True, tag="reasoning"):
    text: str
    signature: str | None = None
    """Anthropic's thinking signature (the concatenated ``signature_delta`` pieces), sent back with the block."""
    redacted: str | None = None
    """Anthropic's ``redacted_thinking`` block: its encrypted ``data`` (``text`` is then empty)."""
    encrypted: str | None = None
    """A Responses reasoning item's ``encrypted_content``, as the item ended with it."""


class ToolCallBlock(_Tagged, frozen=True, kw_only=True, tag="tool-call"):
    id: CallId
    name: str
    arguments: str
    """The assembled JSON text of the arguments, exactly as streamed."""
    cut: bool = False
    """The provider's token limit cut the arguments off before they were complete (Anthropic's ``max_tokens``, a
    ``length`` finish): they are the JSON text as far as it came, and the call cannot be run. Only the last block
    of a stream that finishes with ``length`` may be cut."""


class ServerToolCallBlock(_Tagged, frozen=True, kw_only=True, tag="server-tool-call"):
    """A tool the provider itself runs (web search, code execution): the agent must not run it."""

    id: str
    name: str
    arguments: str
    """The assembled JSON text of its input, exactly as streamed (``argumentsDelta`` pieces, like a tool call)."""


class ServerToolResultBlock(_Tagged, frozen=True, kw_only=True, tag="server-tool-result"):
    """What a server tool returned (Anthropic's ``web_search_tool_result``...), as the provider sent it."""

    tool_use_id: str
    content: Any = None


Block: TypeAlias = TextBlock | ReasoningBlock | ToolCallBlock | ServerToolCallBlock | ServerToolResultBlock


# -- chunks ------------------------------------------------------------------------------------


class BlockStart(_Tagged, frozen=True, kw_only=True, tag="block-start"):
    index: int
    block_type: BlockType
    id: str | None = None
    """The provider's own id for the block, when it has one (a Responses output item's ``id``)."""
    opening: dict[str, dict[str, Any]] = {}
    """The block as a wire protocol opened it, when not as that protocol's encoder opens one by default, keyed by
    the protocol (``{"anthropic": content_block}``): an encoder of that protocol opens the block with it."""


class TextDelta(_Tagged, frozen=True, kw_only=True, tag="text-delta"):
    index: int
    text: str
    citation: Any = None
    """A citation the provider added to the block at this point (Anthropic's ``citations_delta``, a Responses
    ``output_text.annotation.added``); ``text`` is then usually empty."""
    part: int | None = None
    """The provider's part of the block the text belongs to, when not the first (a Responses ``content_index``)."""


class ReasoningDelta(_Tagged, frozen=True, kw_only=True, tag="reasoning-delta"):
    """Extension: DeepSeek's ``reasoning_content`` (thinking) as its own block type."""

    index: int
    text: str
    signature: str | None = None
    """A piece of Anthropic's thinking signature (``signature_delta``); ``text`` is then empty."""
    part: int | None = None
    """The provider's part of the block, when not the first (a Responses reasoning ``summary_index``)."""


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
    """Every input token, cached ones included (Anthropic's ``input_tokens`` plus its cache reads and writes)."""
    output_tokens: int
    cached_input_tokens: int | None = None
    """Of ``input_tokens``, those read from the provider's prompt cache."""
    reasoning_tokens: int | None = None
    cache_write_tokens: int | None = None
    """Of ``input_tokens``, those written to the prompt cache (Anthropic's ``cache_creation_input_tokens``)."""
    extra: dict[str, Any] = {}
    """The provider's other usage fields, as sent (Anthropic's ``server_tool_use`` counts, ``cache_creation``)."""


class UsageChunk(_Tagged, frozen=True, kw_only=True, tag="usage"):
    usage: TokenUsage


class FinishReason(_Wire, frozen=True, kw_only=True, gc=False):
    kind: FinishKind
    detail: str | None = None
    provider_reason: str | None = None
    """The provider's own stop reason when it says more than ``kind`` (Anthropic's ``end_turn``, ``tool_use``,
    ``max_tokens``, ``stop_sequence``, ``refusal``, ``pause_turn``; a Responses ``incomplete``)."""
    stop_sequence: str | None = None
    """The stop sequence that ended the generation, when the provider names it."""
    details: dict[str, Any] | None = None
    """The provider's explanation, as sent (Anthropic's ``stop_details``, a Responses ``incomplete_details``)."""


class Finish(_Tagged, frozen=True, kw_only=True, tag="finish"):
    reason: FinishReason


class ProviderEvent(_Tagged, frozen=True, kw_only=True, tag="provider-event"):
    """An event of a wire protocol that no other chunk means (Anthropic's ``ping``, a Responses
    ``web_search_call.searching``, an event type newer than this library): kept untouched, in its place, so a
    replay on the same protocol sends it again; encoders of other protocols leave it out."""

    protocol: str
    """The wire protocol that sent it: ``anthropic``, ``responses`` or ``chat``."""
    event: str | None = None
    """The SSE ``event:`` name, if it had one."""
    data: str
    """The SSE ``data``, exactly as sent."""


StreamChunk: TypeAlias = (
    BlockStart | TextDelta | ReasoningDelta | ToolCallDelta | BlockEnd | UsageChunk | Finish | ProviderEvent
)


# -- requests ----------------------------------------------------------------------------------


class Message(_Wire, frozen=True, kw_only=True):
    role: Role
    content: str | None = None
    tool_calls: list[ToolCallBlock] = []
    tool_call_id: str | None = None
    name: str | None = None
    reasoning_content: str | None = None
    """Sent back on assistant tool-call turns (DeepSeek's thinking-mode rule)."""
    content_parts: list[dict[str, Any]] | None = None
    """The content as the provider's list of parts, for a message that holds more than text (an image, audio, a
    file: OpenAI's ``image_url``, ``input_audio`` and ``file`` parts), instead of ``content``. Sent as given,
    matched as JSON values, scanned for credentials like every request field."""
    extra: dict[str, Any] = {}
    """The message's other fields, as the request carried them (DeepSeek's ``prefix``, an assistant turn's
    ``audio`` reference): recorded, sent as given after the fields above, matched as JSON values except those
    that say nothing (null, ``[]``, ``{}``: what an SDK's echo of a reply adds, such as ``"refusal": null``)."""

    def __post_init__(self) -> None:
        if self.content_parts is not None and self.content:  # "" is no content, as matching has it
            raise ValueError("a message has content or content_parts, not both")
        named = NAMED_ON_THE_WIRE.intersection(self.extra)
        if named:
            raise ValueError(f"extra holds fields a message has by name: {', '.join(sorted(named))}")

    @property
    def text(self) -> str:
        """The message's text: ``content``, or the text parts of ``content_parts`` joined."""
        if self.content_parts is None:
            return self.content or ""
        texts = (part.get("text") for part in self.content_parts if part.get("type") == "text")
        return "".join(text for text in texts if isinstance(text, str))


NAMED_ON_THE_WIRE = frozenset(Message.__struct_fields__) - {"content_parts", "extra"}
"""The fields a message is sent with under their own names: ``extra`` may not hold them, and a request decoder
puts every other field there. (``content_parts`` goes as ``content`` and ``extra``'s fields as themselves, so a
field named like either is one of ``extra``'s.)"""


class ToolSpec(_Wire, frozen=True, kw_only=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}
    """A JSON schema."""


class RequestFields(_Wire, frozen=True, kw_only=True):
    """The fields of a request to an adapter, declared once: what ``GenerateOptions`` sends and what a cassette's
    ``RecordedRequest`` records."""

    model: str
    messages: list[Message]
    tools: list[ToolSpec] = []
    max_tokens: int | None = None
    temperature: float | None = None
    reasoning: str | None = None
    """An opaque reasoning-effort id from the adapter's ``reasoning_options()``; never an enum."""
    extra: dict[str, Any] = {}
    """Provider-specific request fields."""

    def request_fields(self) -> dict[str, Any]:
        """These fields as the keywords that build either kind of request, their lists and dicts copied (agents
        often append to the list they passed in). Named one by one, not looked up by name: every replayed request
        is made this way (a test holds them to ``__struct_fields__``)."""
        return {
            "model": self.model,
            "messages": _copied(self.messages),
            "tools": _copied(self.tools),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "reasoning": self.reasoning,
            "extra": _copied(self.extra),
        }


def _copied(value: object) -> object:
    if isinstance(value, list):
        return list(value)
    return dict(value) if isinstance(value, dict) else value


class GenerateOptions(RequestFields, frozen=True, kw_only=True):
    """One request to an adapter. ``signal`` is runtime-only and never recorded."""

    signal: AbortSignal | None = None


class ReasoningOption(_Wire, frozen=True, kw_only=True):
    """One reasoning effort an adapter offers: an opaque id, a display name, whether it is the default."""

    id: str
    label: str = ""
    default: bool = False


# -- completed replies -------------------------------------------------------------------------


class Reply(_Wire, frozen=True, kw_only=True):
    """One completed generation, as ``LlmAdapter.complete()`` returns it: what the chunks of a stream add up to."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallBlock] = []
    usage: TokenUsage | None = None
    finish: FinishReason
    blocks: list[TextBlock | ReasoningBlock] = []
    """When the reasoning must go back as it came (Anthropic's signed or redacted thinking): the text and reasoning
    blocks as they ended, in stream order. Empty otherwise, so a reply of plain text compares as it always did."""
    reasoning_items: list[str] = []
    """The provider's ids of reasoning that came as items of its own (OpenAI Responses' ``rs_...``)."""

    def message(self) -> Message:
        """The assistant turn to append to the history, with the reasoning in the form its provider takes back:
        Anthropic's thinking as the signed or redacted blocks it sent (before the text and tool calls, as sent);
        plain reasoning (DeepSeek's) as ``reasoning_content``; reasoning its provider keeps as items of their own
        (OpenAI Responses, whose function calls run without it) not at all."""
        if self.blocks:
            return Message(
                role="assistant",
                content_parts=[_block_part(block) for block in self.blocks],
                tool_calls=list(self.tool_calls),
            )
        return Message(
            role="assistant",
            content=self.text or None,
            tool_calls=list(self.tool_calls),
            reasoning_content=(self.reasoning or None) if not self.reasoning_items else None,
        )


def _block_part(block: TextBlock | ReasoningBlock) -> dict[str, Any]:
    """A block as the content part Anthropic takes back."""
    if isinstance(block, TextBlock):
        part: dict[str, Any] = {"type": "text", "text": block.text}
        if block.citations:
            part["citations"] = block.citations
        return part
    if block.redacted is not None:
        return {"type": "redacted_thinking", "data": block.redacted}
    return {"type": "thinking", "thinking": block.text, "signature": block.signature or ""}


class ReplyBuilder:
    """The fold of a chunk stream into a ``Reply``, written once: ``feed`` each chunk, then ``reply()``.

    What the stream has said so far can be read at any time, also from a stream cut short or one that
    raised (``text``, ``reasoning``, ``tool_calls``, ``usage``, ``finish``): text and reasoning are their
    deltas joined, so a block cut mid-way still shows what came; tool calls are the complete blocks of their
    block-ends; usage and finish are the last ones seen. It does not validate the stream (``StreamValidator``
    does that); for a valid stream the deltas and the block-ends agree.
    """

    __slots__ = (
        "_blocks",
        "_finish",
        "_item_ids",
        "_reasoning",
        "_reasoning_items",
        "_text",
        "_tool_calls",
        "_usage",
        "chunks",
    )

    def __init__(self, chunks: Iterable[StreamChunk] = ()) -> None:
        """Start a fold, fed with ``chunks`` (e.g. a recorded interaction's) if given."""
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._tool_calls: list[ToolCallBlock] = []
        self._blocks: list[TextBlock | ReasoningBlock] = []
        self._item_ids: dict[int, str] = {}
        """The provider ids of the reasoning blocks open now, by index."""
        self._reasoning_items: list[str] = []
        self._usage: TokenUsage | None = None
        self._finish: FinishReason | None = None
        self.chunks = 0
        """How many chunks were fed."""
        for chunk in chunks:
            self.feed(chunk)

    def feed(self, chunk: StreamChunk) -> None:
        self.chunks += 1
        match chunk:
            case TextDelta():
                self._text.append(chunk.text)
            case ReasoningDelta():
                self._reasoning.append(chunk.text)
            case BlockStart(block_type="reasoning", id=str() as item_id):
                self._item_ids[chunk.index] = item_id
            case BlockEnd(block=ToolCallBlock() as block):
                self._tool_calls.append(block)
            case BlockEnd(block=TextBlock() | ReasoningBlock() as block):
                self._blocks.append(block)
                item_id = self._item_ids.pop(chunk.index, "")
                if item_id:
                    self._reasoning_items.append(item_id)
            case UsageChunk():
                self._usage = chunk.usage
            case Finish():
                self._finish = chunk.reason
            case _:
                pass

    @property
    def text(self) -> str:
        """The answer text so far."""
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        """The reasoning so far."""
        return "".join(self._reasoning)

    @property
    def tool_calls(self) -> list[ToolCallBlock]:
        """The tool calls completed so far, in stream order (a new list each time)."""
        return list(self._tool_calls)

    @property
    def blocks(self) -> list[TextBlock | ReasoningBlock]:
        """The text and reasoning blocks ended so far, in stream order, when a reasoning block among them must go
        back as it came (``Reply.blocks``); else empty (a new list each time)."""
        signed = any(
            isinstance(block, ReasoningBlock) and (block.signature is not None or block.redacted is not None)
            for block in self._blocks
        )
        return list(self._blocks) if signed else []

    @property
    def reasoning_items(self) -> list[str]:
        """The provider ids of the reasoning items ended so far (``Reply.reasoning_items``)."""
        return list(self._reasoning_items)

    @property
    def usage(self) -> TokenUsage | None:
        return self._usage

    @property
    def finish(self) -> FinishReason | None:
        """None until the finish chunk came."""
        return self._finish

    def reply(self) -> Reply:
        """The reply; raises ``STREAM_ABORTED`` when the stream ended without its finish chunk (cut off)."""
        if self._finish is None:
            raise LlmError(
                f"the stream ended after {self.chunks} chunk(s) without a finish chunk (cut off)",
                ErrorCode.STREAM_ABORTED,
            )
        return Reply(
            text=self.text,
            reasoning=self.reasoning,
            tool_calls=self.tool_calls,
            usage=self._usage,
            finish=self._finish,
            blocks=self.blocks,
            reasoning_items=self.reasoning_items,
        )

    @classmethod
    def fold(cls, chunks: Iterable[StreamChunk]) -> Reply:
        """The reply of a complete chunk sequence (e.g. a recorded interaction's chunks)."""
        return cls(chunks).reply()


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


def check_reasoning(adapter: LlmAdapter, options: GenerateOptions) -> None:
    """The service-side check before ``stream()``: an explicit reasoning effort must be one the adapter offers.

    Raises ``UNSUPPORTED_OPTION`` naming the offered ids; an adapter that offers none accepts none, and
    ``reasoning=None`` (the model's default) always passes.
    """
    if options.reasoning is None:
        return
    offered = [option.id for option in adapter.reasoning_options()]
    if options.reasoning not in offered:
        raise LlmError(
            f"reasoning effort {options.reasoning!r} is not offered (offered: {offered or 'none'})",
            ErrorCode.UNSUPPORTED_OPTION,
        )


class LlmAdapter(abc.ABC):
    """Streams one generation as StreamChunks. Implement ``stream`` as an async generator.

    An adapter must raise ``LlmError(UNSUPPORTED_OPTION)`` for options it cannot honour, end promptly
    when ``options.signal`` aborts, and release its resources when the generator is closed.
    """

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """A short label recorded in cassettes, e.g. ``deepseek`` or ``scripted``."""

    secrets: Sequence[str] = ()
    """Credentials this adapter uses; recorders make sure none of them reaches a cassette. Assign it
    (``self.secrets = [api_key]`` in ``__init__``) or override it with a property."""

    @abc.abstractmethod
    def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        """Yield the chunks of one generation (an async generator: callers ``aclose()`` it to stop early)."""

    async def complete(self, options: GenerateOptions) -> Reply:
        """One generation as a completed ``Reply``; by default the fold of ``stream(options)``, so it is one call.

        Override it for a provider's non-streaming endpoint. Because the default goes through ``stream()``,
        a ``RecordingAdapter`` records a ``complete()`` call as one interaction and a ``ReplayAdapter``
        answers it from one. Errors the stream raises propagate unchanged.
        """
        builder = ReplyBuilder()
        async with contextlib.aclosing(self.stream(options)) as stream:
            async for chunk in stream:
                builder.feed(chunk)
        return builder.reply()

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        """The reasoning efforts this adapter accepts, in order; empty means none are configurable."""
        return ()

    async def aclose(self) -> None:
        """Release connections and files. Safe to call twice."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class WrappingAdapter(LlmAdapter):
    """An adapter in front of another one (``inner``), as pydantic-ai's ``WrapperModel`` is: ``name``, ``secrets``
    and ``reasoning_options()`` are the inner adapter's, ``stream()`` passes through until a subclass overrides it.

    ``complete()`` is the inner adapter's own while ``stream()`` is not overridden; once it is, ``complete()`` is
    the fold of this adapter's ``stream()``, so what the override does (record, count) applies to it too. The
    wrapper does not own ``inner``: ``aclose()`` leaves it open, whoever built it closes it. Assigning
    ``secrets`` replaces the inner adapter's.
    """

    def __init__(self, inner: LlmAdapter) -> None:
        self.inner = inner
        self._assigned_secrets: Sequence[str] | None = None

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def secrets(self) -> Sequence[str]:
        return self.inner.secrets if self._assigned_secrets is None else self._assigned_secrets

    @secrets.setter
    def secrets(self, value: Sequence[str]) -> None:
        self._assigned_secrets = tuple(value)

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return self.inner.reasoning_options()

    def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        return self.inner.stream(options)

    async def complete(self, options: GenerateOptions) -> Reply:
        if type(self).stream is WrappingAdapter.stream:
            return await self.inner.complete(options)
        return await super().complete(options)
