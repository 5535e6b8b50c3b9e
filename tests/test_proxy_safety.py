"""The recording proxy under hostile input: keys in URLs, credentials in --upstream, an output it cannot write,
upstream bodies that break, do not decode or never end, clients that hang up, and a hundred streams at once."""

from __future__ import annotations

import asyncio
import gzip
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import httpx2
import msgspec
import pytest
from typer.testing import CliRunner

from chunktape import Completed, ErrorCode, LlmError, Raised, TextDelta, load_cassette
from chunktape.cli import app
from chunktape.http._server.proxy import RecordingProxy
from fake_provider import FakeProvider, FakeResponse, chunk, sse
from helpers import interrupt

QUERY_KEY = "Zq8Wm3Xv7Bn2Lk9Jh4Gf6Ds1Pa5Oe0Ri"  # opaque: shaped like no known key
PASSWORD = "s3cr3tPassw0rdXYZ"
ASK = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONWARNINGS": "error", "NO_COLOR": "1", "COLUMNS": "200"}


def _files_bytes(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())


# -- secrets in URLs ------------------------------------------------------------------------------------------


def test_a_key_in_the_query_string_is_redacted_wherever_the_upstream_echoes_it(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    """The key went in ``?api_key=``, not a header; the upstream echoes it in its text, a kept rate-limit header,
    ``system_fingerprint`` and a 401 message. None of it reaches the cassette, nor the ``.failed`` file kept when
    another (key-shaped) credential makes the save refuse."""
    echoed = sse(
        {**chunk({"role": "assistant", "content": f"your key {QUERY_KEY[:10]}"}), "system_fingerprint": QUERY_KEY},
        chunk({"content": f"{QUERY_KEY[10:]} is fine"}),
        chunk({}, finish_reason="stop"),
    )
    refused = msgspec.json.encode({"error": {"message": f"Incorrect API key provided: {QUERY_KEY}"}})
    fake_provider.enqueue(
        FakeResponse(body=echoed, headers={"x-ratelimit-limit-requests": QUERY_KEY}),
        FakeResponse(body=refused, status=401, content_type="application/json"),
    )
    path = tmp_path / "agent.msgpack"
    with RecordingProxy(fake_provider.url, path) as proxy:
        url = f"{proxy.url}/v1/chat/completions?api-version=1&api_key={QUERY_KEY}"
        streamed = httpx.post(url, json=ASK, timeout=10)
        denied = httpx.post(url, json=ASK, timeout=10)
    assert QUERY_KEY in streamed.text  # the client got the upstream's answer as it was
    assert denied.status_code == 401
    assert QUERY_KEY.encode() not in _files_bytes(tmp_path)
    first, second = load_cassette(path).interactions
    assert "[REDACTED]" in "".join(c.text for c in first.chunks if isinstance(c, TextDelta))
    assert first.response is not None
    assert first.response.system_fingerprint == "[REDACTED]"
    assert first.response.headers["x-ratelimit-limit-requests"] == "[REDACTED]"
    assert isinstance(second.outcome, Raised)
    assert "[REDACTED]" in second.outcome.message


def test_a_refused_recording_keeps_no_query_key_in_its_failed_file(fake_provider: FakeProvider, tmp_path: Path) -> None:
    shaped = "sk-proj-" + "A1b2C3d4" * 5  # a key the recorder was never told of: the save refuses
    fake_provider.enqueue(FakeResponse(body=sse(chunk({"content": f"{QUERY_KEY} and {shaped}"}, finish_reason="stop"))))
    path = tmp_path / "agent.msgpack"
    proxy = RecordingProxy(fake_provider.url, path).start()
    httpx.post(f"{proxy.url}/v1/chat/completions?key={QUERY_KEY}", json=ASK, timeout=10)
    with pytest.raises(LlmError, match=r"would contain a credential") as caught:
        proxy.stop()
    assert caught.value.code is ErrorCode.SECRET_DETECTED
    (failed,) = tmp_path.glob("*.failed*")
    assert QUERY_KEY.encode() not in failed.read_bytes()
    assert shaped.encode() not in failed.read_bytes()
    assert not path.exists()


def test_credentials_in_the_upstream_url_are_never_shown_nor_sent_back(tmp_path: Path) -> None:
    upstream = f"http://admin:{PASSWORD}@127.0.0.1:9/base?key={QUERY_KEY}"
    with RecordingProxy(upstream, tmp_path / "down.msgpack") as proxy:
        answer = httpx.post(proxy.url + "/v1/chat/completions", json=ASK, timeout=10)
    assert answer.status_code == 502
    assert PASSWORD not in answer.text
    assert QUERY_KEY not in answer.text
    assert proxy.shown_upstream == "http://admin:[REDACTED]@127.0.0.1:9/base?key=[REDACTED]"
    assert proxy._target("/v1/chat/completions", "a=1") == (
        f"http://admin:{PASSWORD}@127.0.0.1:9/base/v1/chat/completions?key={QUERY_KEY}&a=1"
    )


# -- the output, checked before listening ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ("x.txt", "give a .msgpack or .json file name"),
        ("folder.msgpack", "is a directory"),
        ("plain.msgpack/under.msgpack", "CASSETTE_UNWRITABLE"),
        ("existing.msgpack", "exists; pass --append to add to it or --force to replace it"),
    ],
    ids=["suffix", "directory", "under-a-file", "existing"],
)
def test_an_output_the_proxy_cannot_or_must_not_write_is_refused_before_it_listens(
    tmp_path: Path, output: str, said: str
) -> None:
    (tmp_path / "folder.msgpack").mkdir()
    (tmp_path / "plain.msgpack").write_bytes(b"x")
    (tmp_path / "existing.msgpack").write_bytes(b"three interactions")
    before = _files_bytes(tmp_path)
    result = CliRunner().invoke(
        app, ["proxy", "--upstream", "http://127.0.0.1:9", "-o", str(tmp_path / output), "--port", "0"]
    )
    assert result.exit_code != 0
    (line,) = result.stderr.strip().splitlines()
    assert said in line
    assert _files_bytes(tmp_path) == before


# -- one process, every event one line ------------------------------------------------------------------------


def test_the_proxy_reports_each_event_in_one_line_and_the_client_sees_every_failure(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    """A corrupt gzip body, a chunked body the upstream cuts, a client hanging up mid-request, a route it does not
    record (twice), and Ctrl-C while a client holds a slow stream open without reading: one line each on stderr,
    never a traceback; the recording names what went wrong; and the client gets one ``server`` and one ``date``."""
    hello = sse(chunk({"role": "assistant", "content": "Hi"}), chunk({}, finish_reason="stop"))
    corrupt = gzip.compress(sse(chunk({"content": "x" * 400}, finish_reason="stop")))[:-12] + b"\xff" * 12
    long = sse(*(chunk({"content": "y" * 50}) for _ in range(40)), chunk({}, finish_reason="stop"))
    release = threading.Event()
    fake_provider.enqueue(
        FakeResponse(body=hello),
        FakeResponse(body=corrupt, headers={"content-encoding": "gzip"}),
        FakeResponse(body=long, reset_after=300),
        FakeResponse(body=b"{}", content_type="application/json"),
        FakeResponse(body=b"{}", content_type="application/json"),
        FakeResponse(body=b"{}", content_type="application/json"),
        FakeResponse(body=[sse(chunk({"content": "slow"}), done=False), b"data: never\n\n"], release=release),
    )
    path = tmp_path / "events.msgpack"
    command = ["-m", "chunktape", "proxy", "--upstream", fake_provider.url, "-o", str(path), "--port", "0"]
    process = subprocess.Popen(
        [sys.executable, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    held: socket.socket | None = None
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.startswith("recording "), first
        url = first.split(" on ")[1].split()[0]
        with httpx.Client(timeout=10) as client:
            ok = client.post(url + "/v1/chat/completions", json=ASK)
            assert ok.status_code == 200
            assert b"[DONE]" in ok.content
            assert len(ok.headers.get_list("server")) == 1
            assert len(ok.headers.get_list("date")) == 1
            with pytest.raises(httpx.HTTPError):  # a corrupt body is no clean, empty 200
                client.post(url + "/v1/chat/completions", json=ASK)
            with pytest.raises(httpx.HTTPError):  # nor is a body the upstream cut
                client.post(url + "/v1/chat/completions", json=ASK)
            for _ in range(2):
                client.post(url + "/v1/embeddings", json={"model": "m", "input": "hi"})
            odd = client.post(url + f"/v1/chat/completions?key={QUERY_KEY}", json={"not": "a chat request"})
            assert odd.status_code == 200  # passed through (a warning raised in the server would be a 500)
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as raw:  # promises a chunked body, hangs up half-way
            raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab")
        held = socket.create_connection((host, int(port)))  # opens a slow stream, then neither reads nor leaves
        request = msgspec.json.encode(ASK)
        held.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(request), request)
        )
        held.recv(1)  # the stream started
    finally:
        out, err = interrupt(process)
        release.set()
        if held is not None:
            held.close()
    assert process.returncode == 0, err
    assert "Traceback" not in err, err
    assert "Exception in ASGI" not in err, err
    lines = err.strip().splitlines()
    assert sum("POST /v1/embeddings" in line for line in lines) == 1, err  # once per route
    assert any("does not decode" in line for line in lines), err
    assert any("broke after" in line for line in lines), err
    assert any("hung up before its request body" in line for line in lines), err
    assert any("passed through unrecorded" in line for line in lines), err
    assert QUERY_KEY not in err
    assert any("cut as the proxy stopped" in line for line in lines), err
    assert f"saved {path}" in out
    outcomes = [interaction.outcome for interaction in load_cassette(path).interactions]
    assert isinstance(outcomes[0], Completed)
    assert isinstance(outcomes[1], Raised)
    assert outcomes[1].code == "INVALID_RESPONSE"
    assert "gzip content-encoding" in outcomes[1].message
    assert isinstance(outcomes[2], Raised)
    assert outcomes[2].code == "STREAM_ABORTED"


def test_saved_is_printed_only_for_a_file_written(tmp_path: Path) -> None:
    path = tmp_path / "quiet.msgpack"
    command = ["-m", "chunktape", "proxy", "--upstream", "http://127.0.0.1:9", "-o", str(path), "--port", "0"]
    process = subprocess.Popen(
        [sys.executable, *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.startswith("recording "), first
    url = first.split(" on ")[1].split()[0]
    assert httpx.get(url + "/v1/models", timeout=10).status_code == 502  # served (the upstream is down)
    out, err = interrupt(process)
    assert process.returncode == 0, err
    assert not any(line.startswith("saved") for line in out.splitlines()), out
    assert f"nothing was recorded; {path} was not written" in out
    assert not path.exists()


# -- error bodies and many clients ------------------------------------------------------------------------


def test_a_huge_upstream_error_body_is_passed_on_whole_and_kept_up_to_the_cap(
    fake_provider: FakeProvider, tmp_path: Path
) -> None:
    size = 1 << 20
    body = b'{"error": {"message": "' + b"x" * size + b'"}}'
    fake_provider.enqueue(FakeResponse(body=body, status=500, content_type="application/json"))
    path = tmp_path / "big-error.msgpack"
    with RecordingProxy(fake_provider.url, path) as proxy:
        answer = httpx.post(proxy.url + "/v1/chat/completions", json=ASK, timeout=10)
    assert answer.content == body  # the client gets all of it
    (interaction,) = load_cassette(path).interactions
    outcome = interaction.outcome
    assert isinstance(outcome, Raised)
    assert outcome.status == 500
    assert f"the error body was {len(body):,} bytes; the first 65,536 were kept" in outcome.message
    assert len(outcome.message) < 1000
    assert path.stat().st_size < 10_000


@asynccontextmanager
async def _upstream_holding_all(count: int) -> AsyncIterator[str]:
    """An upstream on this loop that sends every stream's first event, then holds each until ``count`` streams are
    open at once: a proxy with a cap on concurrent upstream streams below ``count`` never lets it finish."""
    first = sse(chunk({"role": "assistant", "content": "a"}), done=False)
    rest = sse(chunk({"content": "b"}), chunk({}, finish_reason="stop"))
    everyone = asyncio.Event()
    open_streams = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_streams
        head = await reader.readuntil(b"\r\n\r\n")
        lengths = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
        length = int(lengths[0].split(b":")[1])
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"%x\r\n%s\r\n" % (len(first), first))
        await writer.drain()
        open_streams += 1
        if open_streams >= count:
            everyone.set()
        await everyone.wait()
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(rest), rest))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=512)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


async def test_a_hundred_and_ten_concurrent_streams_all_finish_and_are_all_recorded(tmp_path: Path) -> None:
    """Bounded by the clients' 20 s timeout; before the fix, the proxy's upstream pool (httpx's default of 100
    connections) held the 101st stream back for ever."""
    count = 110
    path = tmp_path / "many.msgpack"
    async with _upstream_holding_all(count) as upstream:
        proxy = RecordingProxy(upstream, path).start()
        try:
            limits = httpx2.Limits(max_connections=None)
            async with httpx2.AsyncClient(timeout=20, limits=limits) as client:

                async def one(number: int) -> bytes:
                    body = {**ASK, "messages": [{"role": "user", "content": f"client {number}"}]}
                    async with client.stream("POST", proxy.url + "/v1/chat/completions", json=body) as reply:
                        return b"".join([piece async for piece in reply.aiter_raw()])

                answers = await asyncio.gather(*(one(number) for number in range(count)))
        finally:
            await asyncio.to_thread(proxy.stop)
    assert all(answer.endswith(b"data: [DONE]\n\n") for answer in answers)
    interactions = load_cassette(path).interactions
    assert sorted(str(i.request.messages[0].content) for i in interactions) == sorted(
        f"client {n}" for n in range(count)
    )
    assert all(isinstance(interaction.outcome, Completed) for interaction in interactions)
