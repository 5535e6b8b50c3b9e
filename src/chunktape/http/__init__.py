"""The HTTP layer: faults on httpx2/httpx traffic, a loopback OpenAI-compatible replay server, and the vcrpy bridge.

- ``FaultTransport(inner, faults)``: an async transport (httpx2 or httpx, wrapping one of the same library)
  that applies the fault catalogue to HTTP responses, for testing HTTP adapters and SDKs.
- ``render_sse(interaction)``: a recorded interaction as an OpenAI-compatible SSE body.
- ``ReplayServer`` (tests: ``with``/``async with``, ``.url``) and ``serve`` (foreground, until Ctrl-C): replay
  cassettes and fault scenarios over HTTP on 127.0.0.1 (routes in ``chunktape.http._server.app``); ``ServerLimits``
  bounds what a client may send (body size, read deadlines).
- ``vcr_config()`` / ``import_vcr(path)``: safe vcrpy settings, and vcrpy cassettes as chunk cassettes.
- ``RecordingTransport(inner, cassette)`` / ``ReplayTransport(cassette, ...)``: record an SDK's chat completions
  into a chunk cassette with per-event timing and response metadata, and answer them in process, no socket,
  with every fault. One object serves httpx2 and httpx clients, sync and async.
- ``RecordingProxy(upstream, cassette)`` (``chunktape proxy``): a loopback proxy that records an agent in any
  language into a chunk cassette (tests: ``with``, ``.url``).

**The openai SDK.** openai 3.x is built on ``httpx2`` (a fork of httpx), and its clients also accept a plain
``httpx.AsyncClient`` as ``http_client`` (a supported, runtime-checked path; only the type annotation says
httpx2) and map httpx's exceptions like their own. So every route works, without patching anything::

    # faults client-side, against any server (a fake provider, the replay server, ...)
    client = httpx2.AsyncClient(transport=FaultTransport(httpx2.AsyncHTTPTransport(), ["http-429"]))
    sdk = openai.AsyncOpenAI(base_url=..., api_key="test", http_client=client)

    # faults server-side, for an SDK or client in any language
    with ReplayServer("agent.msgpack", faults=["http-429"]) as server:
        sdk = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="test", max_retries=0)

An injected 429 surfaces as ``openai.RateLimitError`` (``Retry-After`` and ``retry-after-ms`` headers set);
a reset mid-body as ``openai.APIConnectionError``. Pass ``max_retries=0`` unless the SDK's retries are the
subject of the test.
"""

import typing as _typing

from chunktape._lazy import lazy_names as _lazy_names

# Loaded on first use (``__getattr__``), so the CLI and ``import chunktape`` need not load what they do not use.
if _typing.TYPE_CHECKING:
    from chunktape.http._fault_transport import FaultTransport
    from chunktape.http._protocols import CrossProtocolWarning
    from chunktape.http._recording_transport import RecordingTransport, UnrecordedRequestWarning
    from chunktape.http._render import render_sse
    from chunktape.http._replay_transport import ReplayTransport
    from chunktape.http._server.app import SCENARIO_HEADER, ReplayServer, serve
    from chunktape.http._server.limits import ServerLimits
    from chunktape.http._server.proxy import RecordingProxy
    from chunktape.http._vcr import SECRET_HEADERS, import_vcr, vcr_config

__all__ = [
    "CrossProtocolWarning",
    "FaultTransport",
    "RecordingProxy",
    "RecordingTransport",
    "ReplayServer",
    "ReplayTransport",
    "SCENARIO_HEADER",
    "SECRET_HEADERS",
    "ServerLimits",
    "UnrecordedRequestWarning",
    "import_vcr",
    "render_sse",
    "serve",
    "vcr_config",
]

if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and no __getattr__ hiding typos
    __getattr__, __dir__ = _lazy_names(
        __name__,
        __all__,
        (
            "chunktape.http._render",  # the light modules first: a name loads every home before its own
            "chunktape.http._protocols",
            "chunktape.http._vcr",
            "chunktape.http._fault_transport",
            "chunktape.http._server.limits",
            "chunktape.http._recording_transport",
            "chunktape.http._replay_transport",
            "chunktape.http._server.app",
            "chunktape.http._server.proxy",
        ),
    )
