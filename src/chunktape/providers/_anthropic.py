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

from collections.abc import Sequence
from typing import Any, Unpack

from chunktape._protocol import GenerateOptions, ReasoningOption
from chunktape.providers._streaming import AdapterSettings, StreamingAdapter
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

    default_base_url = ANTHROPIC_BASE_URL
    api_key_variable = "ANTHROPIC_API_KEY"
    default_name = "anthropic"
    route = "/v1/messages"
    streams = "Anthropic messages"
    no_name = "Anthropic messages have no `name`"
    no_reasoning_content = (
        "Anthropic takes thinking back only as a thinking block with its signature: send this assistant "
        "turn as content_parts (the blocks as the provider sent them) instead of reasoning_content"
    )

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        *,
        max_tokens: int = 4096,
        thinking_budgets: Sequence[int] = _BUDGETS,
        version: str = ANTHROPIC_VERSION,
        **settings: Unpack[AdapterSettings],
    ) -> None:
        efforts = [f"thinking-{budget}" for budget in thinking_budgets] + ["no-thinking"]
        reasoning = {effort: fields for effort in efforts if (fields := thinking_fields(effort)) is not None}
        super().__init__(base_url, api_key, model, reasoning=reasoning, **settings)
        self.base_url = self.base_url.removesuffix("/v1")  # the route has it
        self.max_tokens = max_tokens
        self.version = version

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return tuple(ReasoningOption(id=effort, label=effort.replace("-", " ")) for effort in self._reasoning)

    def new_decoder(self) -> AnthropicDecoder:
        return AnthropicDecoder()

    def request_body(self, options: GenerateOptions, model: str, extra_fields: dict[str, Any]) -> dict[str, Any]:
        return options_to_anthropic_request(options, model=model, max_tokens=self.max_tokens, extra_fields=extra_fields)

    def _credentials(self) -> dict[str, str]:
        return {"anthropic-version": self.version, **({"x-api-key": self.api_key} if self.api_key else {})}
