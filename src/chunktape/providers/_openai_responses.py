"""``OpenAIResponsesAdapter``: the OpenAI Responses API (``POST {base_url}/responses``, streamed) on httpx2.

Messages are sent as input items (tool calls as ``function_call`` items, tool results as ``function_call_output``),
reasoning efforts as ``reasoning.effort`` (``reasoning_options()``: minimal, low, medium, high by default); a
``response.failed`` or an ``error`` event mid-stream raises the ``LlmError`` its code means. What the API cannot take
raises ``UNSUPPORTED_OPTION``: an effort it does not offer, a non-streamed request, a message ``name``, an assistant
turn's ``reasoning_content`` (a reasoning item goes back whole, by id: send it as ``extra={"item": {...}}``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import AnyAsyncClient
from chunktape._protocol import GenerateOptions, ReasoningOption, attribution_headers
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

    route = "/responses"
    streams = "OpenAI responses"

    def __init__(
        self,
        base_url: str = OPENAI_BASE_URL,
        api_key: str | None = None,
        model: str | None = None,
        *,
        client: AnyAsyncClient | None = None,
        timeout: float = 60.0,
        idle_timeout: float | None = 120.0,
        reasoning: Mapping[str, Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.secrets = (self.api_key,) if self.api_key else ()
        self.model = model
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self._reasoning = dict(RESPONSES_REASONING if reasoning is None else reasoning)
        self._headers = dict(headers or {})
        self._name = name or "openai-responses"
        self._client = client
        self._owns_client = client is None

    @property
    def name(self) -> str:
        return self._name

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return tuple(ReasoningOption(id=effort, label=effort) for effort in self._reasoning)

    def new_decoder(self) -> ResponsesDecoder:
        return ResponsesDecoder()

    def build_request_body(self, options: GenerateOptions) -> dict[str, Any]:
        extra_fields: Mapping[str, Any] = {}
        if options.reasoning is not None:
            if options.reasoning not in self._reasoning:
                offered = sorted(self._reasoning) or "none"
                raise LlmError(
                    f"reasoning effort {options.reasoning!r} is not offered by {self.name} (offered: {offered})",
                    ErrorCode.UNSUPPORTED_OPTION,
                )
            extra_fields = self._reasoning[options.reasoning]
        if options.extra.get("stream", True) is not True:
            raise LlmError("this adapter only streams; remove extra['stream']", ErrorCode.UNSUPPORTED_OPTION)
        for message in options.messages:
            if message.name is not None:
                raise LlmError("Responses input items have no `name`", ErrorCode.UNSUPPORTED_OPTION)
            if message.role == "assistant" and message.reasoning_content:
                raise LlmError(
                    "the Responses API takes reasoning back only as its reasoning item (by id): send it as "
                    "Message(role='assistant', extra={'item': {...}}) instead of reasoning_content",
                    ErrorCode.UNSUPPORTED_OPTION,
                )
        model = options.model or self.model
        if not model:
            raise LlmError("no model: set options.model or the adapter's model", ErrorCode.UNSUPPORTED_OPTION)
        return options_to_responses_request(options, model=model, extra_fields=dict(extra_fields))

    def _headers_for_request(self) -> dict[str, str]:
        headers = {**attribution_headers(), **self._headers, "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers
