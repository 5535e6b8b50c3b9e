"""``OpenAIResponsesAdapter``: the OpenAI Responses API (``POST {base_url}/responses``, streamed) on httpx2.

Messages are sent as input items (tool calls as ``function_call`` items, tool results as ``function_call_output``),
reasoning efforts as ``reasoning.effort`` (``reasoning_options()``: minimal, low, medium, high by default); a
``response.failed`` or an ``error`` event mid-stream raises the ``LlmError`` its code means. What the API cannot take
raises ``UNSUPPORTED_OPTION``: an effort it does not offer, a non-streamed request, a message ``name``, an assistant
turn's ``reasoning_content`` (a reasoning item goes back whole, by id: send it as ``extra={"item": {...}}``).
"""

from __future__ import annotations

from typing import Any

from chunktape._protocol import GenerateOptions
from chunktape.providers._streaming import StreamingAdapter
from chunktape.wire._responses import (
    OPENAI_BASE_URL,
    RESPONSES_REASONING,
    ResponsesDecoder,
    options_to_responses_request,
)

__all__ = ["OpenAIResponsesAdapter"]


class OpenAIResponsesAdapter(StreamingAdapter):
    """Streams OpenAI Responses as StreamChunks. ``api_key`` defaults to ``$OPENAI_API_KEY``; ``reasoning`` maps each
    offered effort id to the request fields it adds."""

    default_base_url = OPENAI_BASE_URL
    api_key_variable = "OPENAI_API_KEY"
    default_name = "openai-responses"
    default_reasoning = RESPONSES_REASONING
    route = "/responses"
    streams = "OpenAI responses"
    no_name = "Responses input items have no `name`"
    no_reasoning_content = (
        "the Responses API takes reasoning back only as its reasoning item (by id): send it as "
        "Message(role='assistant', extra={'item': {...}}) instead of reasoning_content"
    )

    def new_decoder(self) -> ResponsesDecoder:
        return ResponsesDecoder()

    def request_body(self, options: GenerateOptions, model: str, extra_fields: dict[str, Any]) -> dict[str, Any]:
        return options_to_responses_request(options, model=model, extra_fields=extra_fields)
