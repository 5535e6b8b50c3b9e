"""The replay server under bad input: every bad request is a 4xx JSON error naming the problem, recorded data
never drops a connection, request size and read time are bounded, and it binds loopback only.

Servers run on 127.0.0.1; slow and short requests are raw sockets against deadlines the test sets small,
waited for with a generous bound (no wall-clock assertion: only that the server closed the connection).
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from chunktape import (
    Cassette,
    Completed,
    ErrorCode,
    Event,
    Interaction,
    LlmError,
    RecordedRequest,
    save_cassette,
)
from chunktape._cassettes.model import request_fingerprint
from chunktape._replayer import Timing
from chunktape.cli import app
from chunktape.faults import HttpError
from chunktape.http import SCENARIO_HEADER, ReplayServer
from chunktape.http._protocols import CHAT
from chunktape.http._server import listen as listen_module
from chunktape.http._server.limits import MAX_BODY_BYTES, ServerLimits
from chunktape.http._server.listen import bind_address
from chunktape.http._server.running import uvicorn_settings
from chunktape.http._server.scenarios import Scenario
from chunktape.wire._openai_chat import MAX_NESTING, decode_chat_request, options_to_openai_request
from helpers import cassette_with_raised_status, options, text_stream

INSTANT = Timing.instant()
WAIT_S = 10.0
"""How long a raw socket waits for the server to answer or close: far above the deadlines the tests set."""


def _cassette() -> Cassette:
    events = [Event(t_ns=n, chunk=chunk) for n, chunk in enumerate(text_stream("hi"))]
    request = RecordedRequest.from_options(options())
    return Cassette(interactions=[Interaction(request=request, events=events, outcome=Completed(t_ns=99))])


def _body(**fields: Any) -> dict[str, Any]:
    return {**options_to_openai_request(options()), **fields}


def _exchange(server: ReplayServer, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection, then read until the server closes it (or ``WAIT_S`` passes: an error)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def _json_error(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json")
    message: str = response.json()["error"]["message"]
    return message


# -- bad request bodies ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        pytest.param({"tools": True}, "`tools`", id="tools-true"),
        pytest.param({"tools": 5}, "`tools`", id="tools-int"),
        pytest.param({"tools": 1.5}, "`tools`", id="tools-float"),
        pytest.param({"tools": [5]}, "tools[0]", id="tools-item"),
        pytest.param({"messages": [{"role": "assistant", "tool_calls": 5}]}, "messages[0].tool_calls", id="calls"),
        pytest.param({"temperature": "hot"}, "`temperature`", id="temperature"),
        pytest.param({"messages": "hi"}, "`messages`", id="messages"),
    ],
)
async def test_a_bad_field_is_a_400_json_error_naming_it(fields: dict[str, Any], named: str) -> None:
    async with ReplayServer(_cassette(), timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/v1/chat/completions", json=_body(**fields))
        assert response.status_code == 400
        assert named in _json_error(response)
        assert response.json()["error"]["code"] == "INVALID_REQUEST"


@pytest.mark.parametrize(
    ("route", "body", "named"),
    [
        pytest.param("/v1/chat/completions", _body(stream="yes"), "`stream` must be true or false", id="chat-stream"),
        pytest.param("/v1/chat/completions", _body(stream=1), "`stream` must be true or false", id="chat-stream-1"),
        pytest.param("/v1/chat/completions", _body(stream_options="x"), "`stream_options` must be", id="options"),
        pytest.param(
            "/v1/chat/completions", _body(stream_options={"include_usage": "yes"}), "include_usage", id="usage"
        ),
        pytest.param("/v1/chat/completions", _body(n=1000), "`n` is 1000", id="n-1000"),
        pytest.param("/v1/chat/completions", _body(n="1"), "`n` is '1'", id="n-string"),
        pytest.param(
            "/v1/messages",
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "stream": "true"},
            "`stream` must be true or false",
            id="messages-stream",
        ),
        pytest.param(
            "/v1/responses", {"model": "m", "input": "hi", "stream": "1"}, "`stream` must be true or false", id="resp"
        ),
    ],
)
async def test_a_delivery_flag_of_the_wrong_type_is_a_400_not_another_answer(
    route: str, body: dict[str, Any], named: str
) -> None:
    """``"stream": "yes"`` was read as false (a JSON body to a client that asked for a stream), ``n`` of 1000 as a
    cassette miss: the provider answers 400 to both, and so does the replay server, naming the field."""
    async with ReplayServer(_cassette(), timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + route, json=body)
    assert response.status_code == 400, response.text
    assert named in response.json()["error"]["message"]
    assert response.headers["x-chunktape-error"] == "INVALID_REQUEST"


@pytest.mark.parametrize(
    ("method", "path", "status", "said"),
    [
        pytest.param("POST", "/v1/embeddings", 404, "POST /v1/embeddings is no route", id="unknown-route"),
        pytest.param("GET", "/v1/models", 404, "GET /v1/models is no route", id="models"),
        pytest.param("GET", "/", 404, "GET / is no route", id="root"),
        pytest.param("GET", "/v1/chat/completions", 405, "answers POST only", id="get"),
        pytest.param("OPTIONS", "/v1/chat/completions", 405, "answers POST only", id="options"),
        pytest.param("PUT", "/v1/responses", 405, "answers POST only", id="put"),
        pytest.param("DELETE", "/v1/messages", 405, "answers POST only", id="delete-messages"),
    ],
)
async def test_a_route_or_method_the_server_lacks_is_a_json_error_in_the_routes_shape(
    method: str, path: str, status: int, said: str
) -> None:
    """Starlette's own 404/405 were ``text/plain`` ("Not Found"): an SDK pointed at the wrong base URL read no
    message. They are JSON in the route's protocol shape (Anthropic's on ``/v1/messages``), marked as chunktape's."""
    async with ReplayServer(_cassette(), timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.request(method, server.url + path, json={"model": "m"})
        head = await client.head(server.url + "/v1/chat/completions")
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-chunktape-error"] == "INVALID_REQUEST"
    assert said in response.json()["error"]["message"]
    assert (response.json().get("type") == "error") is path.endswith("/messages")
    if status == 405:
        assert response.headers["allow"] == "POST"
    assert head.status_code == 405
    assert head.content == b""


def test_a_request_no_http_parser_reads_is_a_json_error_the_client_gets_whole() -> None:
    """A head past ``max_head`` and a request that is no HTTP/1.1 were uvicorn's ``text/plain`` 400, and the
    connection closed under a client still sending: a reset instead of the answer. They are JSON (431 for the head),
    read to the end by a client that writes its whole request first."""
    with ReplayServer(_cassette(), timing=INSTANT, limits=ServerLimits(max_head=4096)) as server:
        with httpx.Client() as client:
            for size in (300_000, 2_000_000):  # past one read (256 KiB): h11 sees the head unfinished
                response = client.post(server.url + "/v1/chat/completions", json=_body(), headers={"x-big": "a" * size})
                assert response.status_code == 431
                assert response.headers["content-type"] == "application/json"
                assert "larger than this server reads (4,096 bytes" in response.json()["error"]["message"]
        for request in (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 50,
        ):
            answer = _exchange(server, request)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer
            assert b"content-type: application/json" in head
            assert "not valid HTTP/1.1" in msgspec.json.decode(body)["error"]["message"]


async def test_deep_json_is_a_400_naming_the_problem() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    nested = msgspec.json.encode(_body(x=None)).replace(b'"x":null', b'"x":' + b"[" * 500 + b"]" * 500)
    async with ReplayServer(_cassette(), timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/v1/chat/completions", content=deep)
        assert response.status_code == 400
        assert "nests too deeply" in _json_error(response)
        response = await client.post(server.url + "/v1/chat/completions", content=nested)
        assert response.status_code == 400
        assert f"field `x` nests deeper than {MAX_NESTING} levels" in _json_error(response)


def test_deep_tool_arguments_in_a_message_are_refused_naming_the_field() -> None:
    """Tool-call arguments are re-encoded when decoded: deep ones are refused before, not a RecursionError."""
    arguments = b'{"a":' * 400 + b"{}" + b"}" * 400
    call = b'{"id":"c","type":"function","function":{"name":"f","arguments":' + arguments + b"}}"
    body = b'{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[' + call + b"]}]}"
    with pytest.raises(LlmError, match="field `messages` nests deeper") as caught:
        decode_chat_request(body)
    assert caught.value.code is ErrorCode.UNSUPPORTED_OPTION


_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)
_fields = st.sampled_from(
    ["model", "messages", "tools", "max_tokens", "temperature", "stream", "stream_options", "thinking", "x"]
)


# benchmarks/fuzz.py's server-request target checks the same promise, coverage-guided: fewer examples here.
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.booleans(),
    fields=st.dictionaries(_fields, _json, max_size=4),
    message=st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "name", "tool_call_id"]), _json),
)
def test_any_json_body_decodes_or_is_refused_with_a_documented_code(
    base: bool, fields: dict[str, Any], message: dict[str, Any]
) -> None:
    body: dict[str, Any] = {**(_body() if base else {}), **fields}
    if base and "messages" not in fields:
        body["messages"] = [{"role": "user", **message}]
    failure: LlmError | None = None
    try:
        request = decode_chat_request(msgspec.json.encode(body))
    except LlmError as error:
        failure = error
    if failure is not None:
        assert failure.code is ErrorCode.UNSUPPORTED_OPTION
    else:
        assert request_fingerprint(RecordedRequest.from_options(request.options))


# -- scenario names in headers -----------------------------------------------------------------------


async def test_a_non_ascii_scenario_name_is_percent_encoded_in_headers(tmp_path: Path) -> None:
    cassette = tmp_path / "c.msgpack"
    save_cassette(_cassette(), cassette)
    scenarios = [Scenario(name="测试", cassette=str(cassette))]
    async with ReplayServer(scenarios=scenarios, timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/scenarios/测试/v1/chat/completions", json=_body(stream=False))
        assert response.status_code == 200
        assert response.headers["x-chunktape-scenario"] == "%E6%B5%8B%E8%AF%95"
        server.reset()
        headers = {SCENARIO_HEADER: "%E6%B5%8B%E8%AF%95"}
        response = await client.post(server.url + "/v1/chat/completions", json=_body(stream=True), headers=headers)
        assert response.status_code == 200
        assert b"data: [DONE]" in response.content
        listing = (await client.get(server.url + "/scenarios")).json()
        assert listing["scenarios"][0]["name"] == "测试"


# -- recorded or injected data that cannot be sent as is ------------------------------------------------


@pytest.mark.parametrize("status", [101, 200, 302])
@pytest.mark.parametrize("stream", [True, False])
async def test_an_error_status_that_is_not_an_http_error_is_a_502_not_a_dropped_connection(
    status: int, stream: bool
) -> None:
    fault = HttpError(status=status, message="odd")
    async with ReplayServer(_cassette(), timing=INSTANT, faults=[fault]) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/v1/chat/completions", json=_body(stream=stream))
        assert response.status_code == 502
        assert f"status {status}, which is not an HTTP error status" in _json_error(response)


def test_a_cassette_with_an_impossible_status_is_refused_when_the_server_starts(tmp_path: Path) -> None:
    with pytest.raises(LlmError, match=r"outcome\.status") as caught:
        ReplayServer(cassette_with_raised_status(tmp_path, 999), timing=INSTANT)
    assert caught.value.code is ErrorCode.CASSETTE_CORRUPT


@pytest.mark.parametrize("stream", [True, False])
async def test_recorded_data_found_corrupt_when_played_is_a_502_naming_it(tmp_path: Path, stream: bool) -> None:
    """A JSON cassette's events are decoded when first played: a damaged one was a dropped connection."""
    path = tmp_path / "damaged.json"
    save_cassette(_cassette(), path)
    data = path.read_bytes()
    first_event = data.index(b'"tNs"')
    path.write_bytes(data[:first_event] + b'"tNs": "soon",' + data[first_event:])
    async with ReplayServer(path, timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/v1/chat/completions", json=_body(stream=stream))
        assert response.status_code == 502
        message = _json_error(response)
        assert "CASSETTE_CORRUPT" in message
        assert "interaction #0" in message


async def test_an_unexpected_failure_is_a_json_500(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(raw: bytes, **route: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(CHAT, "decode_request", broken)
    async with ReplayServer(_cassette(), timing=INSTANT) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/v1/chat/completions", json=_body())
        assert response.status_code == 500
        assert "RuntimeError: a bug" in _json_error(response)


# -- request size --------------------------------------------------------------------------------------


def test_the_default_body_limit_is_32_mib() -> None:
    assert ServerLimits().max_body == MAX_BODY_BYTES == 32 * 1024 * 1024


SHORT = ServerLimits(header_timeout=0.2, body_timeout=0.2, keep_alive=0.2)


async def test_a_declared_body_over_the_limit_is_a_413_before_any_of_it_is_read() -> None:
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 104857600\r\n\r\n"
    )
    with ReplayServer(_cassette(), timing=INSTANT, limits=SHORT) as server:
        answer = _exchange(server, head)  # the 100 MB never follow: answered, then closed by the body deadline
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"larger than this server reads (33554432 bytes" in answer


async def test_a_streamed_body_over_the_limit_is_a_413() -> None:
    limits = ServerLimits(max_body=1024)

    async def chunks() -> Any:
        for _ in range(8):
            yield b" " * 512

    async with ReplayServer(_cassette(), timing=INSTANT, limits=limits) as server, httpx.AsyncClient() as client:
        response = await client.post(server.url + "/v1/chat/completions", content=chunks())
        assert response.status_code == 413
        assert "1024 bytes" in _json_error(response)
        response = await client.post(server.url + "/v1/chat/completions", content=b" " * (4 * 1024 * 1024))
        assert response.status_code == 413  # the client was still writing: it reads the 413, not a reset
        response = await client.post(server.url + "/v1/chat/completions", json=_body(stream=False))
        assert response.status_code == 200


@pytest.mark.parametrize(
    "bad",
    [{"max_body": 0}, {"max_body": 1.5}, {"max_head": -1}, {"header_timeout": 0}, {"body_timeout": -1.0}],
)
def test_bad_limits_are_invalid_config(bad: dict[str, Any]) -> None:
    with pytest.raises(LlmError) as caught:
        ServerLimits(**bad)
    assert caught.value.code is ErrorCode.INVALID_CONFIG


# -- read deadlines ------------------------------------------------------------------------------------


# A connection that is only ever closed has no race with its deadline: these wait 50 ms, not SHORT's 200 ms. The
# body test keeps the default 10 s for the headers, so only the body deadline can be what closes it.
HEADERS_50MS = ServerLimits(header_timeout=0.05)
BODY_50MS = ServerLimits(body_timeout=0.05)


def test_slowloris_headers_are_closed_after_the_header_timeout() -> None:
    with ReplayServer(_cassette(), timing=INSTANT, limits=HEADERS_50MS) as server:
        assert _exchange(server, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a") == b""


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() -> None:
    with ReplayServer(_cassette(), timing=INSTANT, limits=HEADERS_50MS) as server:
        assert _exchange(server, b"") == b""


def test_a_body_shorter_than_its_content_length_is_closed_after_the_body_timeout() -> None:
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n"
    with ReplayServer(_cassette(), timing=INSTANT, limits=BODY_50MS) as server:
        assert _exchange(server, head + b'{"model": ') == b""


def test_a_keep_alive_connection_serves_requests_one_after_another() -> None:
    body = msgspec.json.encode(_body(stream=False))
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    # Pipelined, so the second request waits in the buffer: no race with the keep-alive timeout that closes it.
    limits = msgspec.structs.replace(SHORT, keep_alive=0.05)
    with ReplayServer(_cassette(), timing=INSTANT, limits=limits, allow_repeats=True) as server:
        answer = _exchange(server, request * 2)  # pipelined; then idle until the keep-alive timeout closes it
    assert answer.count(b"HTTP/1.1 200 OK") == 2


def test_uvicorn_gets_the_limits_it_enforces_itself() -> None:
    settings = uvicorn_settings(ServerLimits(max_head=4096, keep_alive=2.0))
    assert (settings["h11_max_incomplete_event_size"], settings["timeout_keep_alive"]) == (4096, 2.0)
    assert settings["http"].limits.max_head == 4096


# -- binding -------------------------------------------------------------------------------------------


def _resolver(*addresses: str) -> Any:
    def resolve(host: str) -> Sequence[str]:
        return list(addresses)

    return resolve


def test_a_name_is_resolved_and_its_loopback_address_bound() -> None:
    assert str(bind_address("localhost", allow_remote=False, resolve=_resolver("10.1.2.3", "127.0.0.1"))) == (
        "127.0.0.1"
    )
    assert str(bind_address("localhost", allow_remote=False, resolve=_resolver("::1"))) == "::1"
    assert str(bind_address("127.0.0.2", allow_remote=False, resolve=_resolver())) == "127.0.0.2"


def test_a_name_that_maps_only_elsewhere_is_refused_naming_where() -> None:
    with pytest.raises(LlmError, match=r"'localhost' \(it resolves to 10\.1\.2\.3\)") as caught:
        bind_address("localhost", allow_remote=False, resolve=_resolver("10.1.2.3"))
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    assert str(bind_address("localhost", allow_remote=True, resolve=_resolver("10.1.2.3"))) == "10.1.2.3"


def test_a_name_that_does_not_resolve_is_invalid_config() -> None:
    def fails(host: str) -> Sequence[str]:
        raise socket.gaierror(-2, "Name or service not known")

    with pytest.raises(LlmError, match="does not resolve") as caught:
        bind_address("nowhere.invalid", allow_remote=False, resolve=fails)
    assert caught.value.code is ErrorCode.INVALID_CONFIG


def test_the_server_binds_the_loopback_address_a_name_resolves_to(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listen_module, "_resolve", _resolver("192.0.2.7", "127.0.0.1"))
    server = ReplayServer(_cassette(), host="localhost")
    try:
        assert server.host == "127.0.0.1"
        assert server.remote_warning is None
    finally:
        server.stop()


def test_a_server_beyond_loopback_says_so() -> None:
    server = ReplayServer(_cassette())
    try:
        server.host = "0.0.0.0"  # what allow_remote with --host 0.0.0.0 binds; not bound here (loopback only)
        assert server.remote_warning is not None
        assert "0.0.0.0, which is not a loopback address" in server.remote_warning
    finally:
        server.stop()


class _FakeServer:
    url = "http://192.0.2.7:8000"
    scenarios: ClassVar[dict[str, Any]] = {}
    remote_warning = "warning: serving cassettes on 0.0.0.0, which is not a loopback address"


def test_serve_cli_warns_on_stderr_and_passes_max_body(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def fake_serve(cassettes: Any, **kwargs: Any) -> None:
        seen.update(kwargs)
        kwargs["on_ready"](_FakeServer())

    monkeypatch.setattr("chunktape.http.serve", fake_serve)  # the command imports it when it runs
    cassette = tmp_path / "c.msgpack"
    save_cassette(_cassette(), cassette)
    result = CliRunner().invoke(
        app, ["serve", str(cassette), "--host", "0.0.0.0", "--allow-remote", "--max-body", "2048"]
    )
    assert result.exit_code == 0, result.output
    assert "not a loopback address" in result.stderr
    assert "not a loopback address" not in result.stdout
    assert seen["limits"].max_body == 2048
    assert seen["allow_remote"] is True
