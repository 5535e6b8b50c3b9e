"""The vcrpy bridge: safe defaults for HTTP-level cassettes of provider traffic, and their import as chunk cassettes.

``vcr_config()`` is for ``vcr.VCR(**vcr_config())`` or pytest-recording's ``vcr_config`` fixture.
``import_vcr(path)`` reads a vcrpy cassette through vcrpy's public ``Cassette.load`` and turns every
``POST .../chat/completions`` exchange into an ``Interaction``: the request body through
``options_from_openai_request`` (an Azure OpenAI request, which names its deployment in the URL path
``/openai/deployments/<name>/chat/completions?api-version=...`` rather than in the body, gets that name as its
model), a 2xx SSE body through the same SSE parser and chunk decoder as ``OpenAICompatAdapter``, a JSON
``chat.completion`` body through ``decode_openai_completion``, and a non-2xx answer into a ``Raised`` outcome with
its status, ``Retry-After`` and the provider's message (``http_error``, as the adapter does). In-band error
events are provider errors, recorded as such. Other traffic (``/models``, ``/embeddings``, ``/responses``...) is
skipped with a note.

Never silent: an interaction whose response cannot be decoded (``INVALID_RESPONSE``: a body that is neither
SSE nor JSON, a chunk that does not parse, a truncated JSON body) makes the import fail with
``CASSETTE_CORRUPT`` naming it, unless ``keep_undecodable=True`` keeps it as a raised ``INVALID_RESPONSE`` (and
skips, with a note, interactions whose request cannot be read). Cassettes written with pydantic-ai's
``json_body_serializer`` (JSON bodies stored parsed, under ``parsed_body``) are detected; ``serializer`` names
the format when detection is not wanted. vcrpy keeps no timing, so every event gets ``t_ns=0`` (replay them with
``Timing.fixed`` for a pace).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import msgspec

from chunktape._cassettes.model import (
    Cassette,
    CassetteMeta,
    Completed,
    Event,
    Interaction,
    Outcome,
    Raised,
    RecordedRequest,
)
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import StreamChunk
from chunktape.http._vcr_meta import vcr_response_meta
from chunktape.wire._http_errors import header_value, http_error
from chunktape.wire._openai_chat import (
    REASONING_FIELDS,
    OpenAIChatDecoder,
    decode_openai_completion,
    error_from_payload,
    not_an_event_stream,
    options_from_openai_request,
)
from chunktape.wire._sse import SseComment, SseParser

__all__ = ["SECRET_HEADERS", "VcrImport", "VcrSerializer", "import_vcr", "read_vcr", "vcr_config"]

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


class VcrSerializer(StrEnum):
    """How the vcrpy cassette was written: the serializer its ``VCR`` was configured with."""

    AUTO = "auto"
    """JSON if the file starts with ``{``, else YAML; ``parsed_body`` entries are read when present."""
    YAML = "yaml"
    """vcrpy's default serializer."""
    JSON = "json"
    """vcrpy's ``json`` serializer."""
    PARSED_BODY = "parsed-body"
    """pydantic-ai's ``json_body_serializer``: YAML whose JSON bodies are stored parsed, under ``parsed_body``."""


class _Serializer:
    """A read-only vcrpy serializer for ``Cassette.load``: vcrpy's own, plus ``parsed_body`` unfolding."""

    def __init__(self, kind: VcrSerializer) -> None:
        self.kind = kind

    def deserialize(self, cassette_string: str) -> Any:
        from vcr.serializers import jsonserializer, yamlserializer  # vcrpy's documented serializers

        kind = self.kind
        if kind is VcrSerializer.AUTO:
            kind = VcrSerializer.JSON if cassette_string.lstrip().startswith("{") else VcrSerializer.YAML
        data = (jsonserializer if kind is VcrSerializer.JSON else yamlserializer).deserialize(cassette_string)
        if self.kind in (VcrSerializer.AUTO, VcrSerializer.PARSED_BODY) and isinstance(data, dict):
            for interaction in data.get("interactions") or ():
                _unfold_parsed_body(interaction)
        return data

    def serialize(self, cassette_dict: Any) -> str:
        raise NotImplementedError("import_vcr never writes vcrpy cassettes")


def _unfold_parsed_body(interaction: Any) -> None:
    """``parsed_body: {...}`` back into the ``body`` vcrpy expects (a string; ``{string: ...}`` for responses)."""
    if not isinstance(interaction, dict):
        return
    for kind in ("request", "response"):
        data = interaction.get(kind)
        if isinstance(data, dict) and "parsed_body" in data:
            body = msgspec.json.encode(data.pop("parsed_body")).decode()
            data["body"] = {"string": body} if kind == "response" else body


def _is_chat(request: Any) -> bool:
    return bool(request.method.upper() == "POST" and request.path.rstrip("/").endswith("/chat/completions"))


_AZURE_DEPLOYMENT = re.compile(r"/deployments/([^/]+)/chat/completions/?$")


def _request_body(request: Any) -> Any:
    """The request's JSON body; an Azure deployment's name (in the URL path) stands in for a missing model."""
    raw = _decompress(_as_bytes(request.body), header_value(request.headers, "content-encoding"))
    body: Any = _decoder.decode(raw)
    if isinstance(body, dict) and "model" not in body:
        deployment = _AZURE_DEPLOYMENT.search(request.path)
        if deployment is not None:
            body = {"model": unquote(deployment[1]), **body}
    return body


def _status(response: Mapping[str, Any]) -> int:
    info = response.get("status") or {}
    code = info.get("code", 200) if isinstance(info, Mapping) else info
    if isinstance(code, bool) or not isinstance(code, int | str) or not str(code).strip().isdigit():
        raise _Corrupt(f"its response status {code!r} is not a number")
    return int(code)


def _undecodable(message: str) -> Raised:
    return Raised(t_ns=0, code=ErrorCode.INVALID_RESPONSE.value, message=message)


def _interaction(request: Any, response: Any) -> Interaction:
    try:
        options = options_from_openai_request(_request_body(request), reasoning=REASONING_FIELDS)
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
    chunks: list[StreamChunk] = []
    outcome: Outcome
    payload: Any = None
    if status >= 300:
        outcome = _raised(http_error(status, content, headers))
    elif content.lstrip().startswith(b"{"):
        try:
            payload = _decoder.decode(content)
        except msgspec.DecodeError as exc:
            payload, outcome = None, _undecodable(f"its JSON response body cannot be parsed ({exc})")
        if isinstance(payload, dict) and payload.get("error") is not None:
            outcome = _raised(error_from_payload(payload, what="the provider answered with an error"))
        elif payload is not None:
            try:
                chunks, outcome = decode_openai_completion(payload), Completed(t_ns=0)
            except LlmError as exc:
                outcome = _undecodable(f"its JSON response body is not a readable chat.completion ({exc.message})")
    else:
        chunks, outcome = _stream(content, header_value(headers, "content-type"))
    return Interaction(
        request=RecordedRequest.from_options(options),
        events=[Event(t_ns=0, chunk=chunk) for chunk in chunks],
        outcome=outcome,
        response=vcr_response_meta(headers, content, payload if isinstance(payload, dict) else None),
    )


@dataclass(frozen=True)
class VcrImport:
    """What ``read_vcr`` made of a vcrpy cassette: the chunk cassette, and a note per interaction not imported
    as is (skipped, or kept undecoded), for the user to read."""

    cassette: Cassette
    notes: list[str] = field(default_factory=list)


def import_vcr(
    path: str | os.PathLike[str],
    *,
    serializer: VcrSerializer | str = VcrSerializer.AUTO,
    keep_undecodable: bool = False,
) -> Cassette:
    """Convert a vcrpy cassette of (streamed) chat completions into a chunk cassette (``read_vcr`` without notes)."""
    return read_vcr(path, serializer=serializer, keep_undecodable=keep_undecodable).cassette


def read_vcr(
    path: str | os.PathLike[str],
    *,
    serializer: VcrSerializer | str = VcrSerializer.AUTO,
    keep_undecodable: bool = False,
) -> VcrImport:
    """Convert a vcrpy cassette into a chunk cassette, with a note per interaction skipped or kept undecoded.

    Only ``POST`` requests to ``.../chat/completions`` are imported, in recorded order; other traffic is skipped
    with a note. Raises ``CASSETTE_NOT_FOUND`` for a missing file, ``INVALID_CONFIG`` for an unknown
    ``serializer``, and ``CASSETTE_CORRUPT`` when the file holds no chat completion, or one that cannot be read
    or decoded (unless ``keep_undecodable``).
    """
    from vcr.cassette import Cassette as VcrCassette  # vcrpy's public cassette API; imported when needed

    try:
        kind = VcrSerializer(serializer)
    except ValueError:
        valid = ", ".join(item.value for item in VcrSerializer)
        raise LlmError(f"unknown vcrpy serializer {serializer!r}; valid: {valid}", ErrorCode.INVALID_CONFIG) from None
    path = Path(path)
    if not path.is_file():
        raise LlmError(f"{path} does not exist", ErrorCode.CASSETTE_NOT_FOUND, hint="check the vcrpy cassette path")
    try:
        loaded = VcrCassette.load(path=str(path), record_mode="none", serializer=_Serializer(kind))
    except Exception as exc:
        raise LlmError(
            f"{path}: vcrpy cannot read it with the {kind.value} serializer ({type(exc).__name__}: {exc}); if it "
            f"was written with another one, name it ({', '.join(item.value for item in VcrSerializer)})",
            ErrorCode.CASSETTE_CORRUPT,
        ) from exc
    interactions: list[Interaction] = []
    notes: list[str] = []
    for number, (request, response) in enumerate(loaded.data):
        where = f"vcr interaction #{number} ({request.method} {request.uri})"
        if not _is_chat(request):
            notes.append(f"{where}: skipped, not a chat-completions request")
            continue
        try:
            interaction = _interaction(request, response)
        except Exception as exc:  # one clear error per bad interaction, never a bare traceback
            what = str(exc) if isinstance(exc, _Corrupt) else f"it cannot be read ({type(exc).__name__}: {exc})"
            if keep_undecodable:
                notes.append(f"{where}: skipped, {what}")
                continue
            raise LlmError(
                f"{path}: {where}: {what}",
                ErrorCode.CASSETTE_CORRUPT,
                hint="fix or delete that interaction in the cassette (numbered from 0, in file order)",
            ) from (None if isinstance(exc, _Corrupt) else exc)
        outcome = interaction.outcome
        if isinstance(outcome, Raised) and outcome.code == ErrorCode.INVALID_RESPONSE.value:
            if not keep_undecodable:
                raise LlmError(
                    f"{path}: {where}: its response cannot be decoded: {outcome.message}",
                    ErrorCode.CASSETTE_CORRUPT,
                    hint="to import it as a raised INVALID_RESPONSE, pass keep_undecodable=True "
                    "(CLI: --keep-undecodable)",
                )
            notes.append(f"{where}: kept as a raised INVALID_RESPONSE, its response cannot be decoded")
        if interaction.response is not None and interaction.response.unkept:
            unkept = ", ".join(interaction.response.unkept)
            notes.append(f"{where}: not kept, as their value changes from event to event: {unkept}")
        interactions.append(interaction)
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
    cassette = Cassette(meta=CassetteMeta(adapter="vcrpy-import", tags={"source": path.name}), interactions=numbered)
    return VcrImport(cassette=cassette, notes=notes)
