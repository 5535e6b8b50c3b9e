"""A stall past the SDK's timeout, in process and over the socket, in virtual time: the SDK's own timeout error fires
at the timeout (not at the stall's end, not before), only the fault's silence moves the clock, and the retry gets
the recorded reply; a request the client gave up on is not counted as played.

The agent is the one a user writes (issue 31): ``AsyncOpenAI(timeout=5.0, max_retries=0)``, streaming, and its own
retry of a turn that failed with ``APIConnectionError`` (``APITimeoutError`` is one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import httpx2
import openai
import pytest

from chunktape import GenerateOptions, Message, RecordingAdapter, Timing, load_cassette
from chunktape._virtual_time import VirtualTimeLoop
from chunktape.faults import FailFirst, Stall
from chunktape.http import FaultTransport, ReplayServer, ReplayTransport
from chunktape.providers import ScriptedAdapter, ScriptedTurn
from fake_provider import chunk, sse

T = TypeVar("T")
QUESTIONS = ("What is the weather in Paris?", "And in Rome?", "Thanks!")
ANSWERS = ("Sunny in Paris.", "Rainy in Rome.", "You are welcome.")
RUNS = 20


def virtual(main: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, float]:
    """``main()`` on chunktape's virtual clock: its result and the loop seconds it took."""
    loop = VirtualTimeLoop()

    async def timed() -> tuple[T, float]:
        start = loop.time()
        result = await main()
        return result, loop.time() - start

    with asyncio.Runner(loop_factory=lambda: loop) as runner:
        return runner.run(timed())


async def _record(path: Path, gap_s: float = 0.0) -> None:
    turns = [ScriptedTurn(text=answer) for answer in ANSWERS]
    recorder = RecordingAdapter(ScriptedAdapter(turns, first_chunk_s=gap_s), path)
    history: list[Message] = []
    for question, answer in zip(QUESTIONS, ANSWERS, strict=True):
        history.append(Message(role="user", content=question))
        async for _ in recorder.stream(GenerateOptions(model="gpt-4o-mini", messages=list(history))):
            pass
        history.append(Message(role="assistant", content=answer))
    recorder.save()


@pytest.fixture(scope="module")
def conversation(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("timeouts") / "conversation.msgpack"
    asyncio.run(_record(path))
    return path


@dataclass
class Run:
    answers: list[str]
    timeouts: int
    attempts: int


async def agent(sdk: openai.AsyncOpenAI, attempts: int = 3) -> Run:
    """Three turns; a turn that fails with a connection error (a timeout is one) is asked again."""
    history: list[Any] = []
    answers: list[str] = []
    timeouts = tried = 0
    for question in QUESTIONS:
        history.append({"role": "user", "content": question})
        for _ in range(attempts):
            tried += 1
            try:
                stream = await sdk.chat.completions.create(model="gpt-4o-mini", messages=history, stream=True)
                text = "".join([event.choices[0].delta.content or "" async for event in stream if event.choices])
            except openai.APITimeoutError:
                timeouts += 1
                continue
            break
        else:
            raise AssertionError(f"{question!r} failed {attempts} times")
        answers.append(text)
        history.append({"role": "assistant", "content": text})
    await sdk.close()
    return Run(answers, timeouts, tried)


def _sdk(base_url: str, client: Any = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=base_url, api_key="sk-test", timeout=5.0, max_retries=0, http_client=client)


@pytest.mark.parametrize("kind", ["httpx2", "httpx"])
def test_in_process_a_stall_times_out_at_the_sdk_timeout_once_in_20_runs(conversation: Path, kind: str) -> None:
    library: Any = httpx2 if kind == "httpx2" else httpx
    for _ in range(RUNS):
        transport = ReplayTransport(conversation, faults=["stall-30s"])

        async def main(transport: ReplayTransport = transport) -> Run:
            return await agent(_sdk("http://127.0.0.1:9/v1", library.AsyncClient(transport=transport)))

        run, took = virtual(main)
        assert run == Run(list(ANSWERS), timeouts=1, attempts=4)
        assert took == pytest.approx(5.0, abs=0.01)  # the timeout, not the 30 s stall, and nothing else
        transport.assert_all_played()
        assert transport.injected == ["stall-30s", None, None, None]


def test_over_the_socket_a_stall_times_out_at_the_sdk_timeout_once_in_20_runs(conversation: Path) -> None:
    with ReplayServer(conversation, faults=["stall-30s"]) as server:
        for _ in range(RUNS):
            server.reset()
            run, took = virtual(lambda: agent(_sdk(server.url + "/v1")))
            assert run == Run(list(ANSWERS), timeouts=1, attempts=4)
            # Only the fault's silence moved the clock: 5 s of it, then the client left (plus real I/O slices).
            assert 5.0 <= took < 10.0
            server.playback.assert_all_played()
            assert server.playback.injected == ["stall-30s", None, None, None]


def test_the_sdks_own_retry_after_a_stall_before_the_reply_gets_the_recorded_reply(conversation: Path) -> None:
    """A silence before the first content: the response itself is late, so openai's own retry (max_retries) runs."""
    fault = FailFirst(n=1, fault=Stall(after_chunks=0, seconds=30))
    for face in ("in-process", "server"):

        async def main(face: str = face) -> tuple[str, int]:
            if face == "in-process":
                transport = ReplayTransport(conversation, faults=[fault])
                sdk = openai.AsyncOpenAI(
                    base_url="http://127.0.0.1:9/v1",
                    api_key="k",
                    timeout=3.0,
                    max_retries=1,
                    http_client=httpx2.AsyncClient(transport=transport),
                )
                calls = transport.playback
            else:
                server = ReplayServer(conversation, faults=[fault], timing=Timing.instant())
                server.start()
                sdk = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", timeout=3.0, max_retries=1)
                calls = server.playback
            try:
                stream = await sdk.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": QUESTIONS[0]}], stream=True
                )
                text = "".join([event.choices[0].delta.content or "" async for event in stream if event.choices])
            finally:
                await sdk.close()
                if face == "server":
                    await asyncio.to_thread(server.stop)
            return text, calls.calls

        (text, calls), took = virtual(main)
        assert (text, calls) == (ANSWERS[0], 2)
        # 3 s of timeout, then openai's own back-off (0.5 s to 1 s, jittered) before its retry.
        assert 3.0 <= took < 5.0


def test_a_sync_client_times_out_at_its_timeout_and_retries_in_virtual_time(conversation: Path) -> None:
    transport = ReplayTransport(conversation, faults=[Stall(after_chunks=0, seconds=600)], virtual_time=True)
    sdk = openai.OpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        timeout=5.0,
        max_retries=0,
        http_client=httpx2.Client(transport=transport),
    )
    messages: Any = [{"role": "user", "content": QUESTIONS[0]}]
    with pytest.raises(openai.APITimeoutError), sdk:
        sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
    with openai.OpenAI(
        base_url="http://127.0.0.1:9/v1", api_key="k", timeout=5.0, http_client=httpx2.Client(transport=transport)
    ) as again:
        stream = again.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
        assert "".join(event.choices[0].delta.content or "" for event in stream if event.choices) == ANSWERS[0]
    assert transport.playback.play_counts[0] == 1


async def test_the_fault_transport_raises_the_read_timeout_of_the_clients_library() -> None:
    body = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hi"}), chunk({}, finish_reason="stop"))
    for library in (httpx2, httpx):
        upstream = library.MockTransport(
            lambda request, library=library: library.Response(
                200, headers={"content-type": "text/event-stream"}, content=body
            )
        )

        async def main(library: Any = library, upstream: Any = upstream) -> str:
            transport = FaultTransport(upstream, [Stall(after_chunks=1, seconds=30)])
            url = "http://127.0.0.1:9/v1/chat/completions"
            async with (
                library.AsyncClient(transport=transport, timeout=2.0) as client,
                client.stream("POST", url, json={}) as reply,
            ):
                try:
                    async for _ in reply.aiter_bytes():
                        pass
                except library.ReadTimeout:
                    return "ReadTimeout"
            return "no timeout"

        outcome, took = await asyncio.to_thread(virtual, main)
        assert outcome == "ReadTimeout"
        assert took == pytest.approx(2.0, abs=0.01)


def test_a_request_the_client_gave_up_on_is_not_counted_as_played(tmp_path: Path) -> None:
    """Recorded timing slower than the client's patience: the reply never reached it, so it stays unplayed, in
    process and over the socket; the client's next try (with more patience) replays it."""
    path = tmp_path / "slow.msgpack"
    virtual(lambda: _record(path, gap_s=8.0))  # recorded on the virtual clock: 8 s gaps cost no wall time
    messages: Any = [{"role": "user", "content": QUESTIONS[0]}]

    async def ask(sdk: openai.AsyncOpenAI) -> str:
        try:
            stream = await sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
            return "".join([event.choices[0].delta.content or "" async for event in stream if event.choices])
        except openai.APITimeoutError:
            return "timeout"
        finally:
            await sdk.close()

    transport = ReplayTransport(path, timing=Timing.recorded())

    async def in_process() -> list[str]:
        impatient = _sdk("http://127.0.0.1:9/v1", httpx2.AsyncClient(transport=transport))
        patient = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9/v1",
            api_key="k",
            max_retries=0,
            timeout=30.0,
            http_client=httpx2.AsyncClient(transport=transport),
        )
        first = await ask(impatient)
        assert transport.playback.play_counts[0] == 0
        return [first, await ask(patient)]

    assert virtual(in_process)[0] == ["timeout", ANSWERS[0]]
    assert transport.playback.play_counts[0] == 1

    with ReplayServer(path, timing=Timing.recorded()) as server:

        async def served() -> list[str]:
            first = await ask(_sdk(server.url + "/v1"))
            for _ in range(100):  # the server learns of the disconnect from its own loop
                if server.playback.play_counts[0] == 0:
                    break
                await asyncio.sleep(0.01)
            patient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, timeout=30.0)
            return [first, await ask(patient)]

        assert virtual(served)[0] == ["timeout", ANSWERS[0]]
        assert server.playback.play_counts == [1, 0, 0]
    assert len(load_cassette(path).interactions) == 3


async def test_a_sync_client_replays_with_a_fault_inside_a_running_event_loop(conversation: Path) -> None:
    """A sync SDK called from async code: the body's private loop runs in a thread of its own."""
    transport = ReplayTransport(
        conversation, faults=["stall-30s"], timing=Timing.fixed(0.001, 0.001), virtual_time=True
    )
    messages: Any = [{"role": "user", "content": QUESTIONS[0]}]
    sdk = openai.OpenAI(
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        timeout=5.0,
        max_retries=0,
        http_client=httpx2.Client(transport=transport),
    )
    with sdk:
        with pytest.raises(openai.APITimeoutError):
            for _ in sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True):
                pass
        stream = sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
        assert "".join(event.choices[0].delta.content or "" for event in stream if event.choices) == ANSWERS[0]


@pytest.mark.xdist_group("langchain-openai")
def test_a_framework_times_out_at_the_stall_and_its_retry_gets_the_reply(conversation: Path) -> None:
    """langchain-openai, in process and through serve: its timeout error at the SDK's timeout, then the reply."""
    from langchain_openai import ChatOpenAI

    async def ask(base_url: str, client: Any) -> tuple[list[str], float]:
        model = ChatOpenAI(
            model="gpt-4o-mini",
            base_url=base_url,
            api_key="k",  # type: ignore[arg-type]
            timeout=5.0,
            max_retries=0,
            http_async_client=client,
        )
        outcomes: list[str] = []
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(2):
            try:
                outcomes.append("".join([str(piece.content) async for piece in model.astream(QUESTIONS[0])]))
            except openai.APITimeoutError:
                outcomes.append("timeout")
        await client.aclose()
        return outcomes, loop.time() - start

    transport = ReplayTransport(conversation, faults=["stall-30s"])
    (outcomes, took), _ = virtual(lambda: ask("http://127.0.0.1:9/v1", httpx2.AsyncClient(transport=transport)))
    assert outcomes == ["timeout", ANSWERS[0]]
    assert took == pytest.approx(5.0, abs=0.01)
    with ReplayServer(conversation, faults=["stall-30s"]) as server:
        (outcomes, took), _ = virtual(lambda: ask(server.url + "/v1", httpx2.AsyncClient()))
    assert outcomes == ["timeout", ANSWERS[0]]
    assert 5.0 <= took < 10.0
