"""OpenAI Responses on the wire (``POST /v1/responses``), written once: a decoder, an encoder and a request codec.

``decoder`` (event stream -> StreamChunk), ``encoder`` (StreamChunk -> event stream) and ``requests``
(``GenerateOptions`` <-> request body) share the usage, terminal statuses and error codes in ``fields``.
"""

from chunktape.wire._responses.decoder import (
    ResponsesDecoder,
    decode_responses_response,
    decode_responses_sse,
    error_from_responses,
)
from chunktape.wire._responses.encoder import (
    MALFORMED_EVENT,
    ResponsesEncoder,
    chunks_to_responses_events,
    response_from_chunks,
)
from chunktape.wire._responses.fields import ERROR_STATUS, PROTOCOL, finish_from_wire, finish_to_wire
from chunktape.wire._responses.requests import (
    OPENAI_BASE_URL,
    RESPONSES_REASONING,
    decode_responses_request,
    options_from_responses_request,
    options_to_responses_request,
)

__all__ = [
    "ERROR_STATUS",
    "MALFORMED_EVENT",
    "OPENAI_BASE_URL",
    "PROTOCOL",
    "RESPONSES_REASONING",
    "ResponsesDecoder",
    "ResponsesEncoder",
    "chunks_to_responses_events",
    "decode_responses_request",
    "decode_responses_response",
    "decode_responses_sse",
    "error_from_responses",
    "finish_from_wire",
    "finish_to_wire",
    "options_from_responses_request",
    "options_to_responses_request",
    "response_from_chunks",
]
