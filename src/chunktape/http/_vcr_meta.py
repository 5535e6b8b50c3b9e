"""The provider's answer metadata of one vcrpy interaction (``ResponseMeta``), as ``RecordingTransport`` keeps it.

vcrpy stores the response's headers (each a list of values) and its body whole; ``import-vcr`` feeds them to the
same ``ResponseObserver`` every recorder uses, so an imported cassette is served back (``serve``, the transports)
with the provider's id, model, ``created``, ``system_fingerprint``, request-id / rate-limit headers and every
field the chunk protocol has no slot for, or names, in the import's notes, the per-event fields it could not keep.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from chunktape._cassettes.model import ResponseMeta
from chunktape._cassettes.response import ResponseObserver, kept_headers
from chunktape._errors import LlmError
from chunktape.http._protocols import WireProtocol
from chunktape.wire._openai_chat import DONE
from chunktape.wire._sse import SseEvent, SseParser

__all__ = ["vcr_protocol_meta", "vcr_response_meta"]

_decoder = msgspec.json.Decoder()


def _header_items(headers: Mapping[Any, Any]) -> Iterator[tuple[str, str]]:
    for name, values in headers.items():
        for value in values if isinstance(values, list | tuple) else [values]:
            if isinstance(name, str) and isinstance(value, str | bytes):
                yield name, value.decode(errors="replace") if isinstance(value, bytes) else value


def vcr_response_meta(headers: Mapping[Any, Any], content: bytes, payload: object = None) -> ResponseMeta:
    """The metadata of a response with ``headers`` and body ``content`` (``payload``: the body's JSON, when it is
    a JSON answer rather than an event stream)."""
    streamed = payload is None and not content.lstrip().startswith(b"{")
    observer = ResponseObserver(list(_header_items(headers)), streamed=streamed)
    if not streamed:
        observer.completion(payload)
        return observer.meta()
    parser = SseParser()
    try:
        items = parser.feed(content) + parser.close()
    except LlmError:
        return observer.meta()  # an event past the parser's bound: the import's decoder reports it
    for item in items:
        if isinstance(item, SseEvent) and item.data and item.data.strip() != DONE:
            try:
                observer.event(_decoder.decode(item.data))
            except msgspec.DecodeError:
                continue  # the import's decoder reports it
    return observer.meta()


def vcr_protocol_meta(
    protocol: WireProtocol, headers: Mapping[Any, Any], *, decoder: object = None, payload: dict[str, Any] | None = None
) -> ResponseMeta:
    """The metadata of an Anthropic Messages or OpenAI Responses answer: its kept headers and the envelope its
    protocol keeps (the ``message``, the ``response``), from the stream's ``decoder`` or the JSON ``payload``, as
    ``RecordingTransport`` keeps them."""
    meta = ResponseMeta(headers=kept_headers(list(_header_items(headers))), streamed=payload is None)
    if payload is not None:
        meta = protocol.observed_whole(meta, payload)
    elif decoder is not None:
        meta = protocol.observed(meta, decoder)
    return msgspec.structs.replace(meta, finish_sent=True)
