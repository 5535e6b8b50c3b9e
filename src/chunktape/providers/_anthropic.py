"""``AnthropicAdapter``: the Anthropic Messages API (``POST {base_url}/v1/messages``, streamed) on httpx2.

It sends ``x-api-key`` and ``anthropic-version`` with ``attribution_headers()``; reasoning efforts are extended
thinking budgets as opaque ids (``thinking-1024``... from ``reasoning_options()``, and ``no-thinking``); tool calls
are ``tool_use`` blocks and tool results ``tool_result`` blocks. HTTP 529 and an in-stream ``overloaded_error`` are
``PROVIDER_HTTP_ERROR`` with status 529, which is recoverable; the other errors map as every adapter's do
(``chunktape.providers._streaming``). What the API cannot take raises ``UNSUPPORTED_OPTION``: a reasoning effort it
does not offer, a non-streamed request, a message ``name``, an assistant turn's ``reasoning_content`` (Anthropic
takes a thinking block back only with its signature: send such a turn as ``content_parts``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import AnyAsyncClient
from chunktape._protocol import GenerateOptions, ReasoningOption, attribution_headers
from chunktape.providers._streaming import StreamingAdapter
from chunktape.wire._anthropic import (
    ANTHROPIC_BASE_URL,
    ANTHROPIC_VERSION,
    AnthropicDecoder,
    options_to_anthropic_request,
    thinking_fields,
)

__all__ = ["AnthropicAdapter"]

_BUDGETS = (1024, 4096, 16384)


class AnthropicAdapter(StreamingAdapter):
    """Streams Anthropic Messages as StreamChunks. ``api_key`` defaults to ``$ANTHROPIC_API_KEY``; ``model`` is used
    when ``options.model`` is empty; ``max_tokens`` when ``options.max_tokens`` is (the API requires one).
    ``thinking_budgets`` are the extended-thinking budgets offered as reasoning ids ``thinking-<budget>``."""

    route = "/v1/messages"
    streams = "Anthropic messages"

    def __init__(
        self,
        base_url: str = ANTHROPIC_BASE_URL,
        api_key: str | None = None,
        model: str | None = None,
        *,
        client: AnyAsyncClient | None = None,
        timeout: float = 60.0,
        idle_timeout: float | None = 120.0,
        max_tokens: int = 4096,
        thinking_budgets: Sequence[int] = _BUDGETS,
        version: str = ANTHROPIC_VERSION,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.api_key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        self.secrets = (self.api_key,) if self.api_key else ()
        self.model = model
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        self.max_tokens = max_tokens
        self.version = version
        self._efforts = [f"thinking-{budget}" for budget in thinking_budgets] + ["no-thinking"]
        self._headers = dict(headers or {})
        self._name = name or "anthropic"
        self._client = client
        self._owns_client = client is None

    @property
    def name(self) -> str:
        return self._name

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return tuple(ReasoningOption(id=effort, label=effort.replace("-", " ")) for effort in self._efforts)

    def new_decoder(self) -> AnthropicDecoder:
        return AnthropicDecoder()

    def build_request_body(self, options: GenerateOptions) -> dict[str, Any]:
        extra_fields: dict[str, Any] = {}
        if options.reasoning is not None:
            fields = thinking_fields(options.reasoning) if options.reasoning in self._efforts else None
            if fields is None:
                raise LlmError(
                    f"reasoning effort {options.reasoning!r} is not offered by {self.name} (offered: {self._efforts})",
                    ErrorCode.UNSUPPORTED_OPTION,
                )
            extra_fields = fields
        if options.extra.get("stream", True) is not True:
            raise LlmError("this adapter only streams; remove extra['stream']", ErrorCode.UNSUPPORTED_OPTION)
        for message in options.messages:
            if message.name is not None:
                raise LlmError("Anthropic messages have no `name`", ErrorCode.UNSUPPORTED_OPTION)
            if message.role == "assistant" and message.reasoning_content:
                raise LlmError(
                    "Anthropic takes thinking back only as a thinking block with its signature: send this assistant "
                    "turn as content_parts (the blocks as the provider sent them) instead of reasoning_content",
                    ErrorCode.UNSUPPORTED_OPTION,
                )
        model = options.model or self.model
        if not model:
            raise LlmError("no model: set options.model or the adapter's model", ErrorCode.UNSUPPORTED_OPTION)
        return options_to_anthropic_request(options, model=model, max_tokens=self.max_tokens, extra_fields=extra_fields)

    def _headers_for_request(self) -> dict[str, str]:
        headers = {**attribution_headers(), **self._headers, "Accept": "text/event-stream"}
        headers["anthropic-version"] = self.version
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return headers
