"""The HTTP layer: faults on httpx traffic, a loopback OpenAI-compatible replay server, and the vcrpy bridge.

- ``FaultTransport(inner, faults)``: an ``httpx.AsyncBaseTransport`` that applies the fault catalogue to HTTP
  responses, for testing HTTP adapters and SDKs (``openai.AsyncOpenAI(http_client=httpx.AsyncClient(
  transport=FaultTransport(...)))``).
- ``render_sse(interaction)``: a recorded interaction as an OpenAI-compatible SSE body.
- ``ReplayServer`` / ``serve``: replay cassettes (and fault scenarios) over HTTP on 127.0.0.1.
- ``vcr_config()`` / ``import_vcr(path)``: safe vcrpy settings, and vcrpy cassettes as chunk cassettes.
"""

from chunktape.http.render import render_sse
from chunktape.http.server import SCENARIO_HEADER, ReplayServer, serve
from chunktape.http.transport import FaultTransport
from chunktape.http.vcr import SECRET_HEADERS, import_vcr, vcr_config

__all__ = [
    "FaultTransport",
    "ReplayServer",
    "SCENARIO_HEADER",
    "SECRET_HEADERS",
    "import_vcr",
    "render_sse",
    "serve",
    "vcr_config",
]
