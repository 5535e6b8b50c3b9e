"""The wire formats, written once: lossless SSE, provider errors, and each protocol <-> StreamChunk.

``sse`` and ``http_errors`` are protocol-neutral. Each protocol is a package of a decoder, an encoder and a
request codec (``openai_chat``: OpenAI chat completions). Imports only ``protocol`` and ``errors``; the
adapter, the replay server, ``render_sse`` and the vcrpy import all sit above it.
"""

from chunktape.wire._http_errors import (
    error_from_payload,
    http_error,
    not_an_event_stream,
    parse_retry_after,
    retry_after_from_headers,
)
from chunktape.wire._openai_chat import (
    REASONING_FIELDS,
    OpenAIChatDecoder,
    OpenAIChatEncoder,
    chunks_to_openai_dicts,
    chunks_to_openai_events,
    decode_openai_completion,
    decode_openai_sse,
    options_from_openai_request,
    options_to_openai_request,
)
from chunktape.wire._sse import SseComment, SseEvent, SseItem, SseParser, parse_sse, write_sse

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
