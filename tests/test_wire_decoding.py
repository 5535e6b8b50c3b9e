"""The rules every protocol's stream decoder keeps alike (``chunktape.wire._decoding``): an event the body ended inside
is a broken stream, an event that does not parse is an invalid response, a body that ends before the provider
finished is a broken stream, and the usage comes just before the finish."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from chunktape import ErrorCode, Finish, FinishReason, LlmError, TokenUsage, UsageChunk
from chunktape.wire import AnthropicDecoder, OpenAIChatDecoder, ResponsesDecoder, SseParser
from chunktape.wire._decoding import StreamDecoder, decode_body, decode_event, ending, event_object, require_finished

DECODERS: list[Callable[[], StreamDecoder]] = [OpenAIChatDecoder, AnthropicDecoder, ResponsesDecoder]
CUT = b'data: {"type": "message_start", "mess'


@pytest.mark.parametrize("new_decoder", DECODERS)
def test_every_decoder_reads_an_event_the_body_ended_inside_as_a_broken_stream(
    new_decoder: Callable[[], StreamDecoder],
) -> None:
    with pytest.raises(LlmError) as raised:
        decode_body(CUT, new_decoder())
    assert raised.value.code == ErrorCode.STREAM_ABORTED
    assert "the stream ended in the middle of an event" in str(raised.value)


@pytest.mark.parametrize("new_decoder", DECODERS)
def test_every_decoder_reads_a_complete_event_that_does_not_parse_as_an_invalid_response(
    new_decoder: Callable[[], StreamDecoder],
) -> None:
    with pytest.raises(LlmError) as raised:
        decode_body(CUT + b"\n\n", new_decoder())
    assert raised.value.code == ErrorCode.INVALID_RESPONSE
    assert "unparseable" in str(raised.value)


@pytest.mark.parametrize("new_decoder", DECODERS)
def test_every_decoder_reads_a_body_with_no_end_as_a_broken_stream(new_decoder: Callable[[], StreamDecoder]) -> None:
    with pytest.raises(LlmError) as raised:
        decode_body(b": keep-alive\n\n", new_decoder())
    assert raised.value.code == ErrorCode.STREAM_ABORTED
    assert raised.value.message == "the stream ended before the provider finished it"


def test_decode_body_feeds_the_decoder_as_an_adapter_would() -> None:
    body = b'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}\n\ndata: [DONE]'
    parser, decoder = SseParser(), OpenAIChatDecoder()
    streamed = [chunk for item in parser.feed(body) for chunk in decoder.feed_item(item)]
    streamed += [chunk for item in parser.close() for chunk in decoder.feed_item(item, unterminated=True)]
    assert decode_body(body, OpenAIChatDecoder()) == [*streamed, *decoder.close()]


def test_decode_event_names_what_the_data_should_have_been() -> None:
    with pytest.raises(LlmError) as raised:
        decode_event("[1", msgspec.json.Decoder(), unterminated=False, what="chunk")
    assert raised.value.message.startswith("unparseable chunk from the provider (")
    assert isinstance(raised.value.cause, msgspec.DecodeError)
    assert decode_event('{"a": 1}', msgspec.json.Decoder(dict[str, int]), unterminated=True) == {"a": 1}


def test_an_error_event_is_the_providers_error_whatever_its_data_holds() -> None:
    for data in ("overloaded, try again", "[1, 2]"):
        with pytest.raises(LlmError) as raised:
            event_object(data, unterminated=False, error_event=True)
        assert raised.value.code != ErrorCode.INVALID_RESPONSE
        assert "the provider sent an error event" in str(raised.value)
    with pytest.raises(LlmError, match="an event that is not a JSON object") as raised:
        event_object("[1, 2]", unterminated=False)
    assert raised.value.code == ErrorCode.INVALID_RESPONSE
    assert event_object('{"type": "ping"}', unterminated=False) == {"type": "ping"}


def test_require_finished_and_ending() -> None:
    require_finished(True)
    with pytest.raises(LlmError) as raised:
        require_finished(False)
    assert raised.value.code == ErrorCode.STREAM_ABORTED
    stop, usage = FinishReason(kind="stop"), TokenUsage(input_tokens=1, output_tokens=2)
    assert ending(None, stop) == [Finish(reason=stop)]
    assert ending(usage, stop) == [UsageChunk(usage=usage), Finish(reason=stop)]


def test_a_responses_item_said_done_after_the_next_one_opened_is_one_block_each() -> None:
    """OpenRouter opens the message item before it says the reasoning item is done; the blocks follow one another,
    and the late done (and its part's) end nothing twice."""
    from chunktape import BlockEnd, ReasoningBlock, TextBlock
    from chunktape.wire import ResponsesEncoder, decode_responses_sse
    from protocol_streams import events

    base = {"id": "resp_or", "object": "response", "created_at": 1, "model": "m", "status": "in_progress"}
    reasoning = {"type": "reasoning", "id": "rs_or", "summary": []}
    message = {"type": "message", "id": "msg_or", "role": "assistant", "status": "in_progress", "content": []}
    part = {"type": "output_text", "annotations": [], "text": "4"}
    body = events(
        {"type": "response.created", "response": base},
        {"type": "response.output_item.added", "output_index": 0, "item": reasoning},
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_or", "output_index": 0, "delta": "Add."},
        {"type": "response.output_item.added", "output_index": 1, "item": message},
        {"type": "response.output_text.delta", "item_id": "msg_or", "output_index": 1, "delta": "4"},
        {"type": "response.output_item.done", "output_index": 1, "item": {**message, "content": [part]}},
        {"type": "response.content_part.done", "item_id": "rs_or", "output_index": 0, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
        {"type": "response.completed", "response": {**base, "status": "completed", "output": []}},
    )
    chunks = decode_responses_sse(body)
    ended = [chunk.block for chunk in chunks if isinstance(chunk, BlockEnd)]
    assert ended == [ReasoningBlock(text="Add."), TextBlock(text="4")]
    encoder = ResponsesEncoder(model="m")
    replayed = encoder.start() + b"".join(encoder.feed(chunk) for chunk in chunks)
    assert [chunk.block for chunk in decode_responses_sse(replayed) if isinstance(chunk, BlockEnd)] == ended
    stray = {"type": "response.output_item.done", "output_index": 2, "item": {"type": "reasoning", "id": "rs_never"}}
    with pytest.raises(LlmError) as caught:  # a done for an item never opened is still a broken stream
        decode_responses_sse(body.replace(b"event: response.completed", events(stray) + b"event: response.completed"))
    assert caught.value.code is ErrorCode.INVALID_RESPONSE
