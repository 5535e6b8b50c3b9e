"""The OpenAI-compatible wire format, written once: lossless SSE and chat-completion chunk JSON <-> StreamChunk.

Imports only ``protocol`` and ``errors``; the adapter, the replay server, ``render_sse`` and the vcrpy import
all sit above it.
"""

from chunktape.wire.http_errors import error_from_payload, http_error, parse_retry_after, retry_after_from_headers
from chunktape.wire.openai_chat import (
    REASONING_FIELDS,
    OpenAIChatDecoder,
    OpenAIChatEncoder,
    chunks_to_openai_dicts,
    chunks_to_openai_events,
    decode_openai_completion,
    decode_openai_sse,
    not_an_event_stream,
    options_from_openai_request,
    options_to_openai_request,
)
from chunktape.wire.sse import SseComment, SseEvent, SseItem, SseParser, parse_sse, write_sse

__all__ = [
    "OpenAIChatDecoder",
    "OpenAIChatEncoder",
    "REASONING_FIELDS",
    "SseComment",
    "SseEvent",
    "SseItem",
    "SseParser",
    "chunks_to_openai_dicts",
    "chunks_to_openai_events",
    "decode_openai_completion",
    "decode_openai_sse",
    "error_from_payload",
    "http_error",
    "not_an_event_stream",
    "options_from_openai_request",
    "options_to_openai_request",
    "parse_retry_after",
    "parse_sse",
    "retry_after_from_headers",
    "write_sse",
]
