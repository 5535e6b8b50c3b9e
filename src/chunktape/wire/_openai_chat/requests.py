"""The request codec of OpenAI chat completions: ``GenerateOptions`` <-> the request body, both directions.

``options_to_openai_request`` builds the streaming body an adapter sends; ``options_from_openai_request`` reads
one back (the vcrpy import), and ``decode_chat_request`` reads one from raw body bytes, refusing what is not a
request (the replay server, the transports, the proxy), so a request matches its recording whichever way it
came in. Reasoning efforts map to request fields through ``REASONING_FIELDS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import NAMED_ON_THE_WIRE, CallId, GenerateOptions, Message, Role, ToolCallBlock, ToolSpec
from chunktape.wire._openai_chat.fields import tool_call_to_wire
from chunktape.wire._requests import (
    MAX_NESTING,
    DecodedRequest,
    delivery,
    generate_options,
    json_body,
    request_fields,
    request_tail,
    role_of,
    tool_spec,
    typed,
)

__all__ = [
    "DEEPSEEK_BASE_URL",
    "MAX_NESTING",
    "DEEPSEEK_REASONING",
    "OPENAI_REASONING",
    "REASONING_FIELDS",
    "decode_chat_request",
    "message_from_openai",
    "message_to_openai",
    "options_from_openai_request",
    "options_to_openai_request",
]

_encoder = msgspec.json.Encoder()

DEEPSEEK_BASE_URL = "https://api.deepseek.com"
"""The provider ``OpenAICompatAdapter`` and ``chunktape record`` default to (here, light, for the CLI's options)."""

DEEPSEEK_REASONING: Mapping[str, Mapping[str, Any]] = {
    "thinking": {"thinking": {"type": "enabled"}},
    "no-thinking": {"thinking": {"type": "disabled"}},
}
"""DeepSeek's thinking switch, as request fields per effort id."""

OPENAI_REASONING: Mapping[str, Mapping[str, Any]] = {
    effort: {"reasoning_effort": effort} for effort in ("low", "medium", "high")
}
"""The ``reasoning_effort`` most OpenAI-compatible providers accept."""

REASONING_FIELDS: Mapping[str, Mapping[str, Any]] = {**DEEPSEEK_REASONING, **OPENAI_REASONING}
"""Request fields per reasoning effort, in both vocabularies ``OpenAICompatAdapter`` speaks: decoding a request
(``options_from_openai_request(body, reasoning=REASONING_FIELDS)``) maps them back to ``reasoning=<effort>``."""


def message_to_openai(message: Message) -> dict[str, Any]:
    """One message; ``reasoning_content`` goes back only on assistant tool-call turns (DeepSeek's rule)."""
    content = message.content if message.content_parts is None else message.content_parts
    wire: dict[str, Any] = {"role": message.role, "content": content}
    if message.name is not None:
        wire["name"] = message.name
    if message.role == "tool":
        if message.tool_call_id is None:
            raise LlmError("a tool message needs tool_call_id", ErrorCode.UNSUPPORTED_OPTION)
        wire["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        if message.role != "assistant":
            raise LlmError(f"tool_calls on a {message.role} message", ErrorCode.UNSUPPORTED_OPTION)
        wire["tool_calls"] = [tool_call_to_wire(call) for call in message.tool_calls]
        if message.reasoning_content is not None:
            wire["reasoning_content"] = message.reasoning_content
    wire.update(message.extra)
    return wire


def options_to_openai_request(
    options: GenerateOptions, *, model: str | None = None, extra_fields: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The streaming request body: messages, tools, limits, ``stream_options.include_usage``, then ``extra``.

    ``extra_fields`` (e.g. what a reasoning effort maps to) are merged before ``options.extra``.
    """
    body: dict[str, Any] = {
        "model": model or options.model,
        "messages": [message_to_openai(message) for message in options.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if options.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
            }
            for tool in options.tools
        ]
    if options.max_tokens is not None:
        body["max_tokens"] = options.max_tokens
    return request_tail(body, options, extra_fields)


_TRANSPORT_FIELDS = ("stream", "stream_options")
"""Request fields that say how to deliver the answer, not what to generate: never part of ``extra``."""
_ROLES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def _bad_request(message: str) -> LlmError:
    return LlmError(f"not an OpenAI chat-completions request: {message}", ErrorCode.UNSUPPORTED_OPTION)


def _content(content: Any, where: str) -> tuple[str | None, list[dict[str, Any]] | None]:
    """``content`` as a message's ``(content, content_parts)``.

    A string or null is the text. A list of text parts only is joined into the text, as it always was (their other
    keys, such as ``cache_control``, are not kept); a list with any other part (an image, audio, a file) is kept
    as given. Each part must be an object with a string ``type``, a text part with a string ``text``.
    """
    if content is None or isinstance(content, str):
        return content, None
    if not isinstance(content, list):
        raise _bad_request(f"{where}: content must be a string, a list of content parts or null")
    for position, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise _bad_request(f"{where}: content part {position} must be an object with a string `type`")
        if kind == "text" and not isinstance(part.get("text"), str):
            raise _bad_request(f"{where}: text part {position} needs a string `text`")
    if all(part["type"] == "text" for part in content):
        return "".join(part["text"] for part in content), None
    return None, content


def message_from_openai(wire: Any, where: str = "messages[0]") -> Message:
    """The inverse of ``message_to_openai``."""
    if not isinstance(wire, dict):
        raise _bad_request(f"{where} must be an object")
    role = role_of(wire, _ROLES, where, _bad_request)
    calls: list[ToolCallBlock] = []
    listed = wire.get("tool_calls")
    if listed is not None and not isinstance(listed, list):
        raise _bad_request(f"{where}.tool_calls must be a list, got {type(listed).__name__}")
    for position, call in enumerate(listed or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _bad_request(f"{where}.tool_calls[{position}] needs function.name")
        arguments = function.get("arguments")
        calls.append(
            ToolCallBlock(
                id=CallId(str(call.get("id") or f"call_{position}")),
                name=function["name"],
                arguments=arguments if isinstance(arguments, str) else _encoder.encode(arguments or {}).decode(),
            )
        )
    content, parts = _content(wire.get("content"), where)
    return Message(
        role=role,
        content=content,
        content_parts=parts,
        tool_calls=calls,
        tool_call_id=typed(wire.get("tool_call_id"), str | None, f"{where}.tool_call_id", _bad_request),
        name=typed(wire.get("name"), str | None, f"{where}.name", _bad_request),
        reasoning_content=typed(wire.get("reasoning_content"), str | None, f"{where}.reasoning_content", _bad_request)
        if calls
        else None,
        extra={key: value for key, value in wire.items() if key not in NAMED_ON_THE_WIRE},  # the rest as it came
    )


def _provider_tool(tool: object) -> bool:
    """A tool the provider runs itself, named by its own type (OpenRouter's ``openrouter:web_search``)."""
    return isinstance(tool, dict) and isinstance(tool.get("type"), str) and tool["type"] != "function"


def options_from_openai_request(
    body: Any, *, reasoning: Mapping[str, Mapping[str, Any]] | None = None
) -> GenerateOptions:
    """The inverse of ``options_to_openai_request``: a chat-completions request body as ``GenerateOptions``.

    ``stream`` and ``stream_options`` are dropped (they say how to deliver, not what to generate). When the
    body carries exactly the fields one of ``reasoning``'s efforts maps to (e.g. DeepSeek's
    ``{"thinking": {"type": "enabled"}}``), they become ``reasoning=<effort id>``; every other field goes to
    ``extra``. Raises ``LlmError(UNSUPPORTED_OPTION)`` for a body this format cannot represent.
    """
    model, rest = request_fields(body, _bad_request, transport=_TRANSPORT_FIELDS)
    messages = rest.pop("messages", None)
    if not isinstance(messages, list):
        raise _bad_request("`messages` must be a list")
    tools: list[ToolSpec] = []
    listed = rest.get("tools")
    if listed is not None and not isinstance(listed, list):
        raise _bad_request(f"`tools` must be a list of tools, got {type(listed).__name__}")
    if listed is not None and not any(_provider_tool(tool) for tool in listed):
        del rest["tools"]
        for position, tool in enumerate(listed):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise _bad_request(f"tools[{position}] must be a function tool with a name")
            tools.append(tool_spec(function, position, _bad_request, schema="parameters"))
    # A list holding a provider's own tool (OpenRouter's ``openrouter:web_search``) stays whole in ``extra``, sent
    # back as given.
    choices = rest.get("n")
    if choices is not None and (type(choices) is not int or choices != 1):
        raise _bad_request(f"`n` is {choices!r:.80}: one choice (n=1) is recorded and replayed, never more")
    max_tokens = typed(rest.pop("max_tokens", None), int | None, "max_tokens", _bad_request)
    if max_tokens is None and "max_completion_tokens" in rest:
        max_tokens = typed(rest.pop("max_completion_tokens"), int | None, "max_completion_tokens", _bad_request)
    temperature = typed(rest.pop("temperature", None), float | None, "temperature", _bad_request)
    effort: str | None = None
    for name, fields in (reasoning or {}).items() if rest else ():
        # The key test first, in C: most requests name no effort, and a generator per effort costs more than it.
        if fields and fields.keys() <= rest.keys() and all(rest[key] == value for key, value in fields.items()):
            effort = name
            for key in fields:
                del rest[key]
            break
    return generate_options(
        _bad_request,
        model=model,
        messages=[message_from_openai(message, f"messages[{i}]") for i, message in enumerate(messages)],
        tools=tools,
        max_tokens=max_tokens,
        temperature=temperature,
        reasoning=effort,
        extra=rest,
    )


def decode_chat_request(raw: bytes, *, model: str | None = None) -> DecodedRequest:
    """A chat-completions request body as ``GenerateOptions`` and its delivery flags (``stream``,
    ``stream_options.include_usage``). ``model``: the model the route names (Azure's deployment in
    ``/openai/deployments/{name}/chat/completions``), taken when the body names none.

    Anything that is not such a request (not JSON, nested too deeply, a field of the wrong type) raises
    ``LlmError(UNSUPPORTED_OPTION)`` naming the problem; nothing else escapes (``benchmarks/fuzz.py`` checks).
    """
    body: Any = json_body(raw, _bad_request)
    if model is not None and isinstance(body, dict) and body.get("model") is None:
        body = {**body, "model": model}
    options = options_from_openai_request(body, reasoning=REASONING_FIELDS)
    streaming, include_usage = delivery(body, _bad_request, options=True)
    return DecodedRequest(options, streaming, include_usage)
