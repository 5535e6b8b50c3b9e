"""chunktape: record and replay LLM adapter streams, chunk by chunk, with timing and faults."""

import logging as _logging
import typing as _typing

from chunktape._errors import Advice, ErrorCode, LlmError, ProtocolViolation
from chunktape._lazy import lazy_names as _lazy_names
from chunktape._version import __version__

# Loaded on first use (``__getattr__``), so ``chunktape --version`` loads neither msgspec and asyncio (the protocol)
# nor the cassette codec.
if _typing.TYPE_CHECKING:
    from chunktape._cassettes import (
        DEFAULT_MATCH,
        FORMAT_VERSION,
        Cancelled,
        Cassette,
        CassetteMeta,
        Completed,
        Event,
        Interaction,
        Matcher,
        Outcome,
        Raised,
        RecordedRequest,
        load_cassette,
        open_cassette,
        recover,
        redact,
        save_cassette,
    )
    from chunktape._protocol import (
        PROTOCOL,
        AbortController,
        AbortSignal,
        Block,
        BlockEnd,
        BlockStart,
        BlockType,
        CallId,
        Finish,
        FinishKind,
        FinishReason,
        GenerateOptions,
        LlmAdapter,
        Message,
        ProviderEvent,
        ReasoningBlock,
        ReasoningDelta,
        ReasoningOption,
        Reply,
        ReplyBuilder,
        Role,
        ServerToolCallBlock,
        ServerToolResultBlock,
        StreamChunk,
        TextBlock,
        TextDelta,
        TokenUsage,
        ToolCallBlock,
        ToolCallDelta,
        ToolSpec,
        UsageChunk,
        WrappingAdapter,
        attribution_headers,
        check_reasoning,
    )
    from chunktape._recorder import RecordingAdapter, StreamViolationWarning
    from chunktape._replayer import ReplayAdapter, Timing
    from chunktape._replayer.options import ReplayOptions
    from chunktape._session.modes import RecordMode, SessionCall
    from chunktape._session.session import CassetteSession, use_cassette
    from chunktape._validation import StreamValidator, validate

# The modules behind the lazily loaded names, each with its own ``__all__``; a name loads the first that lists it.
_LAZY_HOMES = (
    "chunktape._protocol",
    "chunktape._validation",
    "chunktape._replayer.options",
    "chunktape._cassettes",
    "chunktape._recorder",
    "chunktape._replayer",
    "chunktape._session.modes",
    "chunktape._session.session",
)

# A library logs, it does not print: without this, WARNINGs reach stderr through logging.lastResort.
_logging.getLogger("chunktape").addHandler(_logging.NullHandler())

__all__ = [
    "AbortController",
    "AbortSignal",
    "Advice",
    "Block",
    "BlockEnd",
    "BlockStart",
    "BlockType",
    "CallId",
    "Cancelled",
    "Cassette",
    "CassetteMeta",
    "CassetteSession",
    "Completed",
    "DEFAULT_MATCH",
    "ErrorCode",
    "Event",
    "FORMAT_VERSION",
    "Finish",
    "FinishKind",
    "FinishReason",
    "GenerateOptions",
    "Interaction",
    "LlmAdapter",
    "LlmError",
    "Matcher",
    "Message",
    "Outcome",
    "PROTOCOL",
    "ProtocolViolation",
    "ProviderEvent",
    "Raised",
    "ReasoningBlock",
    "ReasoningDelta",
    "ReasoningOption",
    "RecordMode",
    "RecordedRequest",
    "RecordingAdapter",
    "ReplayAdapter",
    "ReplayOptions",
    "Reply",
    "ReplyBuilder",
    "Role",
    "ServerToolCallBlock",
    "ServerToolResultBlock",
    "SessionCall",
    "StreamChunk",
    "StreamValidator",
    "StreamViolationWarning",
    "TextBlock",
    "TextDelta",
    "Timing",
    "TokenUsage",
    "ToolCallBlock",
    "ToolCallDelta",
    "ToolSpec",
    "UsageChunk",
    "WrappingAdapter",
    "__version__",
    "attribution_headers",
    "check_reasoning",
    "load_cassette",
    "open_cassette",
    "recover",
    "redact",
    "save_cassette",
    "use_cassette",
    "validate",
]


if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and no __getattr__ hiding typos
    __getattr__, __dir__ = _lazy_names(__name__, __all__, _LAZY_HOMES)
