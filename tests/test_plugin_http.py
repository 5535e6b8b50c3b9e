"""The plugin's HTTP faces: ``tape.transport()`` / ``tape.http_client()`` and ``tape_server_url``, through ``pytester``.

Each project records with ``--tape-mode once`` against a loopback fake provider of its own, then replays with
that provider stopped: nothing but 127.0.0.1 is ever called, and the replay needs no network at all.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from chunktape import load_cassette
from fake_provider import FakeProvider, FakeResponse, chunk, sse
from helpers import run_pytest

KEY = "sk-plugin-abcdefghijklmnopqrstuvwxyz0123"
HELLO = sse(
    chunk({"role": "assistant", "content": "Hi"}), chunk({"content": " there"}), chunk({}, finish_reason="stop")
)

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = error
xfail_strict = true
addopts = --strict-markers -p no:cacheprovider -p no:hypothesispytest
"""

AGENT = '''
"""An agent on the openai SDK: one streamed question, sync or async."""
import os

import openai


def key():
    return os.environ.get("KEY", "sk-test")


def base_url():
    return os.environ.get("UPSTREAM", "http://127.0.0.1:9") + "/v1"


def ask(client, question="hi"):
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": question}], stream=True)
    return "".join(part.choices[0].delta.content or "" for part in stream if part.choices)


async def aask(client, question="hi"):
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": question}], stream=True
    )
    return "".join([part.choices[0].delta.content or "" async for part in stream if part.choices])
'''


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """A fake provider of this test's own, so the test can stop it before replaying."""
    server = FakeProvider()
    server.start()
    monkeypatch.setenv("UPSTREAM", server.url)
    monkeypatch.setenv("KEY", KEY)
    try:
        yield server
    finally:
        server.stop()


def project(pytester: pytest.Pytester, **files: str) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makepyfile(agent=AGENT)
    pytester.makepyfile(**{name: textwrap.dedent(text) for name, text in files.items()})


SDK_TESTS = """
import asyncio
import os

import httpx
import httpx2
import openai

from agent import aask, ask, base_url, key


def test_sync_sdk(tape):
    with pytest_no_loop():
        client = openai.OpenAI(
            base_url=base_url(), api_key=key(), http_client=httpx2.Client(transport=tape.transport(sync=True))
        )
        with client:
            assert ask(client) == "Hi there"
    assert len(tape.calls) == 1 and tape.calls[0].request.messages[-1].content == "hi"


async def test_async_httpx_client(tape):
    client = openai.AsyncOpenAI(base_url=base_url(), api_key=key(), http_client=tape.http_client(kind="httpx"))
    async with client:
        assert await aask(client, "again") == "Hi there"


class pytest_no_loop:
    def __enter__(self):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self
        raise AssertionError("a sync test must run without an event loop")

    def __exit__(self, *exc):
        pass
"""


def test_sdk_tests_record_once_then_replay_offline(pytester: pytest.Pytester, provider: FakeProvider) -> None:
    project(pytester, test_sdk=SDK_TESTS)
    provider.enqueue(FakeResponse(body=HELLO), FakeResponse(body=HELLO))
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=2)
    assert provider.requests[0].headers["authorization"] == f"Bearer {KEY}"
    folder = pytester.path / "cassettes" / "test_sdk"
    for name in ("test_sync_sdk", "test_async_httpx_client"):
        path = folder / f"{name}.msgpack"
        assert KEY.encode() not in path.read_bytes()
        assert len(load_cassette(path).interactions) == 1
    provider.stop()  # offline from here on
    run_pytest(pytester, "--tape-strict").assert_outcomes(passed=2)
    run_pytest(pytester, "--tape-mode", "once", "--tape-strict").assert_outcomes(passed=2)


def test_replay_only_without_a_cassette_fails_with_the_recording_hint(pytester: pytest.Pytester) -> None:
    project(pytester, test_sdk=SDK_TESTS)
    result = run_pytest(pytester, "-k", "test_sync_sdk")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CASSETTE_NOT_FOUND*--tape-mode once*"])


def test_a_failed_sdk_test_keeps_its_recording_aside(pytester: pytest.Pytester, provider: FakeProvider) -> None:
    project(
        pytester,
        test_fails="""
        import os

        import httpx2
        import openai

        from agent import ask, base_url, key


        def test_sdk(tape):
            with openai.OpenAI(
                base_url=base_url(), api_key=key(), http_client=httpx2.Client(transport=tape.transport(sync=True))
            ) as client:  # closing the client does not save: the teardown does, by the outcome
                assert ask(client) == "Hi there"
            assert False, "the agent's own assertion"
        """,
    )
    provider.enqueue(FakeResponse(body=HELLO))
    run_pytest(pytester, "--tape-mode", "once").assert_outcomes(failed=1)
    folder = pytester.path / "cassettes" / "test_fails"
    assert sorted(path.name for path in folder.iterdir()) == ["test_sdk.failed.msgpack"]


def test_strict_mode_fails_an_sdk_test_that_leaves_an_interaction_unplayed(
    pytester: pytest.Pytester, provider: FakeProvider
) -> None:
    project(
        pytester,
        test_two="""
        import os

        import httpx2
        import openai

        from agent import ask, base_url, key


        def test_two(tape):
            client = openai.OpenAI(
                base_url=base_url(), api_key=key(), http_client=httpx2.Client(transport=tape.transport(sync=True))
            )
            with client:
                assert ask(client, "one") == "Hi there"
                if os.environ.get("BOTH") == "1":
                    assert ask(client, "two") == "Hi there"
        """,
    )
    provider.enqueue(FakeResponse(body=HELLO), FakeResponse(body=HELLO))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("BOTH", "1")
        run_pytest(pytester, "--tape-mode", "once").assert_outcomes(passed=1)
    result = run_pytest(pytester, "--tape-strict")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--tape-strict: 1 of 2 recorded interaction(s)*two*"])


def test_the_fault_matrix_runs_over_an_sdk_test(pytester: pytest.Pytester, provider: FakeProvider) -> None:
    """Transient faults fire once; the SDK's own retry (in virtual time: the 429's Retry-After is 2 s) or the
    agent's replays the recording and recovers."""
    project(
        pytester,
        test_matrix="""
        import os

        import openai
        import pytest

        from agent import aask, base_url, key

        FAULTS = ["http-429", "http-503", "disconnect-before-first-chunk", "disconnect-after-first-chunk"]


        @pytest.mark.tape_fault_matrix(faults=FAULTS)
        async def test_agent_survives(tape):
            client = openai.AsyncOpenAI(base_url=base_url(), api_key=key(), http_client=tape.http_client())
            async with client:  # the SDK retries the HTTP errors; a broken stream is the agent's to retry
                for attempt in range(2):
                    try:
                        assert await aask(client) == "Hi there"
                        break
                    except openai.APIConnectionError:
                        assert tape.fault is not None and attempt == 0
                else:
                    raise AssertionError("no attempt succeeded")
        """,
    )
    provider.enqueue(FakeResponse(body=HELLO))
    result = run_pytest(pytester, "--tape-mode", "once", "-v")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*test_agent_survives?http-429? PASSED*", "*disconnect-after-first-chunk? PASSED*"])
    assert len(provider.requests) == 1  # only the fault-free run called the provider


SERVER_TESTS = """
import os
import subprocess
import sys

import openai
import pytest

# The agent in another process speaks plain HTTP with the standard library (as an agent in another language
# would): it reads the SSE line by line, as it streams.
AGENT = '''
import json, os, sys, urllib.request
body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
request = urllib.request.Request(
    sys.argv[1] + "/v1/chat/completions",
    data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + os.environ["KEY"], "Content-Type": "application/json"},
)
text = []
with urllib.request.urlopen(request, timeout=30) as response:
    assert response.headers["Content-Type"].startswith("text/event-stream"), response.headers["Content-Type"]
    for line in response:
        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
            choices = json.loads(line.removeprefix(b"data: "))["choices"]
            text.extend(choice["delta"].get("content") or "" for choice in choices)
print("".join(text))
'''


@pytest.fixture
def tape_upstream():
    return os.environ["UPSTREAM"]


def test_agent_in_a_subprocess(tape_server_url, tape):
    done = subprocess.run([sys.executable, "-c", AGENT, tape_server_url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Hi there"


@pytest.mark.tape(name="test_agent_in_a_subprocess", faults=["http-429"])
def test_faults_reach_a_client(tape_server_url):  # in process: the subprocess above shows the URL serves any process
    client = openai.OpenAI(base_url=tape_server_url + "/v1", api_key=os.environ["KEY"], max_retries=0)
    with client, pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
"""


def test_the_server_url_records_through_the_proxy_then_replays(
    pytester: pytest.Pytester, provider: FakeProvider
) -> None:
    project(pytester, test_served=SERVER_TESTS)
    provider.enqueue(FakeResponse(body=HELLO))
    run_pytest(pytester, "--tape-mode", "once", "-k", "test_agent_in_a_subprocess").assert_outcomes(passed=1)
    path = pytester.path / "cassettes" / "test_served" / "test_agent_in_a_subprocess.msgpack"
    assert KEY.encode() not in path.read_bytes()
    assert provider.requests[0].headers["authorization"] == f"Bearer {KEY}"
    provider.stop()
    run_pytest(pytester, "--tape-strict", "-k", "test_agent_in_a_subprocess").assert_outcomes(passed=1)
    run_pytest(pytester, "-k", "test_faults_reach_a_client").assert_outcomes(passed=1)
