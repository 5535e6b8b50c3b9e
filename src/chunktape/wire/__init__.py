"""The wire formats, written once: lossless SSE, provider errors, and each protocol <-> StreamChunk.

``sse`` and ``http_errors`` are protocol-neutral, and so is what the protocols' codecs share: ``decoding`` (the
stream decoders' rules), ``encoding`` (the event-stream encoders') and ``requests`` (the request codecs'). Each
protocol is a package of a decoder, an encoder and a request codec: ``openai_chat`` (OpenAI chat completions),
``anthropic`` (Anthropic Messages), ``responses`` (OpenAI Responses). Imports only ``protocol`` and ``errors``; the
adapter, the replay server, ``render_sse`` and the vcrpy import all sit above it.
"""

from chunktape.wire._anthropic import (
    AnthropicDecoder,
    AnthropicEncoder,
    chunks_to_anthropic_events,
    decode_anthropic_message,
    decode_anthropic_sse,
    decode_messages_request,
    message_from_chunks,
    options_from_anthropic_request,
    options_to_anthropic_request,
)
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
from chunktape.wire._responses import (
    ResponsesDecoder,
    ResponsesEncoder,
    chunks_to_responses_events,
    decode_responses_request,
    decode_responses_response,
    decode_responses_sse,
    options_from_responses_request,
    options_to_responses_request,
    response_from_chunks,
)
from chunktape.wire._sse import SseComment, SseEvent, SseItem, SseParser, parse_sse, write_sse

__all__ = [
    "AnthropicDecoder",
    "AnthropicEncoder",
    "OpenAIChatDecoder",
    "OpenAIChatEncoder",
    "REASONING_FIELDS",
    "ResponsesDecoder",
    "ResponsesEncoder",
    "SseComment",
    "SseEvent",
    "SseItem",
    "SseParser",
    "chunks_to_anthropic_events",
    "chunks_to_openai_dicts",
    "chunks_to_openai_events",
    "chunks_to_responses_events",
    "decode_anthropic_message",
    "decode_anthropic_sse",
    "decode_messages_request",
    "decode_openai_completion",
    "decode_openai_sse",
    "decode_responses_request",
    "decode_responses_response",
    "decode_responses_sse",
    "error_from_payload",
    "http_error",
    "message_from_chunks",
    "not_an_event_stream",
    "options_from_anthropic_request",
    "options_from_openai_request",
    "options_from_responses_request",
    "options_to_anthropic_request",
    "options_to_openai_request",
    "options_to_responses_request",
    "parse_retry_after",
    "parse_sse",
    "response_from_chunks",
    "retry_after_from_headers",
    "write_sse",
]
