"""The errors chunktape answers itself over HTTP (a cassette miss, a body too large, an upstream down), as
opposed to a recorded or injected provider error: marked ``x-chunktape-error`` and never retried by SDKs."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

from chunktape._errors import Advice, AdviceWords, ErrorCode, LlmError
from chunktape.http._protocols import CHAT, WireProtocol

__all__ = ["MISSES", "MISS_STATUS", "MISS_TYPE", "miss_message", "problem"]

MISS_STATUS = 418
"""The status of a cassette miss (no match, all played): one no SDK retries (openai retries 408, 409, 429, 5xx)
or reads as the provider's own answer (404 reads as "model not found", 400 as a bad request), with the error
type ``chunktape_cassette_miss`` and the code in the body and in ``x-chunktape-error``."""
MISS_TYPE = "chunktape_cassette_miss"
"""The ``error.type`` of a cassette miss."""

MISSES = frozenset({ErrorCode.CASSETTE_MISMATCH, ErrorCode.CASSETTE_NOT_FOUND, ErrorCode.CASSETTE_EXHAUSTED})
"""The codes of a cassette miss: answered with ``MISS_STATUS``, never as the provider's own error."""

_SERVER_ADVICE: AdviceWords = {
    Advice.RECORD_OR_MATCH: "record the request into the cassette (chunktape record), or serve with --match-on naming "
    "fewer fields (e.g. --match-on model,last_message)",
    Advice.RECORD_OR_REPEAT: "POST /reset to play the cassette again from the start, or serve with --repeat",
    ErrorCode.CASSETTE_NOT_FOUND: "give chunktape serve a cassette that exists",
}
"""The next step of a miss in the server's own knobs (the library's name Python arguments, pytest's its flags)."""


def miss_message(exc: LlmError) -> str:
    """``[CODE] message; next step. detail`` for a cassette miss, in the server's knobs."""
    return exc.render(_SERVER_ADVICE)


def problem(
    status: int,
    message: str,
    code: str,
    *,
    headers: Mapping[str, str] | None = None,
    kind: str = "api_error",
    protocol: WireProtocol = CHAT,
) -> JSONResponse:
    """An error chunktape itself answers (not a replayed provider's): ``x-chunktape-error: <code>`` says so, and
    ``x-should-retry: false`` keeps SDKs that honour it (openai, anthropic) from retrying what cannot change.
    The body is in ``protocol``'s error shape (the route's)."""
    body = protocol.error_body(message, status=None, code=code)
    body["error"]["type"] = kind
    marks = {"x-chunktape-error": code, "x-should-retry": "false"}
    return JSONResponse(body, status_code=status, headers={**(headers or {}), **marks})
