"""What the three request codecs read alike (``chunktape.wire._requests``): the body, its model, the roles of its
messages, its function tools and the typed fields, each refused with the protocol's own ``UNSUPPORTED_OPTION``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from chunktape import ErrorCode, LlmError, ToolSpec
from chunktape.wire._anthropic import decode_messages_request
from chunktape.wire._openai_chat import decode_chat_request
from chunktape.wire._requests import DecodedRequest, custom_tools, request_fields, role_of
from chunktape.wire._responses import decode_responses_request

PROTOCOLS: dict[str, tuple[Callable[[bytes], DecodedRequest], str, str]] = {
    "chat": (decode_chat_request, "messages", "not an OpenAI chat-completions request"),
    "anthropic": (decode_messages_request, "messages", "not an Anthropic Messages request"),
    "responses": (decode_responses_request, "input", "not an OpenAI Responses request"),
}


def _refused(protocol: str, body: Any) -> str:
    decode, _, prefix = PROTOCOLS[protocol]
    with pytest.raises(LlmError) as raised:
        decode(msgspec.json.encode(body))
    assert raised.value.code == ErrorCode.UNSUPPORTED_OPTION
    assert raised.value.message.startswith(f"{prefix}: ")
    return raised.value.message.removeprefix(f"{prefix}: ")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_codec_refuses_what_is_no_request_alike(protocol: str) -> None:
    _, messages, _ = PROTOCOLS[protocol]
    assert _refused(protocol, [1]) == "the body must be a JSON object, got list"
    assert _refused(protocol, {"model": 5, messages: []}) == "`model` must be a string"
    assert _refused(protocol, {"model": "m", messages: [], "tools": {}}).startswith("`tools` must be a list")
    assert _refused(protocol, {"model": "m", messages: [], "temperature": "hot"}).startswith("`temperature`: ")


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("role", ["robot", ["user"], {"a": 1}, None])
def test_every_codec_refuses_a_role_of_any_other_value_naming_the_valid_ones(protocol: str, role: Any) -> None:
    _, messages, _ = PROTOCOLS[protocol]
    problem = _refused(protocol, {"model": "m", messages: [{"role": role, "content": "hi"}]})
    assert problem.startswith(f"{messages}[0]: unknown role {role!r} (valid: ")


def test_request_fields_leaves_out_how_to_deliver() -> None:
    def bad(message: str) -> LlmError:
        return LlmError(message, ErrorCode.UNSUPPORTED_OPTION)

    body = {"model": "m", "stream": True, "stream_options": {}, "seed": 1}
    assert request_fields(body, bad, transport=("stream", "stream_options")) == ("m", {"seed": 1})
    assert role_of({"role": "developer"}, {"developer": "system"}, "input[0]", bad) == "system"


def test_custom_tools_keeps_a_list_with_a_server_tool_whole() -> None:
    def bad(message: str) -> LlmError:
        return LlmError(message, ErrorCode.UNSUPPORTED_OPTION)

    mine = {"name": "add", "description": "adds", "input_schema": {"type": "object"}}
    rest: dict[str, Any] = {"tools": [mine]}
    assert custom_tools(rest, lambda tool: "type" not in tool, bad, schema="input_schema") == [
        ToolSpec(name="add", description="adds", parameters={"type": "object"})
    ]
    assert rest == {}
    server = {"type": "web_search_20250305", "name": "web_search"}
    rest = {"tools": [mine, server]}
    assert custom_tools(rest, lambda tool: "type" not in tool, bad, schema="input_schema") == []
    assert rest == {"tools": [mine, server]}


def test_an_anthropic_system_turn_inside_the_conversation_stays_in_its_place() -> None:
    """The leading system prompt is the ``system`` field; a ``system`` turn later in ``messages`` (Anthropic's
    ``tool_addition``) is a system message where it was, and is sent back there."""
    from chunktape.wire._anthropic import options_to_anthropic_request

    addition = [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "lookup"}}]
    body = {
        "model": "m",
        "max_tokens": 16,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": addition},
            {"role": "user", "content": "again"},
        ],
        "stream": True,
    }
    options = decode_messages_request(msgspec.json.encode(body)).options
    assert [(m.role, m.content, m.content_parts) for m in options.messages] == [
        ("system", "Be brief.", None),
        ("user", "hi", None),
        ("system", None, addition),
        ("user", "again", None),
    ]
    assert options_to_anthropic_request(options, max_tokens=16) == body


def test_a_chat_request_with_a_providers_own_tool_keeps_its_tools_as_given() -> None:
    """OpenRouter's server tools ride in ``tools`` beside function tools: the list is kept whole and sent back."""
    from chunktape.wire._openai_chat import options_to_openai_request

    tools = [
        {"type": "openrouter:web_search", "parameters": {"max_uses": 1}},
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
    ]
    body = {"model": "m", "messages": [{"role": "user", "content": "news?"}], "tools": tools, "stream": True}
    options = decode_chat_request(msgspec.json.encode(body)).options
    assert options.tools == []
    assert options.extra["tools"] == tools
    assert options_to_openai_request(options)["tools"] == tools
    with pytest.raises(LlmError):  # a list of function tools is still read as one, and a broken one refused
        decode_chat_request(msgspec.json.encode({**body, "tools": [{"type": "function", "function": {}}]}))
