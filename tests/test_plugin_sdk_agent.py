"""A user's own openai-SDK agent under the plugin, as issue 31 wrote it: streaming, one tool, its own retry of a turn
that failed with ``APIConnectionError``, ``AsyncOpenAI(timeout=5.0, max_retries=0)``. Recorded once against a
loopback provider, then, offline, 20 runs of 20 each: ``stall-30s`` over ``tape_server_url`` and in process, the
fault matrix, and the fault search, each in virtual time with the SDK's timeout really firing at the stall.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator

import pytest

from chunktape import load_cassette
from fake_provider import FakeProvider, FakeResponse
from helpers import run_pytest
from sdk_agents import text_and_tool_call, text_only
from test_plugin_http import INI

AGENT = '''
"""The user's agent: asks, runs the weather tool the model calls, asks again; retries a turn that failed."""
import asyncio
import json
import os

import openai

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def weather(city):
    return f"sunny in {city}"


class Agent:
    def __init__(self, base_url, http_client=None):
        self.sdk = openai.AsyncOpenAI(base_url=base_url, api_key=os.environ.get("KEY", "sk-test"), timeout=5.0,
                                      max_retries=0, http_client=http_client)
        self.timeouts = 0
        self.failures = 0
        self.started = asyncio.get_running_loop().time()

    async def turn(self, messages):
        for _ in range(3):
            try:
                stream = await self.sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS,
                                                                stream=True)
                text, calls = "", {}
                async for event in stream:
                    for choice in event.choices:
                        text += choice.delta.content or ""
                        for call in choice.delta.tool_calls or ():
                            entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                            entry["id"] = call.id or entry["id"]
                            entry["name"] = (call.function.name or entry["name"]) if call.function else entry["name"]
                            entry["arguments"] += (call.function.arguments or "") if call.function else ""
                return text, [calls[index] for index in sorted(calls)]
            except openai.APITimeoutError:
                self.timeouts += 1
            except openai.APIConnectionError:
                self.failures += 1
        raise RuntimeError("the turn failed three times")

    async def ask(self, question):
        messages = [{"role": "user", "content": question}]
        text, calls = await self.turn(messages)
        while calls:
            messages.append({"role": "assistant", "content": text or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls]})
            for c in calls:
                city = json.loads(c["arguments"])["city"]
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": weather(city)})
            text, calls = await self.turn(messages)
        await self.sdk.close()
        return text

    def took(self):
        return asyncio.get_running_loop().time() - self.started
'''

TESTS = """
import os

import pytest

from agent import Agent

URL = os.environ.get("UPSTREAM", "http://127.0.0.1:9") + "/v1"  # only a recording reaches it
QUESTION = "What is the weather in Paris?"
ANSWER = "It is sunny in Paris."


@pytest.mark.tape(name="agent")
async def test_record(tape):
    assert await Agent(URL, tape.http_client()).ask(QUESTION) == ANSWER


@pytest.mark.parametrize("run", range(20))
@pytest.mark.tape(name="agent", faults=["stall-30s"])
async def test_stall_over_the_socket(tape_server_url, run):
    agent = Agent(tape_server_url + "/v1")
    assert await agent.ask(QUESTION) == ANSWER
    assert (agent.timeouts, agent.failures) == (1, 0)
    assert 5.0 <= agent.took() < 30.0  # the timeout fired at 5 s of virtual time, not after the stall


@pytest.mark.parametrize("run", range(20))
@pytest.mark.tape(name="agent", faults=["stall-30s"])
async def test_stall_in_process(tape, run):
    agent = Agent(URL, tape.http_client())
    assert await agent.ask(QUESTION) == ANSWER
    assert (agent.timeouts, agent.failures) == (1, 0)
    assert agent.took() == pytest.approx(5.0, abs=0.01)


@pytest.mark.parametrize("run", range(20))
@pytest.mark.tape(name="agent")
@pytest.mark.tape_fault_matrix(faults=["stall-30s", "disconnect-mid-text", "disconnect-before-first-chunk"])
async def test_matrix(tape, run):
    agent = Agent(URL, tape.http_client())
    assert await agent.ask(QUESTION) == ANSWER
    if tape.fault_id == "stall-30s":
        assert (agent.timeouts, agent.failures) == (1, 0)
        assert agent.took() == pytest.approx(5.0, abs=0.01)
    elif tape.fault_id is not None:  # a disconnect: the SDK's connection error, once
        assert (agent.timeouts, agent.failures) == (0, 1)


@pytest.mark.parametrize("run", range(20))
@pytest.mark.tape(name="agent")
@pytest.mark.tape_fault_search(faults=["stall-30s", "disconnect-mid-text"], max_examples=3, max_faults=1,
                               database=None)
async def test_search(tape, run):
    agent = Agent(URL, tape.http_client())
    assert await agent.ask(QUESTION) == ANSWER


@pytest.mark.parametrize("run", range(20))
@pytest.mark.tape(name="agent")
@pytest.mark.tape_fault_search(faults=["stall-30s", "disconnect-mid-text"], max_examples=2, max_faults=1,
                               database=None)
async def test_search_over_the_socket(tape_server_url, tape, run):
    agent = Agent(tape_server_url + "/v1")
    assert await agent.ask(QUESTION) == ANSWER
"""


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    server = FakeProvider()
    server.start()
    monkeypatch.setenv("KEY", "sk-user-abcdefghijklmnopqrstuvwxyz0123")
    monkeypatch.setenv("UPSTREAM", server.url)
    try:
        yield server
    finally:
        server.stop()


def test_the_users_agent_passes_20_of_20_under_every_face(pytester: pytest.Pytester, provider: FakeProvider) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makepyfile(agent=AGENT, test_agent=textwrap.dedent(TESTS))
    pytester.makeconftest(
        f"""
        import pytest

        @pytest.fixture
        def tape_upstream():
            return {provider.url!r}
        """
    )
    # Recorded once, against the loopback provider, through the SDK's own client.
    provider.enqueue(FakeResponse(body=text_and_tool_call()), FakeResponse(body=text_only()))
    recorded = run_pytest(pytester, "--tape-mode", "once", "-k", "test_record")
    recorded.assert_outcomes(passed=1)
    cassette = load_cassette(pytester.path / "cassettes" / "test_agent" / "agent.msgpack")
    assert len(cassette.interactions) == 2
    provider.stop()  # offline from here on

    result = run_pytest(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=1 + 20 + 20 + 20 * 4 + 20 + 20)
