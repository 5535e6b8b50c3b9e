"""The vcrpy bridge: safe defaults for HTTP-level cassettes of provider traffic, and their import as chunk cassettes.

``vcr_config()`` is for ``vcr.VCR(**vcr_config())`` or pytest-recording's ``vcr_config`` fixture.
``import_vcr(path)`` reads a vcrpy cassette through vcrpy's public ``Cassette.load`` and turns every
``POST .../chat/completions`` exchange into an ``Interaction``: the request body through
``options_from_openai_request``, a 2xx SSE body through the same SSE parser and chunk decoder as
``OpenAICompatAdapter``, a JSON ``chat.completion`` body through ``decode_openai_completion``, and a non-2xx
answer into a ``Raised`` outcome with its status, ``Retry-After`` and the provider's message (``http_error``,
as the adapter does). An interaction that cannot be read (a request that is not chat completions, a status
that is not a number, a truncated or misshapen JSON body) is ``CASSETTE_CORRUPT`` naming its number and what
is wrong. vcrpy keeps no timing, so every event gets ``t_ns=0`` (replay them with ``Timing.fixed`` for a pace).
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from chunktape.cassettes.model import (
    Cassette,
    CassetteMeta,
    Completed,
    Event,
    Interaction,
    Outcome,
    Raised,
    RecordedRequest,
)
from chunktape.errors import ErrorCode, LlmError
from chunktape.protocol import StreamChunk
from chunktape.wire.http_errors import header_value, http_error
from chunktape.wire.openai_chat import (
    REASONING_FIELDS,
    OpenAIChatDecoder,
    decode_openai_completion,
    error_from_payload,
    not_an_event_stream,
    options_from_openai_request,
)
from chunktape.wire.sse import SseComment, SseParser

__all__ = ["SECRET_HEADERS", "import_vcr", "vcr_config"]

SECRET_HEADERS: tuple[str, ...] = (
    "authorization",
    "api-key",
    "x-api-key",
    "proxy-authorization",
    "openai-organization",
    "openai-project",
    "cookie",
    "set-cookie",
)
"""Headers that never reach a vcrpy cassette with ``vcr_config()`` (requests and responses)."""

_SECRET_QUERY = ("api_key", "api-key", "key", "access_token")
_decoder = msgspec.json.Decoder()


def _scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    """vcrpy's ``filter_headers`` only covers requests: drop secret response headers too (``set-cookie``)."""
    headers = response.get("headers")
    if isinstance(headers, dict):
        response["headers"] = {name: value for name, value in headers.items() if name.lower() not in SECRET_HEADERS}
    return response


def vcr_config() -> dict[str, Any]:
    """Safe ``vcr.VCR`` keyword arguments for LLM provider traffic.

    Credentials are filtered from request headers (``authorization``, ``api-key``, ``x-api-key``, cookies...),
    response headers (``set-cookie``) and query strings; requests match on method, scheme, host, port, path,
    query *and body* (two prompts to the same URL are different requests); compressed responses are stored
    decoded so ``import_vcr`` and humans can read them. ``record_mode`` is left to the caller (pytest-recording
    sets it from ``--record-mode``; pass ``record_mode="none"`` in CI).
    """
    return {
        "filter_headers": list(SECRET_HEADERS),
        "filter_query_parameters": list(_SECRET_QUERY),
        "before_record_response": _scrub_response,
        "match_on": ["method", "scheme", "host", "port", "path", "query", "body"],
        "decode_compressed_response": True,
    }


def _as_bytes(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    read = getattr(body, "read", None)
    if read is not None:
        data = read()
        return data if isinstance(data, bytes) else str(data).encode()
    return bytes(body)


def _decompress(body: bytes, encoding: str | None) -> bytes:
    if not body or encoding is None:
        return body
    encoding = encoding.lower()
    try:
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, zlib.error):
        return body  # already decoded (decode_compressed_response keeps the header on some versions)
    return body


def _raised(error: LlmError) -> Raised:
    return Raised.from_error(error, t_ns=0)


def _stream(body: bytes, content_type: str | None) -> tuple[list[StreamChunk], Outcome]:
    """Decode an SSE body as the adapter would, keeping the chunks before an error and the error itself."""
    parser = SseParser()
    decoder = OpenAIChatDecoder()
    chunks: list[StreamChunk] = []
    items = parser.feed(body) + parser.close()
    if body.strip() and not any(isinstance(item, SseComment) or item.data is not None for item in items):
        return [], _raised(not_an_event_stream(body, content_type))
    try:
        for item in items:
            chunks.extend(decoder.feed_item(item, unterminated=item is parser.unterminated))
            if decoder.done:
                break
        chunks.extend(decoder.close())
    except LlmError as exc:
        return chunks, _raised(exc)
    return chunks, Completed(t_ns=0)


class _Corrupt(Exception):
    """What is wrong with one vcr interaction; ``import_vcr`` names the interaction."""


def _status(response: Mapping[str, Any]) -> int:
    info = response.get("status") or {}
    code = info.get("code", 200) if isinstance(info, Mapping) else info
    if isinstance(code, bool) or not isinstance(code, int | str) or not str(code).strip().isdigit():
        raise _Corrupt(f"its response status {code!r} is not a number")
    return int(code)


def _interaction(request: Any, response: Any) -> Interaction:
    try:
        body: Any = _decoder.decode(_as_bytes(request.body))
        options = options_from_openai_request(body, reasoning=REASONING_FIELDS)
    except (msgspec.DecodeError, LlmError) as exc:
        message = exc.message if isinstance(exc, LlmError) else str(exc)
        raise _Corrupt(f"its request body is not a chat-completions request ({message})") from None
    if not isinstance(response, Mapping):
        raise _Corrupt(f"its response is a {type(response).__name__}, not a mapping")
    status = _status(response)
    headers = response.get("headers")
    if not isinstance(headers, Mapping):
        headers = {}
    raw = (response.get("body") or {}).get("string") if isinstance(response.get("body"), Mapping) else None
    if raw is None:
        raw = response.get("content")
    content = _decompress(_as_bytes(raw), header_value(headers, "content-encoding"))
    chunks: list[StreamChunk]
    outcome: Outcome
    if status >= 300:
        chunks, outcome = [], _raised(http_error(status, content, headers))
    elif content.lstrip().startswith(b"{"):
        try:
            payload = _decoder.decode(content)
        except msgspec.DecodeError as exc:
            raise _Corrupt(f"its JSON response body cannot be parsed ({exc})") from None
        if isinstance(payload, dict) and payload.get("error") is not None:
            chunks, outcome = [], _raised(error_from_payload(payload, what="the provider answered with an error"))
        else:
            try:
                chunks, outcome = decode_openai_completion(payload), Completed(t_ns=0)
            except LlmError as exc:
                raise _Corrupt(f"its JSON response body is not a readable chat.completion ({exc.message})") from None
    else:
        chunks, outcome = _stream(content, header_value(headers, "content-type"))
    return Interaction(
        request=RecordedRequest.from_options(options),
        events=[Event(t_ns=0, chunk=chunk) for chunk in chunks],
        outcome=outcome,
    )


def import_vcr(path: str | os.PathLike[str]) -> Cassette:
    """Convert a vcrpy cassette of (streamed) chat completions into a chunk cassette.

    Only ``POST`` requests to ``.../chat/completions`` are imported, in recorded order; other traffic is
    skipped. Raises ``CASSETTE_NOT_FOUND`` for a missing file and ``CASSETTE_CORRUPT`` when it holds no chat
    completion or one that cannot be read.
    """
    from vcr.cassette import Cassette as VcrCassette  # vcrpy's public cassette API; imported when needed

    path = Path(path)
    if not path.is_file():
        raise LlmError(f"{path} does not exist", ErrorCode.CASSETTE_NOT_FOUND, hint="check the vcrpy cassette path")
    try:
        loaded = VcrCassette.load(path=str(path), record_mode="none")
    except Exception as exc:
        raise LlmError(f"{path}: vcrpy cannot read it ({exc})", ErrorCode.CASSETTE_CORRUPT) from exc
    interactions: list[Interaction] = []
    for number, (request, response) in enumerate(loaded.data):
        if request.method.upper() != "POST" or not request.path.rstrip("/").endswith("/chat/completions"):
            continue
        try:
            interactions.append(_interaction(request, response))
        except Exception as exc:  # one clear error per bad interaction, never a bare traceback
            what = str(exc) if isinstance(exc, _Corrupt) else f"it cannot be read ({type(exc).__name__}: {exc})"
            raise LlmError(
                f"{path}: vcr interaction #{number} ({request.method} {request.uri}): {what}",
                ErrorCode.CASSETTE_CORRUPT,
                hint="fix or delete that interaction in the cassette (numbered from 0, in file order)",
            ) from (None if isinstance(exc, _Corrupt) else exc)
    if not interactions:
        raise LlmError(
            f"{path}: no POST .../chat/completions exchange found in {len(loaded.data)} recorded interaction(s)",
            ErrorCode.CASSETTE_CORRUPT,
            hint="record chat-completions traffic with vcr_config(), or check the file",
        )
    attempts: dict[str, int] = {}
    numbered = []
    for interaction in interactions:
        fingerprint = interaction.request.fingerprint
        attempts[fingerprint] = attempts.get(fingerprint, 0) + 1
        numbered.append(msgspec.structs.replace(interaction, attempt=attempts[fingerprint]))
    return Cassette(meta=CassetteMeta(adapter="vcrpy-import", tags={"source": path.name}), interactions=numbered)
