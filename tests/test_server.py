"""The loopback replay server: OpenAICompatAdapter and the real openai SDK against ``ReplayServer``/``serve``."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from chunktape import (
    Cancelled,
    Cassette,
    Completed,
    ErrorCode,
    GenerateOptions,
    Interaction,
    LlmError,
    Message,
    Raised,
    ReasoningBlock,
    RecordedRequest,
    StreamChunk,
    TextBlock,
    ToolCallBlock,
    load_cassette,
)
from chunktape._replayer import Timing
from chunktape.faults import Corrupt, Disconnect, FailFirst, HttpError, Stall, Truncate
from chunktape.http import SCENARIO_HEADER, ReplayServer, serve
from chunktape.providers import OpenAICompatAdapter
from chunktape.wire._openai_chat import options_to_openai_request
from helpers import interaction_of, stream_outcome, text_stream

EXAMPLES = Path(__file__).resolve().parents[1] / "cassettes"
DEMO = EXAMPLES / "demo-session.json"
RETRY = EXAMPLES / "retry-429.json"
INSTANT = Timing.instant()


async def replay(
    server: ReplayServer, options: GenerateOptions, base: str = ""
) -> tuple[list[StreamChunk], LlmError | None]:
    return await stream_outcome(OpenAICompatAdapter(server.url + base, api_key="sk-test"), options)


def check(recorded: Interaction, chunks: list[StreamChunk], error: LlmError | None) -> None:
    outcome = recorded.outcome
    if isinstance(outcome, Completed):
        assert error is None
        assert chunks == recorded.chunks
    elif isinstance(outcome, Raised):
        assert error is not None
        assert chunks == recorded.chunks
        assert (error.code, error.status, error.retry_after) == (outcome.code, outcome.status, outcome.retry_after)
    else:
        assert isinstance(outcome, Cancelled)
        assert error is not None
        assert error.code is ErrorCode.STREAM_ABORTED
        assert chunks == recorded.chunks[: len(chunks)]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda path: path.stem)
async def test_adapter_reproduces_every_example_cassette(path: Path) -> None:
    cassette = load_cassette(path)
    async with ReplayServer(path, timing=INSTANT) as server:
        for recorded in cassette.interactions:
            check(recorded, *await replay(server, recorded.request.to_options(), "/v1"))
        server.playback.assert_all_played()


async def test_recorded_timing_and_several_cassettes() -> None:
    demo, retry = load_cassette(DEMO), load_cassette(RETRY)
    async with ReplayServer([DEMO, RETRY], timing=Timing.recorded(speed=50.0)) as server:
        for recorded in [*retry.interactions, *demo.interactions]:
            check(recorded, *await replay(server, recorded.request.to_options()))


# -- the real openai SDK -----------------------------------------------------------------------------


def sdk(server: ReplayServer, base: str = "/v1", **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url + base, api_key="test", max_retries=0, **kwargs)


def request_body(recorded: Interaction) -> dict[str, Any]:
    return options_to_openai_request(recorded.request.to_options())


async def sdk_stream(client: openai.AsyncOpenAI, body: dict[str, Any]) -> tuple[str, str, dict[int, dict[str, str]]]:
    stream = await client.chat.completions.create(**body)
    text: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    async for chunk in stream:
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            extra = choice.delta.model_extra or {}
            reasoning.append(extra.get("reasoning_content") or "")
            for call in choice.delta.tool_calls or ():
                slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.id or ""
                if call.function is not None:
                    slot["name"] += call.function.name or ""
                    slot["arguments"] += call.function.arguments or ""
    return "".join(text), "".join(reasoning), calls


async def test_openai_sdk_streams_a_replayed_cassette() -> None:
    cassette = load_cassette(DEMO)
    async with ReplayServer(DEMO, timing=INSTANT) as server, sdk(server) as client:
        for recorded in cassette.interactions:
            text, reasoning, calls = await sdk_stream(client, request_body(recorded))
            blocks = [chunk.block for chunk in recorded.chunks if hasattr(chunk, "block")]
            assert text == "".join(b.text for b in blocks if isinstance(b, TextBlock))
            assert reasoning == "".join(b.text for b in blocks if isinstance(b, ReasoningBlock))
            tools = [b for b in blocks if isinstance(b, ToolCallBlock)]
            assert [(c["id"], c["name"], c["arguments"]) for c in calls.values()] == [
                (t.id, t.name, t.arguments) for t in tools
            ]


async def test_openai_sdk_sees_a_recorded_429_with_retry_after() -> None:
    cassette = load_cassette(RETRY)
    async with ReplayServer(RETRY, timing=INSTANT) as server, sdk(server) as client:
        with pytest.raises(openai.RateLimitError) as info:
            await sdk_stream(client, request_body(cassette.interactions[0]))
        outcome = cassette.interactions[0].outcome
        assert isinstance(outcome, Raised)
        assert info.value.status_code == 429
        assert outcome.retry_after is not None
        assert float(info.value.response.headers["retry-after-ms"]) / 1000 == outcome.retry_after
        assert "retry-after" in info.value.response.headers
        text, _, _ = await sdk_stream(client, request_body(cassette.interactions[1]))  # the retry succeeds
        assert text


async def test_openai_sdk_sees_an_injected_429() -> None:
    cassette = load_cassette(DEMO)
    async with ReplayServer(DEMO, timing=INSTANT, faults=["http-429"]) as server, sdk(server) as client:
        with pytest.raises(openai.RateLimitError) as info:
            await sdk_stream(client, request_body(cassette.interactions[0]))
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.response.headers["x-chunktape-fault"] == "http-429"


async def test_openai_sdk_sees_a_reset_mid_body_as_a_connection_error() -> None:
    cassette = load_cassette(DEMO)
    async with ReplayServer(DEMO, timing=INSTANT, faults=[Disconnect(after_chunks=4)]) as server, sdk(server) as client:
        with pytest.raises(openai.APIConnectionError):
            await sdk_stream(client, request_body(cassette.interactions[0]))


async def test_openai_sdk_without_streaming_gets_a_completion() -> None:
    cassette = load_cassette(DEMO)
    recorded = cassette.interactions[0]
    body = {**request_body(recorded), "stream": False}
    body.pop("stream_options")
    async with ReplayServer(DEMO, timing=INSTANT) as server, sdk(server) as client:
        completion = await client.chat.completions.create(**body)
    tools = [c.block for c in recorded.chunks if hasattr(c, "block") and isinstance(c.block, ToolCallBlock)]
    message = completion.choices[0].message
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()] == [
        (t.id, t.name, t.arguments) for t in tools
    ]
    assert completion.usage is not None


# -- faults ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (Disconnect(after_chunks=3), ErrorCode.STREAM_ABORTED),
        (Disconnect(after_chunks=0), ErrorCode.STREAM_ABORTED),
        (Disconnect(inside="tool-call"), ErrorCode.STREAM_ABORTED),
        (Truncate(after_chunks=3), ErrorCode.STREAM_ABORTED),
        (Corrupt(kind="duplicate-finish"), ErrorCode.INVALID_RESPONSE),
        (Corrupt(kind="interleaved"), ErrorCode.INVALID_RESPONSE),
        (HttpError(status=503, message="overloaded"), ErrorCode.PROVIDER_HTTP_ERROR),
    ],
    ids=lambda value: value.fault_id if hasattr(value, "fault_id") else str(value),
)
async def test_faults_reach_the_wire(fault: Any, code: ErrorCode) -> None:
    recorded = load_cassette(DEMO).interactions[0]
    async with ReplayServer(DEMO, timing=INSTANT, faults=[fault]) as server:
        chunks, error = await replay(server, recorded.request.to_options())
        assert error is not None
        assert error.code is code
        assert chunks == recorded.chunks[: len(chunks)]
        assert server.playback.injected == [fault.fault_id]
        # An injected fault never uses the recording up: the interaction is still there to replay. The client
        # may stop reading at the broken event before the server's stream has ended and given it back: wait for it.
        for _ in range(500):
            if server.playback.unplayed() == [0, 1, 2]:
                break
            await asyncio.sleep(0.01)
        assert server.playback.unplayed() == [0, 1, 2]


async def test_fail_first_then_the_recording() -> None:
    recorded = load_cassette(DEMO).interactions[0]
    async with ReplayServer(DEMO, timing=INSTANT, faults=[FailFirst(n=2, fault=HttpError(status=500))]) as server:
        for _ in range(2):
            _, error = await replay(server, recorded.request.to_options())
            assert error is not None
            assert error.status == 500
        check(recorded, *await replay(server, recorded.request.to_options()))


async def test_a_miss_and_a_replayed_interaction_are_418() -> None:
    recorded = load_cassette(RETRY).interactions[1]
    async with ReplayServer(RETRY, timing=INSTANT) as server, httpx.AsyncClient() as client:
        other = {**request_body(recorded), "messages": [{"role": "user", "content": "something else"}]}
        response = await client.post(server.url + "/v1/chat/completions", json=other)
        assert response.status_code == 418
        assert "CASSETTE_MISMATCH" in response.json()["error"]["message"]
        for _ in range(2):
            await client.post(server.url + "/chat/completions", json=request_body(recorded))
        response = await client.post(server.url + "/chat/completions", json=request_body(recorded))
        assert response.status_code == 418
        assert "CASSETTE_EXHAUSTED" in response.json()["error"]["message"]
        response = await client.post(server.url + "/chat/completions", content=b"{not json")
        assert response.status_code == 400
        response = await client.post(server.url + "/reset")
        assert response.status_code == 200
        response = await client.post(server.url + "/chat/completions", json=request_body(recorded))
        assert response.status_code == 429


# -- scenarios ---------------------------------------------------------------------------------------


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenarios.toml"
    path.write_text(
        f"""
[[scenarios]]
name = "happy"
cassette = "{DEMO.as_posix()}"

[[scenarios]]
name = "rate-limited"
cassette = "{DEMO.as_posix()}"
description = "two 429s, then the recording"
faults = [{{ type = "fail-first", n = 2, fault = {{ type = "http-error", status = 429, retry_after = 1.5 }} }}]

[[scenarios]]
name = "broken"
cassette = "{DEMO.as_posix()}"
faults = ["disconnect-mid-tool-call"]
""",
        encoding="utf-8",
    )
    return path


async def test_scenarios_by_path_and_by_header(scenario_file: Path) -> None:
    recorded = load_cassette(DEMO).interactions[0]
    options = recorded.request.to_options()
    async with ReplayServer(scenarios=scenario_file, timing=INSTANT) as server:
        check(recorded, *await replay(server, options, "/scenarios/happy/v1"))
        _, error = await replay(server, options, "/scenarios/rate-limited")
        assert error is not None
        assert (error.status, error.retry_after) == (429, 1.5)
        headers = {SCENARIO_HEADER: "rate-limited"}
        async with httpx.AsyncClient(headers=headers) as client:
            adapter = OpenAICompatAdapter(server.url + "/v1", api_key="k", client=client)
            with pytest.raises(LlmError) as info:
                _ = [c async for c in adapter.stream(options)]
            assert info.value.status == 429
            check(recorded, [c async for c in adapter.stream(options)], None)
        _, error = await replay(server, options, "/scenarios/broken/v1")
        assert error is not None
        assert error.code is ErrorCode.STREAM_ABORTED
        assert server.scenarios["broken"].playback.injected == ["disconnect-mid-tool-call"]
        async with httpx.AsyncClient() as client:
            listing = (await client.get(server.url + "/scenarios")).json()["scenarios"]
            missing = await client.post(server.url + "/scenarios/nope/v1/chat/completions", json=request_body(recorded))
            no_default = await client.post(server.url + "/v1/chat/completions", json=request_body(recorded))
    assert [s["name"] for s in listing] == ["happy", "rate-limited", "broken"]
    assert listing[1]["description"] == "two 429s, then the recording"
    assert listing[1]["faults"] == ["fail-first-2-http-429"]
    assert listing[1]["calls"] == 3
    assert listing[2]["path"] == "/scenarios/broken/v1/chat/completions"
    assert missing.status_code == 404
    assert "happy" in missing.json()["error"]["message"]
    assert no_default.status_code == 404


# -- binding and the blocking runner ------------------------------------------------------------------


def test_refuses_a_non_loopback_host() -> None:
    with pytest.raises(LlmError, match="loopback") as info:
        ReplayServer(DEMO, host="0.0.0.0")
    assert info.value.code is ErrorCode.INVALID_CONFIG


def test_a_port_in_use_is_one_clear_error() -> None:
    with ReplayServer(DEMO) as server, pytest.raises(LlmError, match="already in use") as info:
        ReplayServer(DEMO, port=server.port)
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert "\n" not in str(info.value)


def test_nothing_to_serve() -> None:
    with pytest.raises(LlmError, match="nothing to serve"):
        ReplayServer()


async def test_serve_blocks_until_stopped() -> None:
    ready = threading.Event()
    servers: list[ReplayServer] = []

    def on_ready(server: ReplayServer) -> None:
        servers.append(server)
        ready.set()

    thread = threading.Thread(target=serve, args=(DEMO,), kwargs={"timing": INSTANT, "on_ready": on_ready})
    thread.start()
    try:
        assert await asyncio.to_thread(ready.wait, 10)
        (server,) = servers
        recorded = load_cassette(DEMO).interactions[0]
        check(recorded, *await replay(server, recorded.request.to_options(), "/v1"))
    finally:
        for server in servers:
            server.stop()
        await asyncio.to_thread(thread.join, 10)
    assert not thread.is_alive()


def test_serve_announces_its_url(capsys: pytest.CaptureFixture[str]) -> None:
    from chunktape.http._server.app import _announce

    with ReplayServer(DEMO) as server:
        _announce(server)
    assert server.url + "/v1" in capsys.readouterr().out


# -- recorded errors mid-stream, stalls, concurrency -------------------------------------------------


def synthetic(*outcomes: Any) -> Cassette:
    """One interaction per outcome, each a cut text stream (a chunk every millisecond) asked as "question N"."""
    chunks = text_stream("Hel", "lo", " there")[:3]
    interactions = [
        interaction_of(chunks, outcome, content=f"question {number}", model="m", start_ns=0)
        for number, outcome in enumerate(outcomes)
    ]
    return Cassette(interactions=interactions)


async def test_recorded_errors_mid_stream_keep_their_code() -> None:
    cassette = synthetic(
        Raised(t_ns=9, code="PROVIDER_HTTP_ERROR", message="Token limit reached", status=400),
        Raised(t_ns=9, code="INVALID_RESPONSE", message="unparseable"),
        Raised(t_ns=9, code="STREAM_ABORTED", message="peer closed the connection"),
        Cancelled(t_ns=9),
    )
    async with ReplayServer(cassette, timing=INSTANT) as server:
        for recorded in cassette.interactions:
            check(recorded, *await replay(server, recorded.request.to_options()))


async def test_a_stall_trips_the_clients_idle_watchdog() -> None:
    recorded = load_cassette(DEMO).interactions[0]
    async with ReplayServer(DEMO, timing=INSTANT, faults=[Stall(after_chunks=2, seconds=60)]) as server:
        adapter = OpenAICompatAdapter(server.url, api_key="k", idle_timeout=0.2)
        chunks: list[StreamChunk] = []
        with pytest.raises(LlmError) as info:
            async for chunk in adapter.stream(recorded.request.to_options()):
                chunks.append(chunk)
        await adapter.aclose()
    assert info.value.code is ErrorCode.TIMEOUT
    assert chunks == recorded.chunks[:2]


async def test_concurrent_requests_each_get_their_interaction() -> None:
    cassette = load_cassette(DEMO)
    async with ReplayServer(DEMO, timing=Timing.fixed(0.0, 0.001)) as server:
        results = await asyncio.gather(
            *(replay(server, recorded.request.to_options()) for recorded in cassette.interactions)
        )
        for recorded, result in zip(cassette.interactions, results, strict=True):
            check(recorded, *result)
        assert server.playback.unplayed() == []


async def test_a_deliberate_reset_is_not_logged_as_a_server_error(caplog: pytest.LogCaptureFixture) -> None:
    recorded = load_cassette(DEMO).interactions[0]
    with caplog.at_level(logging.INFO):
        async with ReplayServer(DEMO, timing=INSTANT, faults=[Disconnect(after_chunks=2)]) as server:
            _, error = await replay(server, recorded.request.to_options())
    assert error is not None
    assert error.code is ErrorCode.STREAM_ABORTED
    assert not [record for record in caplog.records if "Exception in ASGI application" in record.getMessage()]


@pytest.mark.parametrize("port", [70000, -1, 65536])
def test_a_port_out_of_range_is_one_clear_error(port: int) -> None:
    with pytest.raises(LlmError, match="0 to 65535") as info:
        ReplayServer(DEMO, port=port)
    assert info.value.code is ErrorCode.INVALID_CONFIG
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("retry_after", [float("nan"), float("inf"), 1e300, 2.5])
async def test_a_recorded_retry_after_of_any_value_is_an_answer_not_a_500(retry_after: float) -> None:
    options = GenerateOptions(model="m", messages=[Message(role="user", content="hi")])
    raised = Raised(t_ns=0, code="PROVIDER_HTTP_ERROR", message="slow down", status=429, retry_after=retry_after)
    cassette = Cassette(interactions=[interaction_of([], raised, request=RecordedRequest.from_options(options))])
    body = {**options_to_openai_request(options), "stream": True}
    async with ReplayServer(cassette, timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/v1/chat/completions", json=body)
    assert response.status_code == 429
    error = response.json()["error"]
    if retry_after == 2.5:
        assert (response.headers["retry-after"], error["retry_after"]) == ("3", 2.5)
    elif retry_after == 1e300:
        assert (response.headers["retry-after"], error["retry_after"]) == ("86400", 86400.0)
    else:
        assert "retry-after" not in response.headers
        assert "retry_after" not in error


def test_a_server_never_started_releases_its_socket_when_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import socket
    import sys
    import warnings

    unraisable: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    # What lived before is left out of the collection below (one over the whole suite's heap takes seconds), and
    # stays frozen, as the suite keeps it (conftest): unfreezing would hand it all back to every later collection.
    gc.freeze()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        server = ReplayServer(DEMO)
        port = server.port
        del server
        gc.collect()
    assert [hook.exc_value for hook in unraisable] == []
    # The port is free again: a second listener on it succeeds.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
        probe.listen(1)


def test_a_stopped_server_never_started_released_its_socket() -> None:
    server = ReplayServer(DEMO)
    server.stop()
    again = ReplayServer(DEMO, port=server.port)
    again.stop()


async def test_openai_sdk_gets_the_usage_chunk_only_when_it_asks_for_it() -> None:
    recorded = load_cassette(DEMO).interactions[0]
    asked = request_body(recorded)
    assert asked["stream_options"] == {"include_usage": True}
    plain = {key: value for key, value in asked.items() if key != "stream_options"}
    async with ReplayServer(DEMO, timing=INSTANT, allow_repeats=True) as server, sdk(server) as client:
        stream = await client.chat.completions.create(**plain)
        without = [chunk async for chunk in stream]
        stream = await client.chat.completions.create(**asked)
        with_usage = [chunk async for chunk in stream]
    # Without include_usage, as from OpenAI: every chunk has a choice (chunk.choices[0] is safe), no usage.
    assert without
    assert all(len(chunk.choices) == 1 for chunk in without)
    assert all(chunk.usage is None for chunk in without)
    assert without[-1].choices[0].finish_reason is not None
    # With it: the same chunks, then one usage-only chunk with empty choices.
    assert [len(chunk.choices) for chunk in with_usage] == [1] * len(without) + [0]
    assert with_usage[-1].usage is not None
    assert with_usage[-1].usage.prompt_tokens > 0


async def test_debug_headers_describe_their_own_call_under_concurrency() -> None:
    from chunktape.faults import Latency, Targeted

    recorded = load_cassette(DEMO).interactions[0]
    slow = Targeted(id="slow", calls=[1, 3, 5], fault=Latency(first_chunk_s=0.05, between_s=0.0))
    async with (
        ReplayServer(DEMO, timing=INSTANT, faults=[slow], allow_repeats=True) as server,
        httpx.AsyncClient() as client,
    ):

        async def call() -> tuple[int, str | None]:
            response = await client.post(server.url + "/v1/chat/completions", json=request_body(recorded))
            assert response.status_code == 200
            return int(response.headers["x-chunktape-call"]), response.headers.get("x-chunktape-fault")

        results = await asyncio.gather(*(call() for _ in range(6)))
        injected = server.playback.injected
    # 1-based, as Targeted(calls=...) counts, one number per call, and each names its own fault.
    assert sorted(number for number, _ in results) == [1, 2, 3, 4, 5, 6]
    for number, fault in results:
        assert fault == injected[number - 1]
        assert fault == ("slow" if number % 2 else None)


@pytest.mark.parametrize(
    ("fault", "problem"),
    [("truncate", "stream ended"), ("corrupt-bad-index", "rule"), ("corrupt-duplicate-finish", "rule")],
)
async def test_without_streaming_a_broken_stream_is_a_502_naming_the_problem_and_the_fault(
    fault: str, problem: str
) -> None:
    recorded = load_cassette(DEMO).interactions[0]
    body = {**request_body(recorded), "stream": False}
    body.pop("stream_options")
    async with ReplayServer(DEMO, timing=INSTANT, faults=[fault]) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/v1/chat/completions", json=body)
        assert server.playback.injected == [fault]
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "PROTOCOL_VIOLATION"
    assert problem in error["message"]
    assert f"[injected fault {fault}]" in error["message"]
    assert response.headers["x-chunktape-fault"] == fault


async def test_without_streaming_a_recorded_stream_without_finish_is_a_502() -> None:
    options = GenerateOptions(model="m", messages=[Message(role="user", content="hi")])
    chunks = text_stream("Hel", "lo")
    cut = [chunk for chunk in chunks if type(chunk).__name__ not in ("Finish", "UsageChunk")]
    cassette = Cassette(interactions=[interaction_of(cut, request=RecordedRequest.from_options(options))])
    async with ReplayServer(cassette, timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.post(
            server.url + "/v1/chat/completions", json=options_to_openai_request(options) | {"stream": False}
        )
    assert response.status_code == 502
    assert "without a finish chunk" in response.json()["error"]["message"]


async def test_stopping_with_a_stream_in_flight_logs_no_error(caplog: pytest.LogCaptureFixture) -> None:
    recorded = load_cassette(DEMO).interactions[0]
    server = ReplayServer(DEMO, timing=INSTANT, faults=[Stall(after_chunks=2, seconds=600)]).start()
    started = asyncio.Event()

    async def client() -> None:
        async with (
            httpx.AsyncClient(timeout=60) as http,
            http.stream("POST", server.url + "/v1/chat/completions", json=request_body(recorded)) as response,
        ):
            async for _ in response.aiter_bytes():
                started.set()

    with caplog.at_level(logging.INFO, logger="uvicorn"):
        task = asyncio.create_task(client())
        try:
            await started.wait()
            await asyncio.to_thread(server.stop)  # the stream is stalled mid-body: uvicorn cancels it
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == []


async def test_a_body_played_again_is_sent_as_it_was_first_sent_every_outcome_and_violation_included() -> None:
    # Instant and fault-free, a body is kept once sent: every later play (--repeat) sends those bytes, so a
    # recorded error, a reset, a cut-short recording and a recorded violation each end as they did the first time.
    complete = interaction_of(text_stream("Hel", "lo"), content="question 8", model="m", start_ns=0)
    violation = interaction_of(text_stream("a", "b")[1:], content="question 9", model="m", start_ns=0)
    cassette = synthetic(
        Raised(t_ns=9, code="PROVIDER_HTTP_ERROR", message="Token limit reached", status=400),
        Raised(t_ns=9, code="STREAM_ABORTED", message="peer closed the connection"),
        Cancelled(t_ns=9),
    )
    cassette = Cassette(interactions=[complete, *cassette.interactions, violation])
    async with ReplayServer(cassette, timing=INSTANT, allow_repeats=True) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            for recorded in cassette.interactions:
                body = options_to_openai_request(recorded.request.to_options())
                plays: list[tuple[bytes, str | None]] = []
                for _ in range(3):
                    try:
                        async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                            plays.append((await reply.aread(), None))
                    except httpx.RemoteProtocolError as exc:
                        plays.append((b"", type(exc).__name__))
                assert plays[1:] == [plays[0], plays[0]]
                if recorded is complete:
                    assert plays[0][0].endswith(b"data: [DONE]\n\n")
                if recorded is not violation:
                    check(recorded, *await replay(server, recorded.request.to_options()))
        assert server.playback.play_counts == [4, 4, 4, 4, 3]
