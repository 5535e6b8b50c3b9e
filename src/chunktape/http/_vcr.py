"""The vcrpy bridge: safe defaults for HTTP-level cassettes of provider traffic, and their import as chunk cassettes.

``vcr_config()`` is for ``vcr.VCR(**vcr_config())`` or pytest-recording's ``vcr_config`` fixture.
``import_vcr(path)`` reads a vcrpy cassette through vcrpy's public ``Cassette.load`` and turns every ``POST`` of
a protocol the HTTP faces speak into an ``Interaction``, the protocol picked by the route as ``RecordingTransport``
picks it: ``.../chat/completions`` (an Azure OpenAI request, which names its deployment in the URL path
``/openai/deployments/<name>/chat/completions?api-version=...`` rather than in the body, gets that name as its
model), Anthropic's ``.../messages`` and OpenAI's ``.../responses``. The request body goes through the protocol's
request codec, a 2xx SSE body through the same SSE parser and chunk decoder as that protocol's adapter, a JSON body
(a ``chat.completion``, an Anthropic ``message``, a Responses ``response``) through its whole-answer decoder, and a
non-2xx answer into a ``Raised`` outcome with its status, ``Retry-After`` and the provider's message
(``http_error``, as the adapters do). In-band error events are provider errors, recorded as such. Other traffic
(``/models``, ``/embeddings``...) is skipped with a note, and so is a request on a route another API shares that
its protocol cannot read (OpenAI Assistants' ``/threads/{id}/messages``).

Never silent: an interaction whose response cannot be decoded (``INVALID_RESPONSE``: a body that is neither
SSE nor JSON, a chunk that does not parse, a truncated JSON body) makes the import fail with
``CASSETTE_CORRUPT`` naming it, unless ``keep_undecodable=True`` keeps it as a raised ``INVALID_RESPONSE`` (and
skips, with a note, interactions whose request cannot be read). Cassettes written with pydantic-ai's
``json_body_serializer`` (JSON bodies stored parsed, under ``parsed_body``) are detected; ``serializer`` names
the format when detection is not wanted. vcrpy keeps no timing, so every event gets ``t_ns=0`` (replay them with
``Timing.fixed`` for a pace).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

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
from chunktape._cassettes.redaction import redact_interaction
from chunktape._errors import ErrorCode, LlmError
from chunktape._limits import (
    BodyDecodeError,
    BodyDecoder,
    UnreadableFile,
    decode_body,
    max_file_bytes,
    read_user_file,
)
from chunktape._protocol import GenerateOptions, StreamChunk
from chunktape._secrets import CREDENTIAL_HEADERS, is_credential_value, redact_url, url_secrets
from chunktape.http._protocols import CHAT, WireProtocol, protocol_for
from chunktape.http._routes import route_model
from chunktape.http._vcr_meta import vcr_protocol_meta, vcr_response_meta
from chunktape.wire._decoding import StreamDecoder
from chunktape.wire._http_errors import header_value, http_error
from chunktape.wire._openai_chat import (
    REASONING_FIELDS,
    error_from_payload,
    not_an_event_stream,
    options_from_openai_request,
)
from chunktape.wire._sse import SseComment, SseParser

__all__ = ["SECRET_HEADERS", "VcrImport", "VcrSerializer", "import_vcr", "read_vcr", "vcr_config"]

SECRET_HEADERS: tuple[str, ...] = CREDENTIAL_HEADERS
"""Headers that never reach a vcrpy cassette with ``vcr_config()`` (requests and responses)."""

_SECRET_QUERY = ("api_key", "api-key", "apikey", "key", "access_token", "token", "sig", "signature", "client_secret")
"""The query parameters ``vcr_config()`` filters (the import treats every ``is_credential_param`` name as one)."""
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
    """A body as vcrpy or a serializer of its users left it: bytes, text, a file-like object, or a JSON value
    stored parsed (a mapping or a list, as custom serializers write request bodies)."""
    if body is None:
        return b""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, dict | list):
        return msgspec.json.encode(body)
    read = getattr(body, "read", None)
    if read is not None:
        data = read()
        return data if isinstance(data, bytes) else str(data).encode()
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    raise _Corrupt(f"its body is a {type(body).__name__} ({body!r:.40}), neither text nor bytes")


_DECODED = re.compile(rb"\s*(?:[{\[]|data:|event:|id:|retry:|:)")
"""How a body already decoded starts: JSON, or an event stream."""


def _decompress(body: bytes, encoding: str | None) -> bytes:
    """``body`` decoded as its ``Content-Encoding`` says, within ``MAX_DECODED_BYTES`` (``decode_body``); a body
    that is already decoded (``decode_compressed_response`` keeps the header on some vcrpy versions) as it is."""
    if not body or encoding is None or encoding.strip().lower() in ("", "identity"):
        return body
    if not BodyDecoder.supports(encoding):
        if _DECODED.match(body):
            return body  # stored decoded, the header kept
        raise _Corrupt(
            f"its body is {encoding.strip()!r}-encoded (Content-Encoding), which chunktape does not decode (gzip and "
            "deflate only); re-record it with the client asking for those (Accept-Encoding: gzip, deflate)"
        )
    headed = body[:2] == b"\x1f\x8b"  # gzip's magic number
    if encoding.strip().lower() == "deflate":
        headed = len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0  # a zlib header
        if not headed and _DECODED.match(body):
            return body
    elif not headed:
        return body
    try:
        return decode_body(body, encoding)
    except BodyDecodeError as error:
        if not headed and error.kind == "corrupt":  # no raw deflate stream either: stored decoded
            return body
        raise _Corrupt(f"its body is {encoding}-encoded and cannot be decoded: {error}") from None


def _raised(error: LlmError) -> Raised:
    return Raised.from_error(error, t_ns=0)


def _stream(body: bytes, content_type: str | None, decoder: StreamDecoder) -> tuple[list[StreamChunk], Outcome]:
    """Decode an SSE body as the adapter of its protocol would (``decoder``: a fresh one), keeping the chunks before
    an error and the error itself."""
    parser = SseParser()
    chunks: list[StreamChunk] = []
    try:
        items = parser.feed(body) + parser.close()
    except LlmError as exc:  # an event past the parser's bound
        return [], _raised(exc)
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


_PROTOCOLS = "POST .../chat/completions, .../messages or .../responses"


class _Corrupt(Exception):
    """What is wrong with one vcr interaction; ``import_vcr`` names the interaction."""


class _Foreign(Exception):
    """A request on a route another API shares that is not of the protocol the route names: skipped with a note."""


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


_GZIP_MAGIC = b"\x1f\x8b"


class _Read:
    """A vcrpy persister over the text already read (once, bounded, decompressed when it was gzipped), so vcrpy never
    opens the file again (nor reads one that changed in between)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def load_cassette(self, cassette_path: str, serializer: Any) -> Any:
        from vcr.serialize import deserialize  # vcrpy's own reading of a cassette's text

        return deserialize(self.text, serializer)

    def save_cassette(self, cassette_path: str, cassette_dict: Any, serializer: Any) -> None:
        raise NotImplementedError("import_vcr never writes vcrpy cassettes")


class _Serializer:
    """A read-only vcrpy serializer for ``Cassette.load``: vcrpy's own, plus ``parsed_body`` unfolding."""

    def __init__(self, kind: VcrSerializer) -> None:
        self.kind = kind

    def deserialize(self, cassette_string: str) -> Any:
        from vcr.serializers import jsonserializer, yamlserializer  # vcrpy's documented serializers

        kind = self.kind
        if kind is VcrSerializer.AUTO:
            kind = VcrSerializer.JSON if cassette_string.lstrip().startswith("{") else VcrSerializer.YAML
        if kind is not VcrSerializer.JSON:
            _check_expansion(cassette_string)
        data = (jsonserializer if kind is VcrSerializer.JSON else yamlserializer).deserialize(cassette_string)
        if self.kind in (VcrSerializer.AUTO, VcrSerializer.PARSED_BODY) and isinstance(data, dict):
            for interaction in data.get("interactions") or ():
                _unfold_parsed_body(interaction)
        return data

    def serialize(self, cassette_dict: Any) -> str:
        raise NotImplementedError("import_vcr never writes vcrpy cassettes")


MAX_YAML_EXPANSION = 64 << 20
"""What a YAML document may expand to, in nodes plus scalar characters, with every alias counted as the nodes
it stands for (or four times the file's length, if more): a vcrpy cassette spells out its bodies, so it expands
to about its own size; a billion-laughs file of a kilobyte expands to gigabytes, and is refused unexpanded."""


class _Refused(Exception):
    """A vcrpy cassette refused before vcrpy builds it (its YAML expands past ``MAX_YAML_EXPANSION``)."""


def _check_expansion(text: str, limit: int | None = None) -> None:
    """Refuse ``text`` if its YAML, aliases expanded, is larger than ``limit`` (default: ``MAX_YAML_EXPANSION`` or
    four times its length). The node graph is composed (libyaml, no objects built) and its expanded size summed
    once per node, so the check costs the file's size, not the expansion's."""
    import yaml  # vcrpy's YAML library

    limit = max(MAX_YAML_EXPANSION, 4 * len(text)) if limit is None else limit
    loader_class = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = loader_class(text)
    try:
        documents = []
        while loader.check_node():
            documents.append(loader.get_node())
    except yaml.YAMLError:
        return  # vcrpy's own parse reports it
    finally:
        loader.dispose()
    sizes: dict[int, int] = {}
    busy: set[int] = set()
    for root in documents:
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, ready = stack.pop()
            key = id(node)
            if key in sizes:
                continue
            if isinstance(node, yaml.ScalarNode):
                sizes[key] = 1 + len(node.value)
                continue
            mapping = isinstance(node, yaml.MappingNode)
            children = [item for pair in node.value for item in pair] if mapping else node.value
            if ready:
                busy.discard(key)
                sizes[key] = size = 1 + sum(sizes[id(child)] for child in children)
                if size > limit:
                    raise _Refused(
                        f"its YAML expands to more than {limit:,} nodes and characters through aliases (line "
                        f"{node.start_mark.line + 1}); a billion-laughs file? It is not expanded"
                    )
                continue
            if key in busy:
                raise _Refused(f"its YAML holds a recursive alias (line {node.start_mark.line + 1})")
            busy.add(key)
            stack.append((node, True))
            for child in children:
                if id(child) in busy:
                    raise _Refused(f"its YAML holds a recursive alias (line {child.start_mark.line + 1})")
                if id(child) not in sizes:
                    stack.append((child, False))


def _unfold_parsed_body(interaction: Any) -> None:
    """``parsed_body: {...}`` back into the ``body`` vcrpy expects (a string; ``{string: ...}`` for responses)."""
    if not isinstance(interaction, dict):
        return
    for kind in ("request", "response"):
        data = interaction.get(kind)
        if isinstance(data, dict) and "parsed_body" in data:
            body = msgspec.json.encode(data.pop("parsed_body")).decode()
            data["body"] = {"string": body} if kind == "response" else body


def _protocol(request: Any) -> WireProtocol | None:
    """The protocol a recorded request was sent on, by its route (as ``RecordingTransport`` picks it), or None."""
    return protocol_for(request.path.rstrip("/")) if request.method.upper() == "POST" else None


def _request_bytes(request: Any) -> bytes:
    """The request's body as sent (decompressed); ``DecodeError`` when it has none."""
    raw = _decompress(_as_bytes(request.body), header_value(request.headers, "content-encoding"))
    if not raw.strip():
        raise msgspec.DecodeError("it has no body")
    return raw


def _request_body(request: Any) -> Any:
    """The request's JSON body; an Azure deployment's name (in the URL path) stands in for a missing model."""
    body: Any = _decoder.decode(_request_bytes(request))
    deployment = route_model(request.path.rstrip("/"))
    if isinstance(body, dict) and "model" not in body and deployment is not None:
        body = {"model": deployment, **body}
    return body


def _status(response: Mapping[str, Any]) -> int:
    info = response.get("status") or {}
    code = info.get("code", 200) if isinstance(info, Mapping) else info
    if isinstance(code, bool) or not isinstance(code, int | str) or not str(code).strip().isdigit():
        raise _Corrupt(f"its response status {code!r} is not a number")
    if not 100 <= int(code) <= 599:
        raise _Corrupt(f"its response status {code!r} is no HTTP status (100-599)")
    return int(code)


def _undecodable(message: str) -> Raised:
    return Raised(t_ns=0, code=ErrorCode.INVALID_RESPONSE.value, message=message)


def _request(request: Any, protocol: WireProtocol) -> tuple[GenerateOptions, bool]:
    """The request as ``protocol`` reads it, and whether it asked for a stream; ``_Corrupt`` (chat completions) or
    ``_Foreign`` (another protocol's route, which other APIs share: OpenAI's ``/threads/{id}/messages``) when not."""
    try:
        if protocol is CHAT:
            body = _request_body(request)
            options = options_from_openai_request(body, reasoning=REASONING_FIELDS)
            return options, isinstance(body, dict) and body.get("stream") is True
        decoded = protocol.decode_request(_request_bytes(request))
        return decoded.options, decoded.streaming
    except (msgspec.DecodeError, LlmError) as exc:
        message = exc.message if isinstance(exc, LlmError) else str(exc)
        kind = "chat-completions" if protocol is CHAT else protocol.streams
        raise (_Corrupt if protocol is CHAT else _Foreign)(
            f"its request body is not a {kind} request ({message})"
        ) from None


def _interaction(request: Any, response: Any, protocol: WireProtocol) -> tuple[Interaction, tuple[str, bool]]:
    """The interaction, and how its request was sent (its protocol, and whether it asked for a stream): how the
    recorders count its attempts."""
    options, streaming = _request(request, protocol)
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
    decoder: StreamDecoder | None = None
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
            chunks, outcome = _whole(payload, protocol)
    else:
        decoder = protocol.decoder()
        chunks, outcome = _stream(content, header_value(headers, "content-type"), decoder)
    whole = payload if isinstance(payload, dict) else None
    if protocol is CHAT:
        meta = vcr_response_meta(headers, content, whole)
    else:
        meta = vcr_protocol_meta(protocol, headers, decoder=decoder, payload=whole)
    interaction = Interaction(
        request=RecordedRequest.from_options(options),
        events=[Event(t_ns=0, chunk=chunk) for chunk in chunks],
        outcome=outcome,
        response=meta,
    )
    return interaction, (protocol.name, streaming)


def _whole(payload: Any, protocol: WireProtocol) -> tuple[list[StreamChunk], Outcome]:
    """A JSON answer of ``protocol`` (a ``chat.completion``, an Anthropic ``message``, a Responses ``response``)."""
    what = "chat.completion" if protocol is CHAT else f"{protocol.streams} answer"
    try:
        chunks = protocol.decode_whole(payload)
    except LlmError as exc:
        return [], _undecodable(f"its JSON response body is not a readable {what} ({exc.message})")
    if chunks is None:
        return [], _undecodable(f"its JSON response body is not a readable {what}")
    return chunks, Completed(t_ns=0)


def _check_text(path: Path, data: bytes, kind: VcrSerializer) -> None:
    """A vcrpy cassette is UTF-8 text: else ``CASSETTE_CORRUPT`` saying where the first byte that is not is
    (vcrpy itself would read such a file as an empty cassette)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        what = "JSON" if kind is VcrSerializer.JSON else "YAML" if kind is not VcrSerializer.AUTO else "YAML or JSON"
        raise LlmError(
            f"{path}: not UTF-8 {what}: byte 0x{data[exc.start]:02x} at line {line}, column {column} (offset "
            f"{exc.start}) is not UTF-8",
            ErrorCode.CASSETTE_CORRUPT,
            hint="give a vcrpy cassette (YAML or JSON text, UTF-8)",
        ) from None


def _credentials(request: Any) -> list[str]:
    """The credentials a recorded request still carries: in its URL (userinfo, ``?api_key=``...) and in the
    headers vcr_config() filters, when the cassette was recorded without it."""
    found = url_secrets(str(request.uri))
    headers = request.headers if isinstance(request.headers, Mapping) else {}
    for name, value in headers.items():
        values = value if isinstance(value, list) else [value]
        if str(name).lower() in SECRET_HEADERS:
            for item in values:
                scheme, _, token = str(item).partition(" ")
                found.append(token if scheme.lower() in ("bearer", "basic") and token else str(item))
    return [secret for secret in found if is_credential_value(secret)]


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
    """Convert a vcrpy cassette of (streamed) chat completions, Anthropic messages or OpenAI responses into a chunk
    cassette (``read_vcr`` without notes)."""
    return read_vcr(path, serializer=serializer, keep_undecodable=keep_undecodable).cassette


def read_vcr(
    path: str | os.PathLike[str],
    *,
    serializer: VcrSerializer | str = VcrSerializer.AUTO,
    keep_undecodable: bool = False,
) -> VcrImport:
    """Convert a vcrpy cassette into a chunk cassette, with a note per interaction skipped or kept undecoded.

    Only ``POST`` requests to ``.../chat/completions``, ``.../messages`` and ``.../responses`` are imported, in
    recorded order; other traffic is skipped with a note. Raises ``CASSETTE_NOT_FOUND`` for a missing file,
    ``INVALID_CONFIG`` for an unknown ``serializer``, and ``CASSETTE_CORRUPT`` when the file holds no such exchange,
    or one that cannot be read or decoded (unless ``keep_undecodable``).
    """
    from vcr.cassette import Cassette as VcrCassette  # vcrpy's public cassette API; imported when needed

    try:
        kind = VcrSerializer(serializer)
    except ValueError:
        valid = ", ".join(item.value for item in VcrSerializer)
        raise LlmError(f"unknown vcrpy serializer {serializer!r}; valid: {valid}", ErrorCode.INVALID_CONFIG) from None
    path = Path(path)
    try:
        data = read_user_file(path)
    except UnreadableFile as exc:
        if exc.reason == "missing":
            raise LlmError(str(exc), ErrorCode.CASSETTE_NOT_FOUND, hint="check the vcrpy cassette path") from None
        raise LlmError(str(exc), ErrorCode.CASSETTE_CORRUPT, hint="give a vcrpy cassette file") from None
    if data[:2] == _GZIP_MAGIC:  # a cassette its project's persister gzips (LangChain's .yaml.gz)
        try:
            data = decode_body(data, "gzip", limit=max_file_bytes())
        except BodyDecodeError as exc:
            raise LlmError(
                f"{path}: a gzip-compressed file that does not decompress: {exc}",
                ErrorCode.CASSETTE_CORRUPT,
                hint="give a vcrpy cassette file, gzipped whole or not at all",
            ) from None
    if not data.strip():
        raise LlmError(f"{path} is empty", ErrorCode.CASSETTE_CORRUPT, hint="give a vcrpy cassette file")
    _check_text(path, data, kind)
    try:
        loaded = VcrCassette.load(
            path=str(path), record_mode="none", serializer=_Serializer(kind), persister=_Read(data.decode())
        )
    except _Refused as exc:
        raise LlmError(f"{path}: {exc}", ErrorCode.CASSETTE_CORRUPT) from None
    except Exception as exc:
        raise LlmError(
            f"{path}: vcrpy cannot read it with the {kind.value} serializer ({type(exc).__name__}: {exc}); if it "
            f"was written with another one, name it ({', '.join(item.value for item in VcrSerializer)})",
            ErrorCode.CASSETTE_CORRUPT,
        ) from exc
    interactions: list[tuple[Interaction, tuple[str, bool]]] = []
    notes: list[str] = []
    for number, (request, response) in enumerate(loaded.data):
        where = f"vcr interaction #{number} ({request.method} {redact_url(str(request.uri))})"
        protocol = _protocol(request)
        if protocol is None:
            notes.append(f"{where}: skipped, not a request of a protocol chunktape records ({_PROTOCOLS})")
            continue
        try:
            interaction, sent = _interaction(request, response, protocol)
        except _Foreign as exc:
            notes.append(f"{where}: skipped, {exc}")
            continue
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
        credentials = _credentials(request)
        if credentials:  # a key in the URL or a header the cassette kept: gone from what it echoed too
            interaction = redact_interaction(interaction, credentials)
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
        interactions.append((interaction, sent))
    if not interactions:
        raise LlmError(
            f"{path}: no exchange of a protocol chunktape records ({_PROTOCOLS}) found in {len(loaded.data)} "
            "recorded interaction(s)",
            ErrorCode.CASSETTE_CORRUPT,
            hint="record provider traffic with vcr_config(), or check the file",
        )
    # A repeat of the same request sent the same way (asking for a stream, or not) is its next attempt, whatever the
    # answer (a 429, then a stream); the same messages once streamed and once not are two calls, as the recorders
    # count them.
    attempts: dict[tuple[str, tuple[str, bool]], int] = {}
    numbered = []
    for interaction, sent in interactions:
        key = (interaction.request.fingerprint, sent)
        attempts[key] = attempts.get(key, 0) + 1
        numbered.append(msgspec.structs.replace(interaction, attempt=attempts[key]))
    cassette = Cassette(meta=CassetteMeta(adapter="vcrpy-import", tags={"source": path.name}), interactions=numbered)
    return VcrImport(cassette=cassette, notes=notes)
