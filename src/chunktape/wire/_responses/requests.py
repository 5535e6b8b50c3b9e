"""The request codec of OpenAI Responses: ``GenerateOptions`` <-> the ``/v1/responses`` request body.

``input`` (a string, or a list of items) is the messages: a string is one user message; a message item with a
role is a message (``developer`` reads as ``system``; content that is one plain text part, or a string, is its
``content``, other content is kept in ``content_parts``); ``function_call`` items are the tool calls of the
assistant message before them; a ``function_call_output`` is a ``tool`` message; any other item (a ``reasoning``
item sent back) is kept whole as an assistant message's ``extra["item"]``. ``instructions`` is a leading system
message. Function tools are ``ToolSpec``s (a list holding any other tool is kept whole in ``extra``);
``max_output_tokens`` is ``max_tokens``; ``reasoning: {"effort": e}`` is the reasoning effort ``e``; every other
field goes to ``extra``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import CallId, GenerateOptions, Message, Role, ToolCallBlock
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
    "OPENAI_BASE_URL",
    "RESPONSES_REASONING",
    "decode_responses_request",
    "options_from_responses_request",
    "options_to_responses_request",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"
RESPONSES_REASONING: dict[str, dict[str, Any]] = {
    effort: {"reasoning": {"effort": effort}} for effort in ("minimal", "low", "medium", "high")
}
"""The reasoning efforts ``OpenAIResponsesAdapter`` offers by default, as request fields."""

_TOOL_FIELDS = frozenset({"type", "name", "description", "parameters"})
_ROLES: dict[str, Role] = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TRANSPORT = ("stream", "stream_options")


def _bad(message: str) -> LlmError:
    return LlmError(f"not an OpenAI Responses request: {message}", ErrorCode.UNSUPPORTED_OPTION)


def _function_tool(tool: dict[str, Any]) -> bool:
    return tool.get("type") == "function" and set(tool) <= _TOOL_FIELDS


def _message_to_items(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        if message.tool_call_id is None:
            raise LlmError("a tool message needs tool_call_id", ErrorCode.UNSUPPORTED_OPTION)
        output = message.content_parts if message.content_parts is not None else (message.content or "")
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": output, **message.extra}]
    if set(message.extra) == {"item"} and message.content is None and message.content_parts is None:
        return [message.extra["item"]]
    items: list[dict[str, Any]] = []
    content = message.content_parts if message.content_parts is not None else message.content
    if content is not None or not message.tool_calls:
        items.append({"role": message.role, "content": content if content is not None else "", **message.extra})
    for call in message.tool_calls:
        if message.role != "assistant":
            raise LlmError(f"tool_calls on a {message.role} message", ErrorCode.UNSUPPORTED_OPTION)
        items.append({"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments})
    return items


def options_to_responses_request(
    options: GenerateOptions, *, model: str | None = None, extra_fields: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The streaming request body: every message as input items, tools, limits, then ``extra``."""
    body: dict[str, Any] = {
        "model": model or options.model,
        "input": [item for message in options.messages for item in _message_to_items(message)],
        "stream": True,
    }
    if options.tools:
        body["tools"] = [
            {"type": "function", "name": tool.name, "description": tool.description, "parameters": tool.parameters}
            for tool in options.tools
        ]
    if options.max_tokens is not None:
        body["max_output_tokens"] = options.max_tokens
    return request_tail(body, options, extra_fields)


def _content(content: Any, where: str) -> tuple[str | None, list[dict[str, Any]] | None]:
    if content is None or isinstance(content, str):
        return content, None
    if not isinstance(content, list) or not all(isinstance(part, dict) for part in content):
        raise _bad(f"{where}: content must be a string or a list of content parts")
    if (
        len(content) == 1
        and set(content[0]) == {"type", "text"}
        and content[0]["type"] in ("input_text", "output_text")
    ):
        text = content[0]["text"]
        if isinstance(text, str):
            return text, None
    return None, list(content)


def options_from_responses_request(body: Any) -> GenerateOptions:
    """The inverse of ``options_to_responses_request``: a Responses request body as ``GenerateOptions``."""
    model, rest = request_fields(body, _bad, transport=_TRANSPORT)
    messages: list[Message] = []
    instructions = rest.pop("instructions", None)
    if isinstance(instructions, str):
        messages.append(Message(role="system", content=instructions))
    elif instructions is not None:
        raise _bad("`instructions` must be a string")
    wire_input = rest.pop("input", None)
    if isinstance(wire_input, str):
        messages.append(Message(role="user", content=wire_input))
    elif isinstance(wire_input, list):
        for position, item in enumerate(wire_input):
            where = f"input[{position}]"
            if not isinstance(item, dict):
                raise _bad(f"{where} must be an object")
            kind = item.get("type", "message" if "role" in item else None)
            if kind == "message" and "role" in item:
                role = role_of(item, _ROLES, where, _bad)
                text, parts = _content(item.get("content"), where)
                extra = {key: value for key, value in item.items() if key not in ("role", "content")}
                if extra == {"type": "message"}:
                    extra = {}
                messages.append(Message(role=role, content=text, content_parts=parts, extra=extra))
            elif kind == "function_call":
                call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
                if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
                    raise _bad(f"{where}: a function_call needs string call_id, name and arguments")
                call = ToolCallBlock(id=CallId(call_id), name=name, arguments=arguments)
                last = messages[-1] if messages else None
                if last is not None and last.role == "assistant" and not last.extra:
                    messages[-1] = msgspec.structs.replace(last, tool_calls=[*last.tool_calls, call])
                else:
                    messages.append(Message(role="assistant", tool_calls=[call]))
            elif kind == "function_call_output":
                call_id, output = item.get("call_id"), item.get("output")
                if not isinstance(call_id, str):
                    raise _bad(f"{where}: a function_call_output needs a string call_id")
                text, parts = _content(output, where)
                extra = {key: value for key, value in item.items() if key not in ("type", "call_id", "output")}
                messages.append(
                    Message(role="tool", tool_call_id=call_id, content=text, content_parts=parts, extra=extra)
                )
            else:
                messages.append(Message(role="assistant", extra={"item": item}))
    elif wire_input is not None:
        raise _bad("`input` must be a string or a list of items")
    tools = custom_tools(rest, _function_tool, _bad, schema="parameters")
    max_tokens = typed(rest.pop("max_output_tokens", None), int | None, "max_output_tokens", _bad)
    temperature = typed(rest.pop("temperature", None), float | None, "temperature", _bad)
    effort: str | None = None
    reasoning = rest.get("reasoning")
    if isinstance(reasoning, dict) and set(reasoning) == {"effort"} and isinstance(reasoning["effort"], str):
        effort = reasoning["effort"]
        del rest["reasoning"]
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


def decode_responses_request(raw: bytes) -> DecodedRequest:
    """A ``/v1/responses`` request body as ``GenerateOptions`` and whether it streams (a Responses stream always ends
    with its usage); anything that is not such a request raises ``LlmError(UNSUPPORTED_OPTION)`` naming the
    problem."""
    body: Any = json_body(raw, _bad)
    options = options_from_responses_request(body)
    return DecodedRequest(options, delivery(body, _bad, options=True)[0], include_usage=True)
