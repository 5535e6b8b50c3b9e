"""``LlmAdapter.complete()``: one completed reply folded from ``stream()``, recorded and replayed as one call."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import msgspec
import pytest

from chunktape import RecordingAdapter, ReplayAdapter, Reply, check_reasoning
from chunktape._abort import AbortController
from chunktape._errors import ErrorCode, LlmError
from chunktape._protocol import (
    CallId,
    FinishReason,
    GenerateOptions,
    LlmAdapter,
    Message,
    ReasoningOption,
    ReplyBuilder,
    StreamChunk,
    TokenUsage,
    ToolCallBlock,
)
from chunktape.faults import HttpError, Truncate
from chunktape.providers._scripted import ScriptedAdapter, ScriptedToolCall, ScriptedTurn, script_chunks

OPTIONS = GenerateOptions(model="m", messages=[Message(role="user", content="hi")])
TURN = ScriptedTurn(
    reasoning="The user greets me.",
    text="Hello there, friend.",
    tool_calls=[
        ScriptedToolCall(id="c1", name="wave", arguments={"hand": "left"}),
        ScriptedToolCall(id="c2", name="smile"),
    ],
    usage=TokenUsage(input_tokens=5, output_tokens=9),
)
EXPECTED = Reply(
    text="Hello there, friend.",
    reasoning="The user greets me.",
    tool_calls=[
        ToolCallBlock(id=CallId("c1"), name="wave", arguments='{"hand":"left"}'),
        ToolCallBlock(id=CallId("c2"), name="smile", arguments="{}"),
    ],
    usage=TokenUsage(input_tokens=5, output_tokens=9),
    finish=FinishReason(kind="tool-calls"),
)


@pytest.mark.looptime
async def test_complete_folds_the_stream_into_one_reply() -> None:
    adapter = ScriptedAdapter([TURN], between_s=0.01)
    reply = await adapter.complete(OPTIONS)
    assert reply == EXPECTED
    assert adapter.calls == 1
    assert ReplyBuilder.fold(script_chunks(TURN)) == EXPECTED
    assert reply.message() == Message(
        role="assistant",
        content="Hello there, friend.",
        tool_calls=EXPECTED.tool_calls,
        reasoning_content="The user greets me.",
    )
    assert Reply(finish=FinishReason(kind="stop")).message() == Message(role="assistant")


@pytest.mark.looptime
async def test_a_complete_call_records_as_one_interaction_and_replays_as_the_same_reply(tmp_path: Path) -> None:
    path = tmp_path / "complete.msgpack"
    async with RecordingAdapter(ScriptedAdapter([TURN]), path) as recorder:
        recorded = await recorder.complete(OPTIONS)
    replay = ReplayAdapter(path)
    [interaction] = replay.cassette.interactions
    assert interaction.chunks == script_chunks(TURN)
    assert await replay.complete(OPTIONS) == recorded == EXPECTED
    replay.assert_all_played()
    with pytest.raises(LlmError) as raised:
        await replay.complete(OPTIONS)
    assert raised.value.code is ErrorCode.CASSETTE_EXHAUSTED


@pytest.mark.looptime
async def test_complete_raises_what_the_stream_raises_and_rejects_a_cut_off_stream(tmp_path: Path) -> None:
    path = tmp_path / "complete.msgpack"
    async with RecordingAdapter(ScriptedAdapter([TURN]), path) as recorder:
        await recorder.complete(OPTIONS)
    with pytest.raises(LlmError) as raised:
        await ReplayAdapter(path, faults=[HttpError(status=503)]).complete(OPTIONS)
    assert (raised.value.code, raised.value.status) == (ErrorCode.PROVIDER_HTTP_ERROR, 503)
    with pytest.raises(LlmError) as raised:
        await ReplayAdapter(path, faults=[Truncate(after_chunks=4)]).complete(OPTIONS)
    assert raised.value.code is ErrorCode.STREAM_ABORTED
    assert "after 4 chunk(s) without a finish chunk" in str(raised.value)
    controller = AbortController()
    controller.abort()
    with pytest.raises(LlmError) as raised:
        await ScriptedAdapter([TURN]).complete(msgspec.structs.replace(OPTIONS, signal=controller.signal))
    assert raised.value.code is ErrorCode.CANCELLED


class Closing(LlmAdapter):
    """Streams two chunks, then fails; remembers whether its generator was closed."""

    def __init__(self) -> None:
        self.closed = False

    @property
    def name(self) -> str:
        return "closing"

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        try:
            for chunk in script_chunks(ScriptedTurn(text="a b"))[:2]:
                yield chunk
            raise LlmError("broke", ErrorCode.STREAM_ABORTED)
        finally:
            self.closed = True


async def test_complete_closes_the_stream_and_an_override_is_used() -> None:
    adapter = Closing()
    with pytest.raises(LlmError):
        await adapter.complete(OPTIONS)
    assert adapter.closed

    class NonStreaming(Closing):
        async def complete(self, options: GenerateOptions) -> Reply:
            return Reply(text="from a non-streaming endpoint", finish=FinishReason(kind="stop"))

    assert (await NonStreaming().complete(OPTIONS)).text == "from a non-streaming endpoint"


@pytest.mark.parametrize(
    ("offered", "effort", "message"),
    [
        ((), "low", "'low' is not offered (offered: none)"),
        (("off", "high"), "max", "'max' is not offered (offered: ['off', 'high'])"),
        (("off", "high"), "off", None),
        ((), None, None),
    ],
)
def test_check_reasoning(offered: Sequence[str], effort: str | None, message: str | None) -> None:
    adapter = ScriptedAdapter([TURN], reasoning_options=[ReasoningOption(id=option) for option in offered])
    options = msgspec.structs.replace(OPTIONS, reasoning=effort)
    if message is None:
        check_reasoning(adapter, options)
        return
    with pytest.raises(LlmError) as raised:
        check_reasoning(adapter, options)
    assert raised.value.code is ErrorCode.UNSUPPORTED_OPTION
    assert message in str(raised.value)
