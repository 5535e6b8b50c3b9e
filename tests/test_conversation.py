"""``Conversation``: a person-driven conversation, one call per turn, every tool call answered before the next."""

from __future__ import annotations

from chunktape import ErrorCode, GenerateOptions, Message, StreamChunk, TextDelta
from chunktape.harness import Conversation, ToolResultEvent, ToolRunner
from chunktape.providers import ScriptedAdapter, ScriptedToolCall, ScriptedTurn
from chunktape.providers._scripted import ScriptedError


def _options(text: str) -> GenerateOptions:
    return GenerateOptions(model="m", messages=[Message(role="user", content=text)])


async def test_a_tool_turn_is_answered_and_the_model_asked_again_until_it_stops_calling() -> None:
    adapter = ScriptedAdapter(
        [
            ScriptedTurn(tool_calls=[ScriptedToolCall(name="weather", arguments={"city": "Oslo"})]),
            ScriptedTurn(tool_calls=[ScriptedToolCall(name="weather", arguments="[1, 2]")]),
            ScriptedTurn(text="sunny"),
        ]
    )
    chunks: list[StreamChunk] = []
    results: list[ToolResultEvent] = []
    conversation = Conversation(
        adapter,
        _options("weather?"),
        tools=ToolRunner({"weather": lambda city: f"sunny in {city}"}),
        on_chunk=chunks.append,
        on_tool_result=results.append,
    )
    assert await conversation.agent_turn() is None
    assert [message.role for message in conversation.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert results[0].content == "sunny in Oslo"
    assert results[1].is_error  # arguments that are not a JSON object: the model is told so, not the person
    assert conversation.messages[-1].content == "sunny"
    assert any(isinstance(chunk, TextDelta) for chunk in chunks)


async def test_a_failed_turn_is_returned_not_raised_and_can_be_rewound() -> None:
    adapter = ScriptedAdapter([ScriptedTurn(error=ScriptedError(status=503, message="busy")), ScriptedTurn(text="ok")])
    conversation = Conversation(adapter, _options("hi"))
    mark = conversation.mark()
    failure = await conversation.agent_turn()
    assert failure is not None
    assert failure.code is ErrorCode.PROVIDER_HTTP_ERROR
    conversation.rewind(mark)
    conversation.add(Message(role="user", content="again"))
    assert await conversation.agent_turn() is None
    assert [message.content for message in conversation.messages] == ["hi", "again", "ok"]
