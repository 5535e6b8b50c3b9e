"""The request codec of Anthropic Messages: ``GenerateOptions`` <-> the ``/v1/messages`` request body.

``options_to_anthropic_request`` builds the body ``AnthropicAdapter`` sends; ``options_from_anthropic_request``
reads one back and ``decode_messages_request`` reads one from raw bytes (the replay server, the transports), so a
request matches its recording whichever way it came in: decoding what the encoder built gives the options back.

The mapping: ``system`` (a string, or text blocks) is the leading system message, and a ``system`` turn later in
``messages`` (a ``tool_addition``) a system message in its place; a message whose content is a
string, or one plain text block, has ``content``; an assistant turn of text and ``tool_use`` blocks has
``content`` and ``tool_calls``; a user turn of ``tool_result`` blocks is one ``tool`` message per result (its
other fields, such as ``is_error``, in ``extra``); any other content (images, documents, thinking blocks with
their signatures, ``cache_control``) is kept as given in ``content_parts``. Custom tools are ``ToolSpec``s; a
``tools`` list holding anything else (a server tool such as ``web_search_20250305``) is kept whole in ``extra``.
``thinking`` is the reasoning effort (``thinking_fields``); every other field goes to ``extra``.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import NAMED_ON_THE_WIRE, CallId, GenerateOptions, Message, Role, ToolCallBlock
from chunktape.wire._requests import (
    DecodedRequest,
    custom_tools,
    delivery,
    generate_options,
    json_body,
    request_fields,
    request_tail,
    role_of,
    typed,
)

__all__ = [
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "decode_messages_request",
    "options_from_anthropic_request",
    "options_to_anthropic_request",
    "thinking_effort",
    "thinking_fields",
]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header the adapter sends."""
DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` is required by the Messages API: what is sent when the options leave it unset."""

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()
_BUDGET = re.compile(r"thinking-([0-9]+)")
_TOOL_FIELDS = frozenset({"name", "description", "input_schema"})
_EMPTY_SCHEMA = {"type": "object", "properties": {}}
_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "system": "system"}
"""The roles of ``messages``: a ``system`` turn there (a ``tool_addition`` mid-conversation) stays in its place;
the leading system prompt is the ``system`` field."""


def _bad(message: str) -> LlmError:
    return LlmError(f"not an Anthropic Messages request: {message}", ErrorCode.UNSUPPORTED_OPTION)


def thinking_fields(effort: str) -> dict[str, Any] | None:
    """The request fields of a reasoning effort id: ``thinking-<budget>`` (extended thinking with that token
    budget), ``adaptive`` or ``no-thinking``; None for an id that is none of these."""
    if effort == "no-thinking":
        return {"thinking": {"type": "disabled"}}
    if effort == "adaptive":
        return {"thinking": {"type": "adaptive"}}
    budget = _BUDGET.fullmatch(effort)
    if budget is not None:
        return {"thinking": {"type": "enabled", "budget_tokens": int(budget.group(1))}}
    return None


def thinking_effort(thinking: Any) -> str | None:
    """The effort id a ``thinking`` field is (the inverse of ``thinking_fields``), or None when it is none."""
    if not isinstance(thinking, dict):
        return None
    kind = thinking.get("type")
    if kind == "disabled" and len(thinking) == 1:
        return "no-thinking"
    if kind == "adaptive" and len(thinking) == 1:
        return "adaptive"
    budget = thinking.get("budget_tokens")
    if kind == "enabled" and len(thinking) == 2 and isinstance(budget, int) and not isinstance(budget, bool):
        return f"thinking-{budget}" if budget >= 0 else None
    return None


def _arguments(text: str) -> Any:
    try:
        return _decoder.decode(text)
    except msgspec.DecodeError:
        raise LlmError(f"tool-call arguments are not JSON: {text[:80]!r}", ErrorCode.UNSUPPORTED_OPTION) from None


def _content_of(message: Message) -> Any:
    return message.content_parts if message.content_parts is not None else message.content


def options_to_anthropic_request(
    options: GenerateOptions,
    *,
    model: str | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    extra_fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The streaming request body; system messages go to ``system``, consecutive tool results into one user turn.

    ``max_tokens`` is sent when the options leave it unset; ``extra_fields`` (what a reasoning effort maps to) are
    merged before ``options.extra``. Raises ``UNSUPPORTED_OPTION`` for what the API cannot take.
    """
    system: list[Any] = []
    messages: list[dict[str, Any]] = []
    for message in options.messages:
        if message.role == "system" and not messages:  # the leading ones are the system prompt
            system.append(_content_of(message))
            continue
        if message.role == "tool":
            if message.tool_call_id is None:
                raise LlmError("a tool message needs tool_call_id", ErrorCode.UNSUPPORTED_OPTION)
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
            content = _content_of(message)
            if content is not None:
                result["content"] = content
            result.update(message.extra)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "user" and last.get("_results"):
                last["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result], "_results": True})
            continue
        if message.tool_calls and message.role != "assistant":
            raise LlmError(f"tool_calls on a {message.role} message", ErrorCode.UNSUPPORTED_OPTION)
        content = _content_of(message)
        if message.tool_calls:
            blocks: list[Any] = []
            if isinstance(content, list):
                blocks.extend(content)
            elif content:
                blocks.append({"type": "text", "text": content})
            blocks.extend(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": _arguments(call.arguments)}
                for call in message.tool_calls
            )
            content = blocks
        wire: dict[str, Any] = {"role": message.role, "content": content if content is not None else ""}
        wire.update(message.extra)
        messages.append(wire)
    for message_wire in messages:
        message_wire.pop("_results", None)
    body: dict[str, Any] = {
        "model": model or options.model,
        "max_tokens": options.max_tokens if options.max_tokens is not None else max_tokens,
        "messages": messages,
        "stream": True,
    }
    if len(system) == 1:
        body["system"] = system[0]
    elif system:
        blocks = []
        for part in system:
            blocks.extend(part if isinstance(part, list) else [{"type": "text", "text": part or ""}])
        body["system"] = blocks
    if options.tools:
        tools = []
        for tool in options.tools:
            spec: dict[str, Any] = {"name": tool.name}
            if tool.description:
                spec["description"] = tool.description
            spec["input_schema"] = tool.parameters or _EMPTY_SCHEMA
            tools.append(spec)
        body["tools"] = tools
    return request_tail(body, options, extra_fields)


def _plain_text(content: Any) -> str | None:
    """The text of content that is a string or exactly one plain text block, else None."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and len(content) == 1:
        block = content[0]
        if isinstance(block, dict) and set(block) == {"type", "text"} and block["type"] == "text":
            text = block["text"]
            return text if isinstance(text, str) else None
    return None


def _parts(content: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
        raise _bad(f"{where}: content must be a string or a list of content blocks")
    for position, block in enumerate(content):
        if not isinstance(block.get("type"), str):
            raise _bad(f"{where}: content block {position} needs a string `type`")
    return list(content)


def _rest(wire: dict[str, Any], *used: str) -> dict[str, Any]:
    return {key: value for key, value in wire.items() if key not in used}


def _message(wire: Any, where: str) -> list[Message]:
    if not isinstance(wire, dict):
        raise _bad(f"{where} must be an object")
    role = role_of(wire, _ROLES, where, _bad)
    extra = _rest(wire, "role", "content")
    if set(extra) & NAMED_ON_THE_WIRE:
        raise _bad(f"{where}: fields {sorted(set(extra) & NAMED_ON_THE_WIRE)} are not message fields")
    content = wire.get("content")
    text = _plain_text(content)
    if text is not None:
        return [Message(role=role, content=text, extra=extra)]
    blocks = _parts(content, where)
    kinds = {block["type"] for block in blocks}
    if role == "user" and kinds == {"tool_result"} and not extra:
        results: list[Message | None] = []
        for position, block in enumerate(blocks):
            tool_use_id = block.get("tool_use_id")
            if not isinstance(tool_use_id, str):
                raise _bad(f"{where}.content[{position}]: a tool_result needs a string tool_use_id")
            result = block.get("content")
            others = _rest(block, "type", "tool_use_id", "content")
            if set(others) & NAMED_ON_THE_WIRE:
                results.append(None)
                break
            plain = _plain_text(result) if result is not None else None
            if (
                result is not None
                and plain is None
                and not (isinstance(result, list) and all(isinstance(part, dict) for part in result))
            ):
                raise _bad(f"{where}.content[{position}]: tool_result content must be a string or a list of blocks")
            results.append(
                Message(
                    role="tool",
                    tool_call_id=tool_use_id,
                    content=plain,
                    content_parts=None if result is None or plain is not None else result,
                    extra=others,
                )
            )
        if None not in results:
            return [message for message in results if message is not None]
    if role == "assistant" and kinds <= {"text", "tool_use"} and "tool_use" in kinds:
        texts = [block for block in blocks if block["type"] == "text"]
        calls = [block for block in blocks if block["type"] == "tool_use"]
        ordered = blocks == texts + calls and len(texts) <= 1 and (not texts or set(texts[0]) == {"type", "text"})
        if ordered and all(set(call) == {"type", "id", "name", "input"} for call in calls):
            tool_calls = []
            for position, call in enumerate(calls):
                if not isinstance(call["id"], str) or not isinstance(call["name"], str):
                    raise _bad(f"{where}: tool_use {position} needs a string id and name")
                tool_calls.append(
                    ToolCallBlock(
                        id=CallId(call["id"]), name=call["name"], arguments=_encoder.encode(call["input"]).decode()
                    )
                )
            text = texts[0]["text"] if texts else None
            return [
                Message(
                    role="assistant",
                    content=text if isinstance(text, str) else None,
                    tool_calls=tool_calls,
                    extra=extra,
                )
            ]
    return [Message(role=role, content_parts=blocks, extra=extra)]


def options_from_anthropic_request(body: Any) -> GenerateOptions:
    """The inverse of ``options_to_anthropic_request``: a Messages request body as ``GenerateOptions``.

    ``stream`` is dropped; ``thinking`` becomes the reasoning effort when it is one (``thinking_effort``). Raises
    ``LlmError(UNSUPPORTED_OPTION)`` for a body that is not a Messages request.
    """
    model, rest = request_fields(body, _bad, transport=("stream",))
    wire_messages = rest.pop("messages", None)
    if not isinstance(wire_messages, list):
        raise _bad("`messages` must be a list")
    messages: list[Message] = []
    if "system" in rest:
        system = rest.pop("system")
        text = _plain_text(system)
        if text is not None:
            messages.append(Message(role="system", content=text))
        elif system is not None:
            messages.append(Message(role="system", content_parts=_parts(system, "system")))
    for position, wire in enumerate(wire_messages):
        messages.extend(_message(wire, f"messages[{position}]"))
    tools = custom_tools(rest, lambda tool: set(tool) <= _TOOL_FIELDS, _bad, schema="input_schema")
    max_tokens = typed(rest.pop("max_tokens", None), int | None, "max_tokens", _bad)
    temperature = typed(rest.pop("temperature", None), float | None, "temperature", _bad)
    effort = thinking_effort(rest.get("thinking"))
    if effort is not None:
        del rest["thinking"]
    return generate_options(
        _bad,
        model=model,
        messages=messages,
        tools=tools,
        max_tokens=max_tokens,
        temperature=temperature,
        reasoning=effort,
        extra=rest,
    )


def decode_messages_request(raw: bytes) -> DecodedRequest:
    """A ``/v1/messages`` request body as ``GenerateOptions`` and whether it streams (a Messages stream always
    carries its usage); anything that is not such a request raises ``LlmError(UNSUPPORTED_OPTION)`` naming the
    problem."""
    body: Any = json_body(raw, _bad)
    options = options_from_anthropic_request(body)
    return DecodedRequest(options, delivery(body, _bad)[0], include_usage=True)
