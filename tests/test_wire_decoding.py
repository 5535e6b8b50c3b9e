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
