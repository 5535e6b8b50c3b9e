"""What a provider's HTTP answer carried beyond its chunks, observed once for every recorder: ``ResponseMeta``.

Every way of recording an OpenAI-compatible answer (``RecordingTransport`` and the proxy on it, ``chunktape record``
through ``OpenAICompatAdapter``, ``import-vcr``) feeds the answer's headers and each event's JSON (or the whole
``chat.completion``) to a ``ResponseObserver`` and keeps its ``meta()`` with the interaction, so a replay (the
transports, ``serve``, ``render_sse``) answers as the provider did: its id, answered model, ``created``,
``system_fingerprint``, request-id / rate-limit headers, whether it sent a ``finish_reason``, and every field the
chunk protocol has no slot for, by where it came:

- ``first``, ``delta``, ``finish``, ``usage``, ``completion``: the top-level fields of the opening event, of the
  content events, of the finish event, of the usage-only event, of a JSON answer (``service_tier``, Groq's
  ``x_groq``, OpenRouter's ``provider``, Azure's ``prompt_filter_results``, OpenAI's ``moderation``...);
- ``<place>.choice``: the fields of its ``choices[0]`` beside the delta (``logprobs``, Azure's
  ``content_filter_results``, OpenRouter's ``native_finish_reason``), ``<place>.delta`` / ``completion.message``:
  those of its delta or message (``refusal``, ``annotations``, OpenRouter's ``reasoning_details``);
- ``<place>.usage``: the ``usage`` object as sent (its detail fields, ``total_tokens``), replayed as it was.

A field whose value changes from one content event to the next (per-token data: ``logprobs`` contents, token
ids) has no single value to send again: it is left out and named in ``ResponseMeta.unkept``, which the recorders'
output lists, rather than dropped without a word.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import msgspec

from chunktape._cassettes.model import ResponseMeta
from chunktape._cassettes.redaction import env_secrets, redact_text
from chunktape._secrets import CREDENTIAL_HEADERS

__all__ = ["ResponseObserver", "ResponseSink", "kept_headers", "redacted_meta", "response_sink"]

_KEPT_HEADERS = frozenset({"x-request-id", "request-id", "retry-after", "retry-after-ms", "x-groq-region"})
_KEPT_PREFIXES = ("openai-", "x-ratelimit-", "ratelimit-", "anthropic-ratelimit-", "apim-request-id", "azureml-")
_NEVER_KEPT = frozenset(CREDENTIAL_HEADERS)
"""Credentials and cookies: never kept, whatever their prefix."""

_TOP = frozenset({"id", "object", "created", "model", "system_fingerprint", "choices", "usage"})
"""Top-level fields the renderer writes itself: every other one is an extra."""
_CHOICE = frozenset({"index", "delta", "message", "finish_reason"})
_DELTA = frozenset({"role", "content", "reasoning_content", "reasoning", "tool_calls"})
_MISSING = object()


def kept_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """The response headers a replay sends again: request ids, ``openai-*``, rate limits, ``Retry-After``."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    kept: dict[str, str] = {}
    for name, value in items:
        lower = name.lower()
        if lower not in _NEVER_KEPT and (lower in _KEPT_HEADERS or lower.startswith(_KEPT_PREFIXES)):
            kept.setdefault(lower, value)
    return kept


class ResponseObserver:
    """Watches one answer: ``event(obj)`` per chunk JSON (or ``completion(obj)``), then ``meta()``."""

    def __init__(self, headers: Mapping[str, str] | Iterable[tuple[str, str]] = (), *, streamed: bool = True) -> None:
        self._fields: dict[str, Any] = {}
        self._headers = kept_headers(headers) if headers else {}
        self._streamed = streamed
        self._extras: dict[str, dict[str, Any]] = {}
        self._unkept: set[str] = set()
        self.finish_sent = False
        """Whether a ``finish_reason`` arrived."""
        self._opened = False

    def event(self, obj: object) -> None:
        """One ``data:`` payload, decoded (anything but an object is ignored: the decoder reports it)."""
        if not isinstance(obj, dict):
            return
        choices = obj.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        if first is not None and first.get("finish_reason") is not None:
            self.finish_sent = True
            place = "finish"
        elif choices == [] and obj.get("usage") is not None:
            place = "usage"
        elif not self._opened:
            place = "first"
        else:
            place = "delta"
        self._opened = True
        self._observe(obj, place, first, "delta")

    def completion(self, obj: object) -> None:
        """A whole ``chat.completion`` (a non-streamed answer)."""
        if not isinstance(obj, dict):
            return
        self.finish_sent = True
        choices = obj.get("choices")
        first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        self._observe(obj, "completion", first, "message")

    def _observe(self, obj: dict[str, Any], place: str, choice: dict[str, Any] | None, inner: str) -> None:
        for field, kind in (("id", str), ("model", str), ("created", int), ("system_fingerprint", str)):
            value = obj.get(field)
            if field not in self._fields and isinstance(value, kind) and not isinstance(value, bool):
                self._fields[field] = value
        self._keep(place, {key: value for key, value in obj.items() if key not in _TOP})
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._keep(f"{place}.usage", {"usage": usage})
        if choice is not None:
            self._keep(f"{place}.choice", {key: value for key, value in choice.items() if key not in _CHOICE})
            body = choice.get(inner)
            if isinstance(body, dict):
                where = "completion.message" if inner == "message" else f"{place}.delta"
                self._keep(where, {key: value for key, value in body.items() if key not in _DELTA})

    def _keep(self, place: str, fields: dict[str, Any]) -> None:
        """The first event at ``place`` sets its fields; a later one that sends a field with another value (or
        without it) makes that field one of the ``unkept``: it has no one value to send again."""
        kept = self._extras.get(place)
        if kept is None:
            if fields:
                self._extras[place] = dict(fields)
            return
        for key in set(kept) | set(fields):
            if kept.get(key, _MISSING) != fields.get(key, _MISSING):
                kept.pop(key, None)
                self._unkept.add(f"{key} ({place})")

    def meta(self) -> ResponseMeta:
        return ResponseMeta(
            id=self._fields.get("id"),
            model=self._fields.get("model"),
            created=self._fields.get("created"),
            system_fingerprint=self._fields.get("system_fingerprint"),
            headers=self._headers,
            streamed=self._streamed,
            finish_sent=self.finish_sent or not self._streamed,
            extras={place: fields for place, fields in self._extras.items() if fields},
            unkept=sorted(self._unkept),
        )


class ResponseSink:
    """Where an adapter that speaks HTTP puts the observer of each stream's answer while a recorder records it."""

    def __init__(self) -> None:
        self.observer: ResponseObserver | None = None


_SINK: ContextVar[ResponseSink | None] = ContextVar("chunktape_response_sink", default=None)


def response_sink() -> ContextVar[ResponseSink | None]:
    """The context variable a recorder sets around each step of its inner adapter's stream (and resets before it
    yields): an adapter reads it with ``.get()`` once, when its stream starts, and puts its observer there."""
    return _SINK


_meta_encoder = msgspec.json.Encoder()
_meta_decoder = msgspec.json.Decoder(ResponseMeta)


def redacted_meta(meta: ResponseMeta, secrets: Sequence[str]) -> ResponseMeta:
    """``meta`` with the credentials in use (``secrets``, the environment's) and key-shaped strings replaced."""
    text = _meta_encoder.encode(meta).decode()
    cleaned = redact_text(text, [*secrets, *env_secrets().values()])
    return meta if cleaned == text else _meta_decoder.decode(cleaned)
