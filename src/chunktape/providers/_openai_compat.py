"""A real provider adapter for OpenAI-compatible ``/chat/completions`` streaming, on httpx2; DeepSeek by default.

Error mapping (every failure is an ``LlmError``):

- non-2xx -> ``PROVIDER_HTTP_ERROR`` with ``status``, ``retry_after`` (``Retry-After`` seconds or HTTP-date,
  or ``retry-after-ms``) and the provider's message from the JSON body, whatever its content type;
- connect failures (``could not connect to <url>``) and a connection breaking mid-body -> ``STREAM_ABORTED``;
- a 2xx body with no SSE in it at all (an HTML page, a proxy's login form) -> ``INVALID_RESPONSE`` with the
  content type and a snippet;
- no response within ``timeout``, or no *data* event within ``idle_timeout`` (keep-alive comments do not
  count; nor does the time the consumer takes between chunks: that is not the provider's silence) -> ``TIMEOUT``;
- unparseable data -> ``INVALID_RESPONSE``; in-band error objects and ``event: error`` -> see
  ``chunktape.wire._openai_chat`` (``PROVIDER_HTTP_ERROR`` if they carry a status, else ``STREAM_ABORTED``);
- the abort signal -> ``CANCELLED``, with the HTTP response closed at once.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import msgspec

from chunktape._cassettes.response import ResponseObserver, response_sink
from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import AnyAsyncClient, AnyResponse
from chunktape._protocol import (
    GenerateOptions,
    ReasoningOption,
    attribution_headers,
)
from chunktape.providers._streaming import StreamingAdapter
from chunktape.wire._openai_chat import (
    DEEPSEEK_BASE_URL,
    DEEPSEEK_REASONING,
    OPENAI_REASONING,
    OpenAIChatDecoder,
    options_to_openai_request,
)

__all__ = ["DEEPSEEK_BASE_URL", "DEEPSEEK_REASONING", "OPENAI_REASONING", "OpenAICompatAdapter"]

_MAX_ERROR_BODY = 64 * 1024


class OpenAICompatAdapter(StreamingAdapter):
    """Streams ``POST {base_url}/chat/completions`` as StreamChunks.

    ``api_key`` defaults to ``$DEEPSEEK_API_KEY``; ``model`` is used when ``options.model`` is empty.
    ``reasoning`` maps each offered effort id to the request fields it adds (default: DeepSeek's thinking
    switch for api.deepseek.com, else ``reasoning_effort`` low/medium/high). Pass ``client`` (an
    ``httpx2.AsyncClient``, or an ``httpx.AsyncClient``) to share a connection pool or plug in a transport
    (``FaultTransport``); the adapter then never closes it. Without one it builds an ``httpx2.AsyncClient``.
    """

    def __init__(
        self,
        base_url: str = DEEPSEEK_BASE_URL,
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
        self.api_key = api_key if api_key is not None else os.environ.get("DEEPSEEK_API_KEY")
        self.secrets = (self.api_key,) if self.api_key else ()
        self.model = model
        self.timeout = timeout
        self.idle_timeout = idle_timeout
        host = urlsplit(self.base_url).hostname or ""
        if reasoning is None:
            reasoning = DEEPSEEK_REASONING if host.endswith("deepseek.com") else OPENAI_REASONING
        self._reasoning = dict(reasoning)
        self._headers = dict(headers or {})
        self._name = name or ("deepseek" if host.endswith("deepseek.com") else host or "openai-compat")
        self._client = client
        self._owns_client = client is None

    route = "/chat/completions"
    streams = "chat completions"

    def observer_for(self, response: AnyResponse) -> ResponseObserver | None:
        """While a recorder records this stream (its sink is set), what keeps the answer's metadata and extras."""
        sink = response_sink().get()
        if sink is None:
            return None
        streamed = response.headers.get("content-type", "").startswith("text/event-stream")
        observer = sink.observer = ResponseObserver(response.headers.multi_items(), streamed=streamed)
        return observer

    def observe(self, observer: ResponseObserver, data: str) -> None:
        with contextlib.suppress(msgspec.DecodeError):  # what does not decode, the decoder has reported
            observer.event(_json.decode(data))

    def new_decoder(self) -> OpenAIChatDecoder:
        return OpenAIChatDecoder()

    @property
    def name(self) -> str:
        return self._name

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return tuple(ReasoningOption(id=effort, label=effort) for effort in self._reasoning)

    def build_request_body(self, options: GenerateOptions) -> dict[str, Any]:
        """The JSON body this adapter would send; raises ``UNSUPPORTED_OPTION`` for what it cannot send."""
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
        if options.extra.get("n", 1) != 1:
            raise LlmError("only one choice (n=1) can be streamed as chunks", ErrorCode.UNSUPPORTED_OPTION)
        model = options.model or self.model
        if not model:
            raise LlmError("no model: set options.model or the adapter's model", ErrorCode.UNSUPPORTED_OPTION)
        return options_to_openai_request(options, model=model, extra_fields=dict(extra_fields))

    def _headers_for_request(self) -> dict[str, str]:
        headers = {**attribution_headers(), **self._headers, "Accept": "text/event-stream"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


_json = msgspec.json.Decoder()
