"""Deciding which recorded interaction answers a request, and explaining it when none does.

A matcher is any ``(live, recorded) -> bool`` over two ``RecordedRequest``; built-in ones are referred to by
name, and ``match_on`` may be a name, a comma-separated string of names (``"model,messages,tools"``, as a
command line or an ini file gives it), a callable, or a list of these. The ``CASSETTE_MISMATCH`` error shows
the closest recorded request, a field-by-field diff, and which matchers failed, like vcrpy's best error message,
with credentials masked: it ends up in CI logs and the replay server's error body.

**What the default match ignores.** Frameworks (the openai SDK, pydantic-ai, langchain-openai, litellm) send
the same request in different spellings. The built-in matchers compare what changes the answer, and treat
documented defaults and no-ops as absent; nothing recorded is rewritten, only the comparison:

- tool-call ``arguments`` in messages: as JSON values (``{"city":"Paris"}`` equals ``{"city": "Paris"}``), as
  text when not JSON;
- message ``content``: ``""`` equals ``null``;
- tool ``parameters`` (a JSON schema): as JSON values, without ``additionalProperties: false`` and
  ``required: []``; ``{}`` equals ``{"type": "object", "properties": {}}`` (a tool's ``strict`` flag never
  reaches a recorded request);
- generation fields that are ``null``: absent;
- at their documented default, absent: ``n: 1``, ``temperature: 1``, ``top_p: 1``, ``frequency_penalty: 0``,
  ``presence_penalty: 0``, ``logprobs: false``, ``parallel_tool_calls: true``, ``tool_choice: "auto"`` (and
  ``"none"`` when there are no tools), ``stop: []``, ``response_format: {"type": "text"}``, ``logit_bias: {}``,
  ``modalities: ["text"]``;
- no-ops, always absent (they say who asks, or how and where to deliver, not what to generate): ``user``,
  ``store``, ``metadata``, ``service_tier``, ``prompt_cache_key``, ``safety_identifier``, ``stream``,
  ``stream_options``;
- ``stop: "x"`` equals ``stop: ["x"]``.

Everything else stays in the default match, so a request that could get a different answer misses:
``model``, the messages (roles, text, content parts such as images as JSON values, tool calls and their ids,
tool results), the tools, ``max_tokens``, ``temperature``, ``top_p`` and the penalties when not their defaults,
``seed``, ``stop`` with values, ``response_format`` (``json_object``, ``json_schema``), ``tool_choice`` other
than its default, ``parallel_tool_calls: false``, ``reasoning`` (``reasoning_effort``, DeepSeek's ``thinking``),
and any other provider field. ``fingerprint`` is the exact match (every field, byte for byte).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import msgspec

from chunktape._cassettes.model import RecordedRequest
from chunktape._errors import Advice, ErrorCode, LlmError
from chunktape._protocol import Message, ToolSpec
from chunktape._secrets import redact_text

__all__ = [
    "DEFAULT_MATCH",
    "MATCHERS",
    "MatchOn",
    "Matcher",
    "RequestMatcher",
    "diff_requests",
    "parse_match_on",
]

Matcher: TypeAlias = Callable[[RecordedRequest, RecordedRequest], bool]
"""``matcher(live, recorded)`` is true when ``recorded`` may answer ``live``."""

MatchOn: TypeAlias = str | Matcher | Sequence[str | Matcher]

_NO_OPS = frozenset(
    {"user", "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier", "stream", "stream_options"}
)
"""Request fields that never change the answer."""
_DEFAULTS: Mapping[str, Any] = {
    "n": 1,
    "temperature": 1,
    "top_p": 1,
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logprobs": False,
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "stop": [],
    "response_format": {"type": "text"},
    "logit_bias": {},
    "modalities": ["text"],
}
"""Generation fields at their documented default (OpenAI's chat-completions reference): the same as absent."""
_decoder = msgspec.json.Decoder()


def _settings(fields: Mapping[str, Any], tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """Request fields that can change the answer: ``null``, defaults and no-ops left out (the docstring's table)."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "stop" and isinstance(value, str):
            value = [value]
        elif key == "tool_choice" and value == "none" and not tools:
            continue
        if value is None or key in _NO_OPS or (key in _DEFAULTS and _DEFAULTS[key] == value):
            continue
        out[key] = value
    return out


def _generation(request: RecordedRequest) -> dict[str, Any]:
    named = {"max_tokens": request.max_tokens, "temperature": request.temperature, "reasoning": request.reasoning}
    return _settings({**request.extra, **named}, request.tools)


def _params(live: RecordedRequest, recorded: RecordedRequest) -> bool:
    if (
        live.max_tokens == recorded.max_tokens
        and live.temperature == recorded.temperature
        and live.reasoning == recorded.reasoning
        and live.extra == recorded.extra
    ):
        return True
    return _generation(live) == _generation(recorded)


def _json_value(text: str) -> Any:
    """Tool-call arguments as a JSON value, so re-serialised arguments compare equal; text when not JSON."""
    try:
        return ("json", _decoder.decode(text))
    except msgspec.DecodeError:
        return ("text", text)


_SAYS_NOTHING: tuple[Any, ...] = (None, [], {})
"""Values that carry nothing: an SDK's echo of a reply adds fields holding them (``"refusal": null``, litellm's
``"provider_specific_fields": {"refusal": null}``), a framework's own message omits those fields."""


def _said(value: Any) -> Any:
    """``value`` without the object fields, at any depth, that hold nothing (``_SAYS_NOTHING``)."""
    if not isinstance(value, dict):
        return value
    kept = ((key, _said(item)) for key, item in value.items())
    return {key: item for key, item in kept if item not in _SAYS_NOTHING}


def _message_key(message: Message) -> tuple[Any, ...]:
    calls = tuple((call.id, call.name, _json_value(call.arguments)) for call in message.tool_calls)
    return (
        message.role,
        message.content or None,
        message.content_parts,
        calls,
        message.tool_call_id,
        message.name,
        message.reasoning_content,
        _said(message.extra),
    )


def _same_messages(live: Sequence[Message], recorded: Sequence[Message]) -> bool:
    if live == recorded:
        return True
    if len(live) != len(recorded):
        return False
    return all(a == b or _message_key(a) == _message_key(b) for a, b in zip(live, recorded, strict=True))


def _schema(value: Any) -> Any:
    """A JSON schema without the no-op keywords frameworks add (``additionalProperties: false``, ``required: []``)."""
    if isinstance(value, dict):
        return {
            key: _schema(item)
            for key, item in value.items()
            if not ((key == "additionalProperties" and item is False) or (key == "required" and item == []))
        }
    if isinstance(value, list):
        return [_schema(item) for item in value]
    return value


def _parameters(parameters: dict[str, Any]) -> Any:
    """A tool's parameters schema as compared: no parameters at all is the empty object schema."""
    return _schema(parameters) if parameters else {"type": "object", "properties": {}}


def _same_tools(live: Sequence[ToolSpec], recorded: Sequence[ToolSpec]) -> bool:
    if live == recorded:
        return True
    if len(live) != len(recorded):
        return False
    return all(
        a == b
        or (a.name, a.description, _parameters(a.parameters)) == (b.name, b.description, _parameters(b.parameters))
        for a, b in zip(live, recorded, strict=True)
    )


def _field(name: str) -> Matcher:
    def match(live: RecordedRequest, recorded: RecordedRequest) -> bool:
        return bool(getattr(live, name) == getattr(recorded, name))

    match.__name__ = name
    return match


def _generation_field(name: str) -> Matcher:
    def match(live: RecordedRequest, recorded: RecordedRequest) -> bool:
        return _generation(live).get(name) == _generation(recorded).get(name)

    match.__name__ = name
    return match


def _extra(live: RecordedRequest, recorded: RecordedRequest) -> bool:
    return live.extra == recorded.extra or _settings(live.extra, live.tools) == _settings(
        recorded.extra, recorded.tools
    )


MATCHERS: dict[str, Matcher] = {
    "model": _field("model"),
    "messages": lambda live, recorded: _same_messages(live.messages, recorded.messages),
    "tools": lambda live, recorded: _same_tools(live.tools, recorded.tools),
    "max_tokens": _generation_field("max_tokens"),
    "temperature": _generation_field("temperature"),
    "reasoning": _generation_field("reasoning"),
    "extra": _extra,
    "params": _params,
    "last_message": lambda live, recorded: _same_messages(live.messages[-1:], recorded.messages[-1:]),
    "fingerprint": _field("fingerprint"),
}
"""Matchers by name; ``params`` is the generation parameters: max_tokens, temperature, reasoning, extra.
All but ``fingerprint`` compare as the module docstring's table says."""

DEFAULT_MATCH: tuple[str, ...] = ("model", "messages", "tools", "params")


def parse_match_on(match_on: MatchOn) -> tuple[str | Matcher, ...]:
    """``match_on`` as a tuple of known matcher names and callables; a string may hold several names separated
    by commas or spaces (``"model,messages,tools"``), as a command line, an ini file or a scenario file gives it.
    Raises ``INVALID_CONFIG`` listing the valid names for an unknown one, or for an empty ``match_on``."""
    items: Sequence[str | Matcher] = [match_on] if isinstance(match_on, str) or callable(match_on) else match_on
    parsed: list[str | Matcher] = []
    for item in items:
        if isinstance(item, str):
            for name in item.replace(",", " ").split():
                if name not in MATCHERS:
                    valid = ", ".join(sorted(MATCHERS))
                    raise LlmError(f"unknown matcher {name!r}; valid matchers: {valid}", ErrorCode.INVALID_CONFIG)
                parsed.append(name)
        elif callable(item):
            parsed.append(item)
        else:
            raise LlmError(f"a matcher must be a name or a callable, got {item!r}", ErrorCode.INVALID_CONFIG)
    if not parsed:
        valid = ", ".join(sorted(MATCHERS))
        raise LlmError(f"match_on names no matcher; valid matchers: {valid}", ErrorCode.INVALID_CONFIG)
    return tuple(parsed)


class RequestMatcher:
    """``match_on`` resolved once into named predicates; callable as ``matcher(live, recorded)``."""

    __slots__ = ("_checks", "_fast")

    def __init__(self, match_on: MatchOn = DEFAULT_MATCH) -> None:
        checks: list[tuple[str, Matcher]] = []
        for item in parse_match_on(match_on):
            if isinstance(item, str):
                checks.append((item, MATCHERS[item]))
            else:
                checks.append((getattr(item, "__name__", repr(item)), item))
        self._checks = tuple(checks)
        # The default set covers every request field: compare them inline, without a call per matcher.
        self._fast = tuple(name for name, _ in checks) == DEFAULT_MATCH

    def __call__(self, live: RecordedRequest, recorded: RecordedRequest) -> bool:
        if self._fast:
            return (
                live.model == recorded.model
                and _same_messages(live.messages, recorded.messages)
                and _same_tools(live.tools, recorded.tools)
                and _params(live, recorded)
            )
        return all(check(live, recorded) for _, check in self._checks)

    def failing(self, live: RecordedRequest, recorded: RecordedRequest) -> list[str]:
        """The names of the matchers that reject ``recorded`` for ``live``."""
        return [name for name, check in self._checks if not check(live, recorded)]

    def mismatch(self, live: RecordedRequest, recorded: Sequence[RecordedRequest], where: str) -> LlmError:
        """The ``CASSETTE_MISMATCH`` error for ``live``: the closest recorded request and a readable diff (its
        ``detail``, after the next step), advised ``RECORD_OR_MATCH`` so each face names its own knobs."""
        summary = f"model={live.model!r}, {len(live.messages)} message(s)"
        if not recorded:
            return LlmError(
                redact_text(f"no recorded interaction matches the request ({summary}): {where} holds no interactions"),
                ErrorCode.CASSETTE_MISMATCH,
                advice=Advice.RECORD_OR_MATCH,
            )
        scored = []
        for index, candidate in enumerate(recorded):
            diff = diff_requests(candidate, live)
            scored.append((len(self.failing(live, candidate)), len(diff), index, diff))
        _, _, index, diff = min(scored, key=lambda item: item[:3])
        failing = ", ".join(self.failing(live, recorded[index])) or "none"
        lines = "\n".join(f"    {line}" for line in diff[:12])
        more = f"\n    ... and {len(diff) - 12} more difference(s)" if len(diff) > 12 else ""
        return LlmError(
            redact_text(f"no recorded interaction in {where} matches the request ({summary})"),
            ErrorCode.CASSETTE_MISMATCH,
            advice=Advice.RECORD_OR_MATCH,
            detail=redact_text(
                f"Closest is interaction #{index} (failing matchers: {failing}), recorded vs requested:\n{lines}{more}"
            ),
        )


def diff_requests(
    recorded: RecordedRequest, live: RecordedRequest, *, names: tuple[str, str] = ("recorded", "requested")
) -> list[str]:
    """Readable differences ``path: recorded X, requested Y`` between two requests (fingerprints ignored); ``names``
    are the two sides' words (two files compared: their names)."""
    lines: list[str] = []
    _diff(_shown(recorded), _shown(live), "", lines, names)
    return lines


def _shown(request: RecordedRequest) -> Any:
    """The request as its diff shows it: no fingerprint, and no message field that says nothing (matching ignores
    those, so a request that misses for another reason does not list an SDK's empty echo fields as well)."""
    shown = msgspec.to_builtins(msgspec.structs.replace(request, fingerprint=""))
    for message in shown["messages"]:
        extra = _said(message.pop("extra", {}))
        if extra:
            message["extra"] = extra
    return shown


def _diff(old: Any, new: Any, path: str, out: list[str], names: tuple[str, str]) -> None:
    if old == new:
        return
    first, second = names
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted({*old, *new}, key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(f"{where}: {first} {_short(old[key])}, {second} (absent)")
            elif key not in old:
                out.append(f"{where}: {first} (absent), {second} {_short(new[key])}")
            else:
                _diff(old[key], new[key], where, out, names)
        return
    if isinstance(old, list) and isinstance(new, list):
        for position in range(max(len(old), len(new))):
            where = f"{path}[{position}]"
            if position >= len(new):
                out.append(f"{where}: {first} {_short(old[position])}, {second} (absent)")
            elif position >= len(old):
                out.append(f"{where}: {first} (absent), {second} {_short(new[position])}")
            else:
                _diff(old[position], new[position], where, out, names)
        return
    out.append(f"{path or 'request'}: {first} {_short(old)}, {second} {_short(new)}")


_MASK_MARGIN = 8192
"""More than any credential is long, in base64 too (a 4096-bit PEM key is some 3.2 KB): what is masked past the
shown part, so a key that starts in it is whole when masked, while a megabyte image is not scanned at all."""


def _short(value: Any, limit: int = 80) -> str:
    """``value`` for a diff line: credentials masked first, so that cutting it short cannot leave half a key."""
    text = msgspec.json.encode(value).decode() if not isinstance(value, str) else repr(value)
    text = redact_text(text[: limit + _MASK_MARGIN])
    return text if len(text) <= limit else text[: limit - 3] + "..."
