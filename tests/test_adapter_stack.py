"""A thin adapter stack: ``WrappingAdapter`` delegates, credentials are declared by assignment, the ``tape``
fixture is the session, and a call hashes its request once."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

import pytest

import chunktape._cassettes.model as model
from chunktape import (
    ErrorCode,
    FinishReason,
    GenerateOptions,
    LlmAdapter,
    ReasoningOption,
    RecordingAdapter,
    Reply,
    StreamChunk,
    WrappingAdapter,
    use_cassette,
)
from chunktape.pytest import Tape
from helpers import PacedAdapter, collect, collect_until_error, options, paced, run_pytest, text_stream
from test_pytest_plugin import project

KEY = "sk-declared-by-assignment-0123456789"


class KeyedAdapter(LlmAdapter):
    """Declares its credential the plain way, by assignment in ``__init__``, and echoes it in its reply."""

    def __init__(self, api_key: str) -> None:
        self.secrets = [api_key]
        self.closed = False

    @property
    def name(self) -> str:
        return "keyed"

    def reasoning_options(self) -> Sequence[ReasoningOption]:
        return (ReasoningOption(id="deep"),)

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        for chunk in text_stream(f"your key is {self.secrets[0]}"):
            yield chunk

    async def complete(self, options: GenerateOptions) -> Reply:
        return Reply(text="from the non-streaming endpoint", finish=FinishReason(kind="stop"))

    async def aclose(self) -> None:
        self.closed = True


async def test_an_adapter_declares_its_credentials_by_assignment_and_the_recorder_redacts_them(
    tmp_path: Path,
) -> None:
    inner = KeyedAdapter(KEY)
    assert inner.secrets == [KEY]
    recorder = RecordingAdapter(inner, tmp_path / "c.msgpack")
    assert recorder.secrets == [KEY]
    await collect(recorder.stream(options()))
    saved = recorder.save()
    assert saved is not None
    assert KEY not in (tmp_path / "c.msgpack").read_bytes().decode(errors="replace")


async def test_a_wrapper_delegates_everything_but_what_it_overrides() -> None:
    inner = KeyedAdapter(KEY)
    wrapper = WrappingAdapter(inner)
    assert (wrapper.name, list(wrapper.secrets), wrapper.reasoning_options()) == (
        "keyed",
        [KEY],
        inner.reasoning_options(),
    )
    assert await collect(wrapper.stream(options())) == text_stream(f"your key is {KEY}")
    # stream() not overridden: complete() is the inner adapter's own (its non-streaming endpoint)
    assert (await wrapper.complete(options())).text == "from the non-streaming endpoint"
    wrapper.secrets = ["another-credential"]
    assert list(wrapper.secrets) == ["another-credential"]
    await wrapper.aclose()
    assert not inner.closed  # a wrapper does not own its inner adapter


async def test_a_wrapper_that_overrides_stream_completes_through_it() -> None:
    seen: list[StreamChunk] = []

    class Counting(WrappingAdapter):
        async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
            async for chunk in self.inner.stream(options):
                seen.append(chunk)
                yield chunk

    reply = await Counting(KeyedAdapter(KEY)).complete(options())
    assert reply.text == f"your key is {KEY}"
    assert seen == text_stream(f"your key is {KEY}")


async def test_a_session_call_hashes_its_request_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.msgpack"
    async with use_cassette(path, live=lambda: PacedAdapter(paced(text_stream("x"))), mode="once") as session:
        await collect(session.stream(options("recorded")))
    hashed: list[str] = []
    real = model.request_fingerprint

    def counting(request: model.RecordedRequest) -> str:
        hashed.append(request.model)
        return real(request)

    monkeypatch.setattr(model, "request_fingerprint", counting)
    async with use_cassette(path, live=lambda: PacedAdapter(paced(text_stream("y"))), mode="new_episodes") as session:
        assert await collect(session.stream(options("recorded"))) == text_stream("x")  # replayed
        assert len(hashed) == 1
        assert await collect(session.stream(options("new"))) == text_stream("y")  # recorded
        assert len(hashed) == 2
    assert [call.recorded for call in session.calls] == [False, True]


async def test_a_session_remembers_its_first_miss_even_when_the_caller_catches_it(tmp_path: Path) -> None:
    session = use_cassette(tmp_path / "missing.msgpack")
    _, error = await collect_until_error(session.stream(options()))
    await collect_until_error(session.stream(options("again")))
    assert error.code is ErrorCode.CASSETTE_NOT_FOUND
    assert session.miss is error


async def test_the_tape_fixtures_session_ignores_aclose_the_fixture_saves_it(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    session = Tape(path, live=lambda: PacedAdapter(paced(text_stream("x"))), mode="once")
    async with session:
        await collect(session.stream(options()))
    await session.aclose()
    assert not path.exists()
    assert session.save() == path  # what the owner does, once the outcome is known


FIXTURE_TEST = """
    import pytest
    from chunktape import CassetteSession
    from chunktape.pytest._plugin import Tape
    from agent import ask


    @pytest.mark.tape_fault_matrix(faults=["http-500"])
    async def test_tape_is_the_session(tape: Tape):
        assert isinstance(tape, CassetteSession)
        async with tape:  # the fixture saves at teardown, not here
            try:
                await ask(tape, "a")
            except Exception:
                assert tape.fault is not None and tape.injected == ["http-500"]
            else:
                assert tape.fault is None and tape.fault_id is None
        assert tape.path.name == "test_tape_is_the_session.msgpack"
        assert not tape.path.exists() or tape.mode.value == "none"
"""


def test_the_tape_fixture_yields_the_session(pytester: pytest.Pytester) -> None:
    project(pytester, test_stack=FIXTURE_TEST)
    run_pytest(pytester, "--tape-mode", "once", "-k", "no-fault").assert_outcomes(passed=1, deselected=1)
    run_pytest(pytester).assert_outcomes(passed=2)
