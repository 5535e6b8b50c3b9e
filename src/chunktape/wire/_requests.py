"""What every request codec shares: reading a JSON body safely, typed fields, and the nesting bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from chunktape._errors import LlmError

__all__ = ["MAX_NESTING", "json_body", "too_deep", "typed"]

MAX_NESTING = 100
"""The deepest a request body may nest lists and objects: well below what the JSON codec (bound by Python's
recursion limit) can encode again when the request is matched or its tool arguments are re-encoded."""

_decoder = msgspec.json.Decoder()
_OPTIONAL: tuple[Any, ...] = (str | None, int | None, float | None)
_TEXT: tuple[Any, ...] = (str, str | None)


def typed(value: Any, kind: Any, field: str, bad: Callable[[str], LlmError]) -> Any:
    """``value`` as ``kind`` (strictly: ``"5"`` is not an int), or ``bad(...)`` naming ``field``."""
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
