"""An agent's next turn carries the model's reasoning back the way its provider takes it: Anthropic's thinking as the
signed (or redacted) blocks it sent, DeepSeek's as ``reasoning_content``; an OpenAI Responses reasoning item is not
sent back in the turn (the API runs function calls without it). Run through the agent loop against a provider on
127.0.0.1, so the second request is the body a real API would get."""

from __future__ import annotations

import json
from typing import Any

from chunktape import GenerateOptions, Message, ReplyBuilder, ToolSpec
from chunktape.harness import Conversation, ToolResultEvent, ToolRunner, run_agent
from chunktape.providers import AnthropicAdapter, OpenAIResponsesAdapter
from fake_provider import FakeProvider, FakeResponse
from protocol_streams import events, messages_stream, responses_stream

WEATHER = ToolSpec(name="get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})
OPTIONS = GenerateOptions(model="m", messages=[Message(role="user", content="Weather in Paris?")], tools=[WEATHER])
TOOLS = {"get_weather": lambda city: f"sunny in {city}"}


def _anthropic_answer(*blocks: dict[str, Any]) -> bytes:
    """A Messages stream of whole ``blocks`` (each started with its content, then stopped), ending its turn."""
    start = {"id": "msg_2", "type": "message", "role": "assistant", "model": "m", "content": []}
    items: list[dict[str, Any]] = [{"type": "message_start", "message": {**start, "usage": {"input_tokens": 3}}}]
    for index, block in enumerate(blocks):
        items.append({"type": "content_block_start", "index": index, "content_block": block})
        items.append({"type": "content_block_stop", "index": index})
    items.append({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}})
    return events(*items, {"type": "message_stop"})


async def _second_request(fake_provider: FakeProvider, adapter: Any, first: bytes, second: bytes) -> Any:
    fake_provider.enqueue(FakeResponse(body=first), FakeResponse(body=second))
    seen = [event async for event in run_agent(adapter, OPTIONS, TOOLS)]
    assert [e.result for e in seen if isinstance(e, ToolResultEvent)] == ["sunny in Paris"], seen
    assert len(fake_provider.requests) == 2
    return fake_provider.requests[1].json


async def test_anthropic_thinking_goes_back_as_its_signed_block_before_the_tool_use(
    fake_provider: FakeProvider,
) -> None:
    adapter = AnthropicAdapter(base_url=fake_provider.url, api_key="k")
    body = await _second_request(fake_provider, adapter, messages_stream(), _anthropic_answer(_text("It is sunny.")))
    assistant = body["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Weather needs a tool.", "signature": "c2lnbmVk"},
            {"type": "text", "text": "Checking Paris."},
            {"type": "tool_use", "id": "toolu_paris", "name": "get_weather", "input": {"city": "Paris"}},
        ],
    }
    assert body["messages"][2]["content"][0]["type"] == "tool_result"


async def test_a_conversation_sends_the_signed_thinking_back_too(fake_provider: FakeProvider) -> None:
    """``Conversation`` (what ``chunktape record`` drives) builds its tool-call turn the same way."""
    fake_provider.enqueue(FakeResponse(body=messages_stream()), FakeResponse(body=_anthropic_answer(_text("Sunny."))))
    adapter = AnthropicAdapter(base_url=fake_provider.url, api_key="k")
    conversation = Conversation(adapter, OPTIONS, tools=ToolRunner(TOOLS))
    assert await conversation.agent_turn() is None
    sent = fake_provider.requests[1].json["messages"][1]["content"]
    assert [block["type"] for block in sent] == ["thinking", "text", "tool_use"]
    assert sent[0]["signature"] == "c2lnbmVk"
    assert conversation.options.messages[-1] == Message(role="assistant", content="Sunny.")


async def test_redacted_thinking_goes_back_as_sent(fake_provider: FakeProvider) -> None:
    redacted = {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"}
    first = messages_stream().replace(
        b'"content_block": {"type": "thinking", "thinking": "", "signature": ""}',
        json.dumps({"content_block": redacted})[1:-1].encode(),
    )
    first = b"".join(
        line + b"\n"
        for line in first.split(b"\n")
        if b'"thinking_delta"' not in line and b'"signature_delta"' not in line
    )
    first = first.replace(b"\n\n\n", b"\n\n")
    adapter = AnthropicAdapter(base_url=fake_provider.url, api_key="k")
    body = await _second_request(fake_provider, adapter, first, _anthropic_answer(_text("Sunny.")))
    assert body["messages"][1]["content"][0] == redacted


async def test_a_responses_reasoning_item_is_not_sent_back_as_reasoning_content(fake_provider: FakeProvider) -> None:
    adapter = OpenAIResponsesAdapter(base_url=fake_provider.url + "/v1", api_key="k")
    second = responses_stream().split(b"event: response.output_item.added")[0]  # only its start and ...
    done = (
        b'event: response.completed\ndata: {"type": "response.completed", "response": {"id": "resp_2", '
        b'"status": "completed", "output": [], "usage": {"input_tokens": 1, "output_tokens": 1, '
        b'"total_tokens": 2}}}\n\n'
    )
    body = await _second_request(fake_provider, adapter, responses_stream(), second + done)
    kinds = [item.get("type", item.get("role")) for item in body["input"]]
    assert "reasoning" not in kinds
    assert "function_call" in kinds
    assert "function_call_output" in kinds


def test_plain_reasoning_still_goes_back_as_reasoning_content() -> None:
    from chunktape import (
        BlockEnd,
        BlockStart,
        CallId,
        Finish,
        FinishReason,
        ReasoningBlock,
        ReasoningDelta,
        ToolCallBlock,
    )

    call = ToolCallBlock(id=CallId("c1"), name="get_weather", arguments='{"city": "Paris"}')
    reply = ReplyBuilder.fold(
        [
            BlockStart(index=0, block_type="reasoning"),
            ReasoningDelta(index=0, text="think"),
            BlockEnd(index=0, block=ReasoningBlock(text="think")),
            BlockStart(index=1, block_type="tool-call"),
            BlockEnd(index=1, block=call),
            Finish(reason=FinishReason(kind="tool-calls")),
        ]
    )
    assert reply.message() == Message(role="assistant", tool_calls=[call], reasoning_content="think")


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
