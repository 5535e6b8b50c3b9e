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
from typing import Any
from urllib.parse import urlsplit

import msgspec

from chunktape._cassettes.response import ResponseObserver, response_sink
from chunktape._errors import ErrorCode, LlmError
from chunktape._httpx import AnyResponse
from chunktape._protocol import GenerateOptions
from chunktape.providers._streaming import Efforts, StreamingAdapter
from chunktape.wire._openai_chat import (
    DEEPSEEK_BASE_URL,
    DEEPSEEK_REASONING,
    OPENAI_REASONING,
    OpenAIChatDecoder,
    options_to_openai_request,
)

__all__ = ["DEEPSEEK_BASE_URL", "DEEPSEEK_REASONING", "OPENAI_REASONING", "OpenAICompatAdapter"]


class OpenAICompatAdapter(StreamingAdapter):
    """Streams ``POST {base_url}/chat/completions`` as StreamChunks.

    ``api_key`` defaults to ``$DEEPSEEK_API_KEY``; ``model`` is used when ``options.model`` is empty.
    ``reasoning`` maps each offered effort id to the request fields it adds (default: DeepSeek's thinking
    switch for api.deepseek.com, else ``reasoning_effort`` low/medium/high). Pass ``client`` (an
    ``httpx2.AsyncClient``, or an ``httpx.AsyncClient``) to share a connection pool or plug in a transport
    (``FaultTransport``); the adapter then never closes it. Without one it builds an ``httpx2.AsyncClient``.
    """

    default_base_url = DEEPSEEK_BASE_URL
    api_key_variable = "DEEPSEEK_API_KEY"
    default_name = "openai-compat"
    route = "/chat/completions"
    streams = "chat completions"

    def _host(self) -> str:
        return urlsplit(self.base_url).hostname or ""

    def _name_by_default(self) -> str:
        host = self._host()
        return "deepseek" if host.endswith("deepseek.com") else host or self.default_name

    def _reasoning_by_default(self) -> Efforts:
        return DEEPSEEK_REASONING if self._host().endswith("deepseek.com") else OPENAI_REASONING

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

    def _refuse(self, options: GenerateOptions) -> None:
        if options.extra.get("n", 1) != 1:
            raise LlmError("only one choice (n=1) can be streamed as chunks", ErrorCode.UNSUPPORTED_OPTION)

    def request_body(self, options: GenerateOptions, model: str, extra_fields: dict[str, Any]) -> dict[str, Any]:
        return options_to_openai_request(options, model=model, extra_fields=extra_fields)


_json = msgspec.json.Decoder()
