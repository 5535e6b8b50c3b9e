"""What every request codec shares. Reading a body: the JSON read safely (the nesting bound), the model and the
fields that only say how to deliver, roles, typed fields, function tools, the decoded request itself; writing one:
the order in which the caller's fields win.

Each protocol names its fields its own way; what it does with them is the same, so it is written here once, and every
reader reports what is wrong through the protocol's own ``bad`` (an ``UNSUPPORTED_OPTION`` naming the protocol).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple

import msgspec

from chunktape._errors import LlmError
from chunktape._protocol import GenerateOptions, Message, Role, ToolSpec

__all__ = [
    "INT_RANGE",
    "MAX_NESTING",
    "DecodedRequest",
    "custom_tools",
    "delivery",
    "generate_options",
    "json_body",
    "request_fields",
    "request_tail",
    "role_of",
    "tool_spec",
    "too_deep",
    "too_wide",
    "typed",
]

MAX_NESTING = 100
"""The deepest a request body may nest lists and objects: well below what the JSON codec (bound by Python's
recursion limit) can encode again when the request is matched or its tool arguments are re-encoded."""

INT_RANGE = (-(2**63), 2**64 - 1)
"""The integers a cassette stores (msgpack's): a request holding one outside them (``"seed": 1e30`` spelled out in
digits) could be replayed but never saved, so it is refused as it arrives, naming the field."""

_LONG_NUMBER = re.compile(rb"\d{19}")
"""A run of digits as long as the shortest integer outside ``INT_RANGE``: a body without one needs no walk."""

_decoder = msgspec.json.Decoder()
_OPTIONAL: tuple[Any, ...] = (str | None, int | None, float | None)
_TEXT: tuple[Any, ...] = (str, str | None)


def typed(value: Any, kind: Any, field: str, bad: Callable[[str], LlmError]) -> Any:
    """``value`` as ``kind`` (strictly: ``"5"`` is not an int), or ``bad(...)`` naming ``field``."""
    # The common cases without msgspec.convert, which parses a union type anew on every call (~3 us each).
    if value is None and kind in _OPTIONAL:
        return None
    if type(value) is str and kind in _TEXT:
        return value
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise bad(f"`{field}`: {exc} (got {value!r:.80})") from None


def json_body(raw: bytes, bad: Callable[[str], LlmError]) -> Any:
    """The decoded JSON of a request body; not JSON, or nested deeper than ``MAX_NESTING``, is ``bad(...)``."""
    try:
        body: Any = _decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise bad(f"the request body is not JSON ({exc})") from None
    except RecursionError:
        raise bad("the request body nests too deeply to decode") from None
    # Nesting needs an opening bracket per level: a body with few brackets cannot nest too deeply (no walk).
    deep = too_deep(body, MAX_NESTING) if raw.count(b"[") + raw.count(b"{") > MAX_NESTING else None
    if deep is not None:
        raise bad(f"field `{deep}` nests deeper than {MAX_NESTING} levels")
    wide = too_wide(body) if _LONG_NUMBER.search(raw) else None
    if wide is not None:
        low, high = INT_RANGE
        raise bad(f"field `{wide}` holds an integer outside {low}..{high}, more than a cassette can store")
    return body


def too_deep(body: object, limit: int) -> str | None:
    """The top-level field of ``body`` that nests lists/objects more than ``limit`` deep, if any (iterative: no
    recursion to run out of)."""
    if not isinstance(body, dict):
        return None
    stack: list[tuple[object, int, str]] = [(value, 2, str(key)) for key, value in body.items()]
    while stack:
        item, depth, field = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return field
        stack.extend((child, depth + 1, field) for child in children if isinstance(child, dict | list))
    return None


def too_wide(body: object) -> str | None:
    """The top-level field of ``body`` that holds an integer outside ``INT_RANGE``, if any (iterative)."""
    if not isinstance(body, dict):
        return None
    low, high = INT_RANGE
    stack: list[tuple[object, str]] = [(value, str(key)) for key, value in body.items()]
    while stack:
        item, field = stack.pop()
        if type(item) is int:
            if not low <= item <= high:
                return field
        elif isinstance(item, dict):
            stack.extend((child, field) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, field) for child in item)
    return None


def delivery(body: Mapping[str, Any], bad: Callable[[str], LlmError], *, options: bool = False) -> tuple[bool, bool]:
    """Whether a request body asks for a stream, and (``options``: the protocol has ``stream_options``) for the
    stream's usage. ``stream`` is true, false or absent, ``stream_options`` an object or absent, its
    ``include_usage`` true, false or absent: any other value is ``bad(...)``, as the provider's own 400 is (a
    ``"stream": "yes"`` answered as if it were false would hand the client a JSON body it never asked for)."""
    stream = body.get("stream")
    if stream is not None and type(stream) is not bool:
        raise bad(f"`stream` must be true or false, got {stream!r:.80}")
    if not options:
        return stream is True, False
    extra = body.get("stream_options")
    if extra is not None and not isinstance(extra, dict):
        raise bad(f"`stream_options` must be an object, got {extra!r:.80}")
    usage = (extra or {}).get("include_usage")
    if usage is not None and type(usage) is not bool:
        raise bad(f"`stream_options.include_usage` must be true or false, got {usage!r:.80}")
    return stream is True, stream is True and usage is True


class DecodedRequest(NamedTuple):
    """A request body as its protocol reads it: what to generate, whether to stream it, and whether the stream is to
    report its usage (chat completions only when asked; Messages and Responses streams always do)."""

    options: GenerateOptions
    streaming: bool
    include_usage: bool


def request_tail(body: dict[str, Any], options: GenerateOptions, extra_fields: dict[str, Any] | None) -> dict[str, Any]:
    """``body`` (a protocol's request, built from ``options``) ended as every protocol ends one: the temperature, when
    set, then ``extra_fields`` (what a reasoning effort adds), then ``options.extra``, which wins over all."""
    if options.temperature is not None:
        body["temperature"] = options.temperature
    body.update(extra_fields or {})
    body.update(options.extra)
    return body


def request_fields(
    body: Any, bad: Callable[[str], LlmError], *, transport: Collection[str]
) -> tuple[str, dict[str, Any]]:
    """A request body's model and its other fields, less the ``transport`` ones (they say how to deliver the answer,
    not what to generate: never part of ``extra``). A body that is no JSON object, or names no string model, is
    ``bad(...)``."""
    if not isinstance(body, dict):
        raise bad(f"the body must be a JSON object, got {type(body).__name__}")
    rest = {key: value for key, value in body.items() if key not in transport}
    model = rest.pop("model", None)
    if not isinstance(model, str):
        raise bad("`model` must be a string")
    return model, rest


def role_of(wire: Mapping[str, Any], roles: Mapping[str, Role], where: str, bad: Callable[[str], LlmError]) -> Role:
    """The role of the message ``wire`` at ``where``, by the protocol's ``roles`` (its names for ours); any other
    value, of any type, is ``bad(...)`` listing the valid ones."""
    given = wire.get("role")
    role = roles.get(given) if isinstance(given, str) else None
    if role is None:
        raise bad(f"{where}: unknown role {given!r} (valid: {', '.join(roles)})")
    return role


def tool_spec(tool: Mapping[str, Any], position: int, bad: Callable[[str], LlmError], *, schema: str) -> ToolSpec:
    """A function tool whose ``name`` is a string as a ``ToolSpec``: its ``description`` and its JSON schema (the
    field ``schema`` names), each of its type or ``bad(...)`` naming ``tools[position]``."""
    return ToolSpec(
        name=tool["name"],
        description=typed(tool.get("description") or "", str, f"tools[{position}].description", bad),
        parameters=typed(tool.get(schema) or {}, dict[str, Any], f"tools[{position}].{schema}", bad),
    )


def custom_tools(
    rest: dict[str, Any], accepts: Callable[[dict[str, Any]], bool], bad: Callable[[str], LlmError], *, schema: str
) -> list[ToolSpec]:
    """The ``tools`` of a protocol that has built-in tools beside the caller's own: when every one listed is a named
    tool that ``accepts`` takes for the caller's, they leave ``rest`` as ``ToolSpec``s; a list holding any other (a
    server tool) stays in ``rest`` whole, to be sent back as given. A ``tools`` that is no list is ``bad(...)``."""
    listed = rest.get("tools")
    if isinstance(listed, list) and all(
        isinstance(tool, dict) and isinstance(tool.get("name"), str) and accepts(tool) for tool in listed
    ):
        del rest["tools"]
        return [tool_spec(tool, position, bad, schema=schema) for position, tool in enumerate(listed)]
    if listed is not None and not isinstance(listed, list):
        raise bad(f"`tools` must be a list, got {type(listed).__name__}")
    return []


def generate_options(
    bad: Callable[[str], LlmError],
    *,
    model: str,
    messages: list[Message],
    tools: list[ToolSpec],
    max_tokens: int | None,
    temperature: float | None,
    reasoning: str | None,
    extra: dict[str, Any],
) -> GenerateOptions:
    """The ``GenerateOptions`` a request body's fields make; what they refuse is ``bad(...)``, so a request that is
    not one raises nothing but the protocol's own error."""
    try:
        return GenerateOptions(
            model=model,
            messages=messages,
            tools=tools,
            max_tokens=max_tokens,
            temperature=temperature,
            reasoning=reasoning,
            extra=extra,
        )
    except (TypeError, ValueError, msgspec.ValidationError) as exc:
        raise bad(str(exc)) from exc
