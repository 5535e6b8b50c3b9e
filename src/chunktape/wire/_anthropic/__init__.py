"""Anthropic Messages on the wire (``POST /v1/messages``), written once: a decoder, an encoder and a request codec.

``decoder`` (event stream -> StreamChunk), ``encoder`` (StreamChunk -> event stream) and ``requests``
(``GenerateOptions`` <-> request body) share the stop reasons, usage and error types in ``fields``.
"""

from chunktape.wire._anthropic.decoder import (
    AnthropicDecoder,
    decode_anthropic_message,
    decode_anthropic_sse,
    error_from_anthropic,
)
from chunktape.wire._anthropic.encoder import (
    MALFORMED_EVENT,
    AnthropicEncoder,
    chunks_to_anthropic_events,
    error_event,
    event_bytes,
    message_from_chunks,
)
from chunktape.wire._anthropic.fields import (
    ERROR_STATUS,
    PROTOCOL,
    STOP_REASONS,
    error_type,
    finish_from_wire,
    finish_to_wire,
    usage_from_wire,
    usage_to_wire,
)
from chunktape.wire._anthropic.requests import (
    ANTHROPIC_BASE_URL,
    ANTHROPIC_VERSION,
    decode_messages_request,
    options_from_anthropic_request,
    options_to_anthropic_request,
    thinking_fields,
)

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_VERSION",
    "AnthropicDecoder",
    "AnthropicEncoder",
    "ERROR_STATUS",
    "MALFORMED_EVENT",
    "PROTOCOL",
    "STOP_REASONS",
    "chunks_to_anthropic_events",
    "decode_anthropic_message",
    "decode_anthropic_sse",
    "decode_messages_request",
    "error_event",
    "error_from_anthropic",
    "error_type",
    "event_bytes",
    "finish_from_wire",
    "finish_to_wire",
    "message_from_chunks",
    "options_from_anthropic_request",
    "options_to_anthropic_request",
    "thinking_fields",
    "usage_from_wire",
    "usage_to_wire",
]
