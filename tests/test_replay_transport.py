"""ReplayTransport: chat completions answered from a chunk cassette in process, as the provider answered them."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, TypeVar

import httpx
import httpx2
import msgspec
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from chunktape import (
    Cassette,
    Completed,
    ErrorCode,
    Event,
    GenerateOptions,
    Interaction,
    LlmError,
    Message,
    Raised,
    RecordedRequest,
    Timing,
    load_cassette,
    save_cassette,
)
from chunktape._cassettes.model import ResponseMeta
from chunktape.faults import Corrupt, Disconnect, FailFirst, HttpError, Truncate
from chunktape.http import RecordingTransport, ReplayTransport, render_sse
from chunktape.wire._openai_chat import decode_openai_sse, options_to_openai_request
from fake_provider import chunk, sse, tool_delta
from helpers import interaction_of, text_stream

T = TypeVar("T", Interaction, ResponseMeta)
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "weather?"}]
REQUEST = RecordedRequest.from_options(
    GenerateOptions(model="gpt-4o-mini", messages=[Message(role="user", content="weather?")])
)
GROQ_BODY = sse(
    chunk({"role": "assistant", "content": ""}, x_groq={"id": "req_01"}),
    chunk({"content": "Sunny"}),
    chunk(tool_delta(0, '{"city": "Paris"}', id="call_1", name="weather")),
    chunk({}, finish_reason="tool_calls", x_groq={"usage": {"prompt_tokens": 5, "completion_tokens": 3}}),
)
META = ResponseMeta(
    id="chatcmpl-abc",
    model="gpt-4o-mini-2024-07-18",
    created=1700000000,
    system_fingerprint="fp_44709d6fcb",
    headers={"x-request-id": "req_42"},
    extras={"first": {"x_groq": {"id": "req_01"}}, "finish": {"x_groq": {"usage": {"prompt_tokens": 5}}}},
)


def _interaction(body: bytes, *, meta: ResponseMeta | None = META, gap_ns: int = 0) -> Interaction:
    chunks = decode_openai_sse(body)
    events = [Event(t_ns=gap_ns * (n + 1), chunk=c) for n, c in enumerate(chunks)]
    return Interaction(
        request=REQUEST, events=events, outcome=Completed(t_ns=gap_ns * (len(events) + 1)), response=meta
    )


def _cassette(tmp_path: Path, *interactions: Interaction) -> Path:
    path = tmp_path / "replay.msgpack"
    save_cassette(Cassette(interactions=list(interactions)), path)
    return path


def _sdk(transport: httpx2.AsyncBaseTransport, *, max_retries: int = 2) -> openai.AsyncOpenAI:
    client = httpx2.AsyncClient(transport=transport)
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key="test", http_client=client, max_retries=max_retries
    )


async def _collect(sdk: openai.AsyncOpenAI) -> tuple[str, list[str], list[str | None]]:
    stream = await sdk.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    text: list[str] = []
    calls: list[str] = []
    finishes: list[str | None] = []
    async for event in stream:
        assert (event.id, event.model, event.created) == ("chatcmpl-abc", "gpt-4o-mini-2024-07-18", 1700000000)
        assert event.system_fingerprint == "fp_44709d6fcb"
        for choice in event.choices:
            text.append(choice.delta.content or "")
            calls.extend(call.function.arguments or "" for call in choice.delta.tool_calls or () if call.function)
            finishes.append(choice.finish_reason)
    return "".join(text), calls, finishes


async def test_the_sdk_sees_the_recorded_metadata_not_placeholders(tmp_path: Path) -> None:
    transport = ReplayTransport(_cassette(tmp_path, _interaction(GROQ_BODY)), allow_repeats=True)
    sdk = _sdk(transport)
    raw = await sdk.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    assert raw.headers["x-request-id"] == "req_42"
    body = b"".join([piece async for piece in raw.http_response.aiter_bytes()])
    assert b'"x_groq":{"id":"req_01"}' in body
    assert b'"x_groq":{"usage":{"prompt_tokens":5}}' in body
    text, calls, finishes = await _collect(sdk)
    assert (text, calls) == ("Sunny", ['{"city": "Paris"}'])
    assert finishes[-1] == "tool_calls"


async def test_a_stream_recorded_without_finish_reason_replays_without_one(tmp_path: Path) -> None:
    body = sse(chunk({"content": "Hi"}))  # [DONE] but no finish_reason: the decoder counts it as stop
    meta = msgspec_replace(META, finish_sent=False)
    transport = ReplayTransport(_cassette(tmp_path, _interaction(body, meta=meta)))
    text, _, finishes = await _collect(_sdk(transport))
    assert text == "Hi"
    assert set(finishes) == {None}


def msgspec_replace(struct: T, **changes: object) -> T:
    return msgspec.structs.replace(struct, **changes)


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
def test_sync_clients_of_both_libraries_replay(tmp_path: Path, library: str) -> None:
    transport = ReplayTransport(_cassette(tmp_path, _interaction(GROQ_BODY)))
    client = httpx2.Client(transport=transport) if library == "httpx2" else httpx.Client(transport=transport)
    sdk = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="test", http_client=client)  # type: ignore[arg-type]
    stream = sdk.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    text = "".join(choice.delta.content or "" for event in stream for choice in event.choices)
    assert text == "Sunny"
    transport.assert_all_played()


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
async def test_a_replay_re_recorded_through_a_recording_transport_keeps_its_chunks(
    tmp_path: Path, library: str
) -> None:
    """chunktape's transports wrap each other for a client of either library (a copy of a cassette, re-timed)."""
    usage = {"x_groq": {"usage": {"prompt_tokens": 5, "completion_tokens": 3}}}  # as the body says: as recorded
    meta = msgspec.structs.replace(META, extras={**META.extras, "finish": usage})
    source = _cassette(tmp_path, _interaction(GROQ_BODY, meta=meta))
    copy = tmp_path / "copy.msgpack"
    transport = RecordingTransport(ReplayTransport(source), copy)
    client = httpx2.AsyncClient(transport=transport) if library == "httpx2" else httpx.AsyncClient(transport=transport)
    sdk = openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key="test", http_client=client)  # type: ignore[arg-type]
    assert await _collect(sdk) == ("Sunny", ['{"city": "Paris"}'], [None, None, None, "tool_calls"])
    await client.aclose()
    transport.close()
    recorded = load_cassette(copy).interactions
    assert [event.chunk for event in recorded[0].events] == decode_openai_sse(GROQ_BODY)


async def test_a_miss_raises_the_cassette_error_through_the_sdk_unchanged(tmp_path: Path) -> None:
    transport = ReplayTransport(_cassette(tmp_path, _interaction(GROQ_BODY)))
    sdk = _sdk(transport)
    with pytest.raises(LlmError) as mismatch:
        await sdk.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    assert mismatch.value.code is ErrorCode.CASSETTE_MISMATCH
    await _collect(sdk)
    with pytest.raises(LlmError) as exhausted:
        await sdk.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    assert exhausted.value.code is ErrorCode.CASSETTE_EXHAUSTED


async def test_an_injected_429_once_is_retried_by_the_sdk(tmp_path: Path) -> None:
    fault = FailFirst(n=1, fault=HttpError(status=429, retry_after=0.001))
    transport = ReplayTransport(_cassette(tmp_path, _interaction(GROQ_BODY)), faults=[fault])
    text, _, _ = await _collect(_sdk(transport))
    assert text == "Sunny"
    assert transport.injected[1:] == [None]
    assert transport.injected[0] is not None
    with pytest.raises(openai.RateLimitError):
        await _collect(
            _sdk(ReplayTransport(_cassette(tmp_path, _interaction(GROQ_BODY)), faults=["http-429"]), max_retries=0)
        )


async def test_a_disconnect_is_the_sdks_connection_error_and_leaves_the_interaction_unplayed(tmp_path: Path) -> None:
    transport = ReplayTransport(
        _cassette(tmp_path, _interaction(GROQ_BODY)), faults=[FailFirst(n=1, fault=Disconnect(after_chunks=1))]
    )
    sdk = _sdk(transport, max_retries=0)
    with pytest.raises(openai.APIConnectionError):
        await _collect(sdk)
    assert transport.playback.play_counts == [0]
    text, _, _ = await _collect(sdk)  # the retry replays it
    assert text == "Sunny"


async def test_a_recorded_429_then_success_replays_as_the_sdks_own_retry(tmp_path: Path) -> None:
    limited = Interaction(
        request=REQUEST,
        events=[],
        outcome=Raised(t_ns=1, code="PROVIDER_HTTP_ERROR", message="Rate limit reached", status=429, retry_after=0.001),
        response=ResponseMeta(headers={"x-request-id": "req_limited"}),
    )
    ok = msgspec_replace(_interaction(GROQ_BODY), attempt=2)
    transport = ReplayTransport(_cassette(tmp_path, limited, ok))
    text, _, _ = await _collect(_sdk(transport))
    assert text == "Sunny"
    assert transport.playback.play_counts == [1, 1]


async def test_a_recorded_reset_breaks_the_body(tmp_path: Path) -> None:
    cut = _interaction(GROQ_BODY)
    reset = msgspec_replace(
        cut, events=cut.events[:3], outcome=Raised(t_ns=9, code="STREAM_ABORTED", message="connection reset")
    )
    with pytest.raises(openai.APIConnectionError):
        await _collect(_sdk(ReplayTransport(_cassette(tmp_path, reset)), max_retries=0))


async def test_a_non_streamed_request_gets_the_whole_completion(tmp_path: Path) -> None:
    transport = ReplayTransport(_cassette(tmp_path, _interaction(GROQ_BODY)))
    answer = await _sdk(transport).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert (answer.id, answer.model, answer.system_fingerprint) == (
        "chatcmpl-abc",
        "gpt-4o-mini-2024-07-18",
        "fp_44709d6fcb",
    )
    assert answer.choices[0].message.content == "Sunny"
    assert answer.choices[0].finish_reason == "tool_calls"


@pytest.mark.looptime
async def test_recorded_timing_runs_in_virtual_time(tmp_path: Path) -> None:
    transport = ReplayTransport(
        _cassette(tmp_path, _interaction(GROQ_BODY, gap_ns=2 * 10**9)), timing=Timing.recorded()
    )
    loop = asyncio.get_running_loop()
    start = loop.time()
    text, _, _ = await _collect(_sdk(transport))
    assert text == "Sunny"
    assert loop.time() - start == pytest.approx(2.0 * (len(_interaction(GROQ_BODY).events) + 1))


def test_faults_with_no_wire_form_are_refused(tmp_path: Path) -> None:
    with pytest.raises(LlmError) as refused:
        ReplayTransport(_cassette(tmp_path, _interaction(GROQ_BODY)), faults=[Corrupt(kind="bad-index")])
    assert refused.value.code is ErrorCode.INVALID_CONFIG


def _provider(text: str, sent: list[bytes]) -> httpx2.MockTransport:
    """A provider that streams ``text`` to every request and keeps the bodies it was sent."""

    def reply(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.content)
        body = sse(chunk({"content": text}, finish_reason="stop"))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx2.MockTransport(reply)


async def _reply(sdk: openai.AsyncOpenAI, model: str, messages: Any) -> str:
    stream = await sdk.chat.completions.create(model=model, messages=messages, stream=True)
    return "".join([event.choices[0].delta.content or "" async for event in stream if event.choices])


def _vision(url: str) -> list[ChatCompletionMessageParam]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in "},
                {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
                {"type": "text", "text": "this picture?"},
            ],
        }
    ]


async def test_a_request_with_an_image_is_recorded_and_replayed_and_another_image_misses(tmp_path: Path) -> None:
    """Content parts beyond text (images, audio, files) are kept as sent: before, such a request could not be
    represented and went by unrecorded. A key in a part (a signed image URL) is redacted like any other."""
    key = "sk-live-abcdefghijklmnopqrstuvwxyz0123"
    sent: list[bytes] = []
    path = tmp_path / "vision.msgpack"
    picture = "https://img.test/cat.png?sig=" + key
    recording = RecordingTransport(_provider("A cat.", sent), path, redact=[key])
    async with _sdk(recording) as sdk:
        assert await _reply(sdk, "gpt-4o-mini", _vision(picture)) == "A cat."
    recording.close()
    assert key.encode() in sent[0]  # the provider got the picture's URL as sent
    assert key.encode() not in path.read_bytes()

    message = load_cassette(path).interactions[0].request.messages[0]
    assert message.content is None
    assert message.text == "what is in this picture?"
    assert message.content_parts is not None
    assert message.content_parts[1]["image_url"] == {"url": "https://img.test/cat.png?sig=[REDACTED]", "detail": "low"}

    async with _sdk(ReplayTransport(path, redact=[key])) as sdk:
        assert await _reply(sdk, "gpt-4o-mini", _vision(picture)) == "A cat."
        with pytest.raises(LlmError) as miss:
            await _reply(sdk, "gpt-4o-mini", _vision("https://img.test/dog.png"))
    assert miss.value.code is ErrorCode.CASSETTE_MISMATCH


def _prefix_completion(prefix: bool) -> Any:
    """DeepSeek's chat prefix completion: the last (assistant) turn is continued, not answered."""
    return [{"role": "user", "content": "a haiku"}, {"role": "assistant", "content": "Autumn", "prefix": prefix}]


async def test_a_message_field_this_library_does_not_name_is_recorded_and_matched(tmp_path: Path) -> None:
    """A request's message fields beyond chunktape's names (here DeepSeek's ``prefix``, sent through the openai SDK
    as its users do) reach the cassette and take part in matching: before, they were dropped as the request was
    decoded, so the recording lost them and a request without them replayed it."""
    sent: list[bytes] = []
    path = tmp_path / "prefix.msgpack"
    recording = RecordingTransport(_provider(" leaves fall", sent), path)
    async with _sdk(recording) as sdk:
        assert await _reply(sdk, "deepseek-chat", _prefix_completion(True)) == " leaves fall"
    recording.close()
    assert b'"prefix":true' in sent[0].replace(b" ", b"")
    assert load_cassette(path).interactions[0].request.messages[1].extra == {"prefix": True}

    async with _sdk(ReplayTransport(path)) as sdk:
        assert await _reply(sdk, "deepseek-chat", _prefix_completion(True)) == " leaves fall"
        with pytest.raises(LlmError) as miss:
            await _reply(sdk, "deepseek-chat", _prefix_completion(False))
    assert miss.value.code is ErrorCode.CASSETTE_MISMATCH


def test_a_body_played_again_through_one_transport_is_the_same_and_a_fault_still_applies() -> None:
    # An instant, fault-free body is rendered once and sent again on every later play (allow_repeats); a call with
    # a fault is rendered as it goes, and the recorded body comes back after it.
    recorded = interaction_of(text_stream("Hel", "lo"), content="hi", model="m", start_ns=0)
    request = options_to_openai_request(recorded.request.to_options())
    transport = ReplayTransport(Cassette(interactions=[recorded]), allow_repeats=True)
    with httpx2.Client(transport=transport, base_url="http://127.0.0.1:9") as client:
        bodies = [client.post("/v1/chat/completions", json=request).content for _ in range(3)]
    assert bodies[0].endswith(b"data: [DONE]\n\n")
    assert bodies == [bodies[0]] * 3
    faulty = ReplayTransport(
        Cassette(interactions=[recorded]), allow_repeats=True, faults=[FailFirst(1, Truncate(after_chunks=1))]
    )
    with httpx2.Client(transport=faulty, base_url="http://127.0.0.1:9") as client:
        first, second = (client.post("/v1/chat/completions", json=request).content for _ in range(2))
    assert not first.endswith(b"data: [DONE]\n\n")
    assert second == bodies[0]


@pytest.mark.parametrize("library", ["httpx2", "httpx"])
async def test_an_instant_body_arrives_unread_with_its_length_as_a_servers_does(library: str) -> None:
    # An instant, fault-free stream is handed over as its rendered bytes, unread: the client reads them as it reads a
    # socket's body (counting what it downloaded), and Content-Length says how many there are.
    recorded = interaction_of(text_stream("Hel", "lo"), content="hi", model="m", start_ns=0)
    request = options_to_openai_request(recorded.request.to_options())
    expected = render_sse(recorded)  # the request asks for the usage chunk
    transport = ReplayTransport(Cassette(interactions=[recorded]), allow_repeats=True)
    sync = httpx2.Client if library == "httpx2" else httpx.Client
    with sync(transport=transport, base_url="http://127.0.0.1:9") as client:
        with client.stream("POST", "/v1/chat/completions", json=request) as reply:
            assert not reply.is_stream_consumed
            assert b"".join(reply.iter_bytes()) == expected
            assert reply.num_bytes_downloaded == len(expected)
        assert reply.headers["content-length"] == str(len(expected))
        assert reply.headers["content-type"] == "text/event-stream; charset=utf-8"
    asynchronous = httpx2.AsyncClient if library == "httpx2" else httpx.AsyncClient
    async with asynchronous(transport=transport, base_url="http://127.0.0.1:9") as aclient:
        assert (await aclient.post("/v1/chat/completions", json=request)).content == expected
