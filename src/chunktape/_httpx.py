"""httpx2 and httpx side by side.

chunktape's own HTTP runs on httpx2 (what openai 3.x, anthropic and starlette use); wherever a user hands
chunktape a client or a transport, an httpx one works too. The two libraries share an API but not their
classes, so an ``except`` or an ``isinstance`` that must hold for both uses the pairs below.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, TypeAlias

import httpx
import httpx2

__all__ = [
    "CONNECT_ERRORS",
    "DECODING_ERRORS",
    "HTTP_ERRORS",
    "TIMEOUT_ERRORS",
    "AnyAsyncClient",
    "AnyResponse",
    "new_async_client",
    "post_streaming",
]

AnyAsyncClient: TypeAlias = httpx2.AsyncClient | httpx.AsyncClient
AnyResponse: TypeAlias = httpx2.Response | httpx.Response

DECODING_ERRORS = (httpx2.DecodingError, httpx.DecodingError)
TIMEOUT_ERRORS = (httpx2.TimeoutException, httpx.TimeoutException)
CONNECT_ERRORS = (httpx2.ConnectError, httpx.ConnectError)
HTTP_ERRORS = (httpx2.HTTPError, httpx.HTTPError)


def new_async_client(timeout: float) -> httpx2.AsyncClient:
    """The client chunktape builds when the user gave none."""
    return httpx2.AsyncClient(timeout=httpx2.Timeout(timeout))


def post_streaming(client: AnyAsyncClient, url: str, body: Any, headers: Mapping[str, str]) -> Awaitable[AnyResponse]:
    """Send a JSON POST whose response body is read as it arrives, with either kind of client."""
    if isinstance(client, httpx2.AsyncClient):
        return client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)
    return client.send(client.build_request("POST", url, json=body, headers=headers), stream=True)
