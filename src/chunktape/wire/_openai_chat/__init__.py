"""OpenAI chat completions on the wire, written once: a decoder, an encoder and a request codec.

``decoder`` (SSE / chunk JSON -> StreamChunk), ``encoder`` (StreamChunk -> chunk JSON / SSE events) and
``requests`` (``GenerateOptions`` <-> request body) share the finish and usage mapping in ``_fields``. Every
protocol the wire layer speaks has this shape; this package re-exports all three, so callers import from here.
"""

from chunktape.wire._http_errors import error_from_payload, not_an_event_stream
from chunktape.wire._openai_chat.decoder import (
    ChatChunk,
    OpenAIChatDecoder,
    decode_chat_chunk,
    decode_openai_completion,
    decode_openai_sse,
)
from chunktape.wire._openai_chat.encoder import (
    DONE_EVENT,
    MALFORMED_EVENT,
    OpenAIChatEncoder,
    chunks_to_openai_dicts,
    chunks_to_openai_events,
    data_event,
)
from chunktape.wire._openai_chat.fields import (
    DONE,
    finish_from_wire,
    finish_to_wire,
    tool_call_to_wire,
    usage_from_wire,
    usage_to_wire,
)
from chunktape.wire._openai_chat.requests import (
    DEEPSEEK_BASE_URL,
    DEEPSEEK_REASONING,
    MAX_NESTING,
    OPENAI_REASONING,
    REASONING_FIELDS,
    decode_chat_request,
    message_from_openai,
    message_to_openai,
    options_from_openai_request,
    options_to_openai_request,
)

__all__ = [
    "MAX_NESTING",
    "ChatChunk",
    "DEEPSEEK_BASE_URL",
    "DEEPSEEK_REASONING",
    "DONE",
    "DONE_EVENT",
    "MALFORMED_EVENT",
    "OPENAI_REASONING",
    "OpenAIChatDecoder",
    "OpenAIChatEncoder",
    "REASONING_FIELDS",
    "chunks_to_openai_dicts",
    "chunks_to_openai_events",
    "data_event",
    "decode_chat_chunk",
    "decode_chat_request",
    "decode_openai_completion",
    "decode_openai_sse",
    "error_from_payload",
    "finish_from_wire",
    "finish_to_wire",
    "message_from_openai",
    "message_to_openai",
    "not_an_event_stream",
    "options_from_openai_request",
    "options_to_openai_request",
    "tool_call_to_wire",
    "usage_from_wire",
    "usage_to_wire",
]
