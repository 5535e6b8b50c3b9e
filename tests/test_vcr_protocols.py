"""``import-vcr`` reads every protocol the HTTP faces speak, as public projects' cassettes hold them: Anthropic
Messages (``/v1/messages``) and OpenAI Responses (``/v1/responses``) beside chat completions, streamed or whole,
errors in each provider's shape; each decoded by its protocol's own decoder, so it replays to that provider's SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import yaml

from chunktape import BlockEnd, ErrorCode, Raised, TextDelta, ToolCallBlock
from chunktape.http import ReplayTransport, import_vcr
from chunktape.http._vcr import read_vcr
from chunktape.wire import AnthropicDecoder, ResponsesDecoder
from chunktape.wire._decoding import decode_body
from protocol_streams import messages_stream, responses_stream

OFFLINE = "http://127.0.0.1:9"
MESSAGES_REQUEST = {
    "model": "claude-test-1",
    "max_tokens": 256,
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "stream": True,
}
RESPONSES_REQUEST = {"model": "gpt-test-1", "input": "Weather in Paris?", "stream": True}


def _exchange(uri: str, request: dict[str, Any], body: str | bytes, status: int = 200, ctype: str = "") -> Any:
    text = body.decode() if isinstance(body, bytes) else body
    ctype = ctype or ("text/event-stream; charset=utf-8" if text.startswith("event:") else "application/json")
    return {
        "request": {"body": json.dumps(request), "headers": {}, "method": "POST", "uri": uri},
        "response": {
            "body": {"string": text},
            "headers": {"content-type": [ctype], "request-id": ["req_vcr_1"]},
            "status": {"code": status, "message": "OK"},
        },
    }


def _cassette(path: Path, *exchanges: Any) -> Path:
    path.write_text(yaml.safe_dump({"interactions": list(exchanges), "version": 1}), encoding="utf-8")
    return path


def test_an_anthropic_stream_imports_as_its_decoder_reads_it(tmp_path: Path) -> None:
    body = messages_stream()
    uri = "https://api.anthropic.com/v1/messages"
    (interaction,) = import_vcr(_cassette(tmp_path / "c.yaml", _exchange(uri, MESSAGES_REQUEST, body))).interactions
    assert [event.chunk for event in interaction.events] == decode_body(body, AnthropicDecoder())
    assert interaction.request.model == "claude-test-1"
    assert interaction.request.max_tokens == 256
    assert interaction.response is not None
    assert interaction.response.id == "msg_synthetic"
    assert interaction.response.headers["request-id"] == "req_vcr_1"


def test_a_responses_stream_imports_as_its_decoder_reads_it(tmp_path: Path) -> None:
    body = responses_stream()
    uri = "https://api.openai.com/v1/responses"
    (interaction,) = import_vcr(_cassette(tmp_path / "c.yaml", _exchange(uri, RESPONSES_REQUEST, body))).interactions
    assert [event.chunk for event in interaction.events] == decode_body(body, ResponsesDecoder())
    assert interaction.response is not None
    assert interaction.response.id == "resp_synthetic"


async def test_an_imported_anthropic_stream_replays_to_the_anthropic_sdk(tmp_path: Path) -> None:
    uri = "https://api.anthropic.com/v1/messages"
    source = _cassette(tmp_path / "c.yaml", _exchange(uri, MESSAGES_REQUEST, messages_stream()))
    from chunktape import save_cassette

    save_cassette(import_vcr(source), tmp_path / "c.msgpack")
    client = httpx2.AsyncClient(transport=ReplayTransport(tmp_path / "c.msgpack"))
    sdk = anthropic.AsyncAnthropic(base_url=OFFLINE, api_key="k", http_client=client, max_retries=0)
    question: Any = MESSAGES_REQUEST["messages"]
    async with sdk.messages.stream(model="claude-test-1", max_tokens=256, messages=question) as stream:
        message = await stream.get_final_message()
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[0].signature == "c2lnbmVk"  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"
    await client.aclose()


async def test_an_imported_responses_stream_replays_to_the_openai_sdk(tmp_path: Path) -> None:
    uri = "https://api.openai.com/v1/responses"
    source = _cassette(tmp_path / "c.yaml", _exchange(uri, RESPONSES_REQUEST, responses_stream()))
    from chunktape import save_cassette

    save_cassette(import_vcr(source), tmp_path / "c.msgpack")
    client2 = httpx2.AsyncClient(transport=ReplayTransport(tmp_path / "c.msgpack"))
    sdk = openai.AsyncOpenAI(base_url=OFFLINE + "/v1", api_key="k", http_client=client2, max_retries=0)
    stream = await sdk.responses.create(model="gpt-test-1", input="Weather in Paris?", stream=True)
    kinds = [event.type async for event in stream]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds
    await client2.aclose()


def test_whole_answers_and_errors_of_each_protocol(tmp_path: Path) -> None:
    message = {
        "id": "msg_whole",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-1",
        "content": [
            {"type": "text", "text": "Sunny."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 3},
    }
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    whole = {**MESSAGES_REQUEST, "stream": False}
    uri = "https://api.anthropic.com/v1/messages"
    path = _cassette(
        tmp_path / "c.yaml",
        _exchange(uri, whole, json.dumps(message)),
        _exchange(uri, MESSAGES_REQUEST, json.dumps(overloaded), status=529),
    )
    answer, error = import_vcr(path).interactions
    assert [e.chunk.text for e in answer.events if isinstance(e.chunk, TextDelta)] == ["Sunny."]
    calls = [e.chunk.block for e in answer.events if isinstance(e.chunk, BlockEnd)]
    assert [call.name for call in calls if isinstance(call, ToolCallBlock)] == ["get_weather"]
    assert answer.response is not None
    assert answer.response.streamed is False
    assert isinstance(error.outcome, Raised)
    assert error.outcome.status == 529
    assert "Overloaded" in error.outcome.message


def test_a_cassette_of_every_protocol_imports_them_all_and_names_what_it_skips(tmp_path: Path) -> None:
    chat = (
        'data: {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": null}]}\n\n'
        'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n'
    )
    chat_request = {"model": "gpt-test-1", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    embeddings = {
        "request": {"body": "{}", "headers": {}, "method": "POST", "uri": "https://api.openai.com/v1/embeddings"},
        "response": {"body": {"string": "{}"}, "headers": {}, "status": {"code": 200, "message": "OK"}},
    }
    path = _cassette(
        tmp_path / "c.yaml",
        _exchange("https://api.openai.com/v1/chat/completions", chat_request, chat, ctype="text/event-stream"),
        _exchange("https://api.anthropic.com/v1/messages", MESSAGES_REQUEST, messages_stream()),
        embeddings,
        _exchange("https://api.openai.com/v1/responses", RESPONSES_REQUEST, responses_stream()),
    )
    imported = read_vcr(path)
    assert [i.request.model for i in imported.cassette.interactions] == ["gpt-test-1", "claude-test-1", "gpt-test-1"]
    (note,) = imported.notes
    assert "#2" in note
    assert "embeddings" in note
    assert "skipped" in note


@pytest.mark.parametrize("route", ["/v1/threads/thread_1/messages", "/v1/messages", "/v1/responses"])
def test_a_request_another_api_sends_on_the_same_route_is_skipped_with_a_note(tmp_path: Path, route: str) -> None:
    """OpenAI's Assistants post to ``/threads/{id}/messages``: a body the route's protocol cannot read is skipped."""
    from chunktape import LlmError

    bad = {"role": "user", "content": "hi", "input": 5}
    path = _cassette(tmp_path / "c.yaml", _exchange(f"https://api.example.com{route}", bad, "{}"))
    with pytest.raises(LlmError) as caught:
        import_vcr(path)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
    assert "no exchange of a protocol chunktape records" in caught.value.message
    good = _exchange("https://api.anthropic.com/v1/messages", MESSAGES_REQUEST, messages_stream())
    imported = read_vcr(_cassette(tmp_path / "d.yaml", _exchange(f"https://api.example.com{route}", bad, "{}"), good))
    assert len(imported.cassette.interactions) == 1
    (note,) = imported.notes
    assert note.startswith("vcr interaction #0")
    assert "skipped, its request body is not a" in note


def test_a_whole_responses_answer_keeps_its_own_status(tmp_path: Path) -> None:
    """A background request is answered ``queued`` with no output: its replay says ``queued`` too, not completed."""
    from chunktape import save_cassette

    request = {"model": "gpt-test-1", "input": "Weather in Paris?", "background": True}
    queued = {"id": "resp_bg", "object": "response", "created_at": 1, "model": "gpt-test-1", "status": "queued"}
    queued |= {"output": [], "usage": None}
    uri = "https://api.openai.com/v1/responses"
    save_cassette(
        import_vcr(_cassette(tmp_path / "c.yaml", _exchange(uri, request, json.dumps(queued)))), tmp_path / "c.msgpack"
    )
    with httpx2.Client(transport=ReplayTransport(tmp_path / "c.msgpack")) as client:
        answer = client.post(f"{OFFLINE}/v1/responses", json=request).json()
    assert (answer["id"], answer["status"], answer["output"]) == ("resp_bg", "queued", [])


def test_a_gzipped_cassette_imports_as_its_text_and_an_empty_or_broken_one_is_one_line(tmp_path: Path) -> None:
    """Projects whose persister gzips their cassettes (LangChain's ``.yaml.gz``); the file is read once, bounded."""
    import gzip

    from chunktape import LlmError

    plain = _cassette(
        tmp_path / "c.yaml", _exchange("https://api.anthropic.com/v1/messages", MESSAGES_REQUEST, messages_stream())
    )
    packed = tmp_path / "c.yaml.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert import_vcr(packed).interactions == import_vcr(plain).interactions
    for name, data, said in [
        ("empty.yaml", b"", "is empty"),
        ("cut.yaml.gz", gzip.compress(plain.read_bytes())[:200], "a gzip-compressed file that does not decompress"),
    ]:
        (tmp_path / name).write_bytes(data)
        with pytest.raises(LlmError) as caught:
            import_vcr(tmp_path / name)
        assert caught.value.code is ErrorCode.CASSETTE_CORRUPT
        assert said in caught.value.message
