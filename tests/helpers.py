"""Small adapters written for the tests, chunk-stream and cassette builders, and the ways tests consume a stream."""

from __future__ import annotations

import asyncio
import functools
import itertools
import signal
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    Cassette,
    Completed,
    Event,
    Finish,
    FinishReason,
    GenerateOptions,
    Interaction,
    LlmAdapter,
    LlmError,
    Message,
    Outcome,
    Raised,
    RecordedRequest,
    StreamChunk,
    StreamValidator,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    save_cassette,
)
from chunktape import _abort as abort

if TYPE_CHECKING:  # not at run time: the processes some tests start import these helpers, and not pytest
    import pytest

    from chunktape.faults import Fault

Step = tuple[float, StreamChunk]


def text_stream(*pieces: str, finish: str = "stop") -> list[StreamChunk]:
    """A valid one-text-block stream."""
    return [
        BlockStart(index=0, block_type="text"),
        *(TextDelta(index=0, text=piece) for piece in pieces),
        BlockEnd(index=0, block=TextBlock(text="".join(pieces))),
        UsageChunk(usage=TokenUsage(input_tokens=5, output_tokens=len(pieces))),
        Finish(reason=FinishReason(kind=finish)),  # type: ignore[arg-type]
    ]


def tool_stream(name: str, *argument_pieces: str, call_id: str = "call_1") -> list[StreamChunk]:
    """A valid one-tool-call stream whose arguments arrive in ``argument_pieces``."""
    first, *rest = argument_pieces
    return [
        BlockStart(index=0, block_type="tool-call"),
        ToolCallDelta(index=0, id=CallId(call_id), name=name, arguments_delta=first),
        *(ToolCallDelta(index=0, arguments_delta=piece) for piece in rest),
        BlockEnd(index=0, block=ToolCallBlock(id=CallId(call_id), name=name, arguments="".join(argument_pieces))),
        UsageChunk(usage=TokenUsage(input_tokens=5, output_tokens=3)),
        Finish(reason=FinishReason(kind="tool-calls")),
    ]


def options(content: str = "hello", *, model: str = "test-model", **fields: object) -> GenerateOptions:
    return GenerateOptions(model=model, messages=[Message(role="user", content=content)], **fields)  # type: ignore[arg-type]


def recorded_request(content: str = "hello", *, model: str = "test-model", **fields: Any) -> RecordedRequest:
    """``options(...)`` as a cassette records it."""
    return RecordedRequest.from_options(options(content, model=model, **fields))


def interaction_of(
    chunks: Sequence[StreamChunk],
    outcome: Outcome | None = None,
    *,
    request: RecordedRequest | None = None,
    content: str = "hello",
    gap_ns: int = 1_000_000,
    start_ns: int | None = None,
    **fields: Any,
) -> Interaction:
    """A recorded interaction of ``chunks``, one every ``gap_ns`` from ``start_ns`` (default: one gap in).

    The request is ``request`` or ``recorded_request(content, **fields)``; the outcome defaults to a normal
    end one gap after the last chunk.
    """
    start = gap_ns if start_ns is None else start_ns
    events = [Event(t_ns=start + gap_ns * n, chunk=chunk) for n, chunk in enumerate(chunks)]
    return Interaction(
        request=request or recorded_request(content, **fields),
        events=events,
        outcome=outcome or Completed(t_ns=start + gap_ns * len(chunks)),
    )


def cassette_of(*interactions: Interaction) -> Cassette:
    return Cassette(interactions=list(interactions))


T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a fresh event loop of its own, ended as ``asyncio.run`` ends one (for sync tests and
    hypothesis); unlike ``asyncio.run``, the thread's current loop, which the conftest owns, is left alone."""
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        return runner.run(coroutine)


class PacedAdapter(LlmAdapter):
    """Yields each chunk after its delay (``asyncio.sleep``), then raises ``error`` if given.

    ``steps`` may be a callable of the request, so one adapter answers many different requests.
    """

    def __init__(
        self,
        steps: Sequence[Step] | Callable[[GenerateOptions], Sequence[Step]],
        *,
        error: BaseException | None = None,
        secrets: Sequence[str] = (),
        name: str = "paced",
    ) -> None:
        self._steps = steps
        self._error = error
        self.secrets = tuple(secrets)
        self._name = name
        self.calls = 0
        self.closed = 0

    @property
    def name(self) -> str:
        return self._name

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        self.calls += 1
        steps = self._steps(options) if callable(self._steps) else self._steps
        try:
            for delay, chunk in steps:
                await abort.sleep(delay, options.signal)
                yield chunk
            if self._error is not None:
                raise self._error
        finally:
            self.closed += 1


def paced(chunks: Sequence[StreamChunk], gap: float = 0.0) -> list[Step]:
    return [(gap, chunk) for chunk in chunks]


class GatedAdapter(LlmAdapter):
    """Yields the first chunk, then waits until the test sets ``release`` before yielding the rest."""

    def __init__(self, chunks: Sequence[StreamChunk]) -> None:
        self.chunks = list(chunks)
        self.release = asyncio.Event()

    @property
    def name(self) -> str:
        return "gated"

    async def stream(self, options: GenerateOptions) -> AsyncGenerator[StreamChunk, None]:
        yield self.chunks[0]
        await self.release.wait()
        for chunk in self.chunks[1:]:
            yield chunk


def blocks(chunks: Sequence[StreamChunk]) -> list[Any]:
    """The complete blocks a stream's block-ends carry, in order: what a consumer assembles."""
    return [chunk.block for chunk in chunks if isinstance(chunk, BlockEnd)]


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


async def drain(
    stream: AsyncIterator[StreamChunk], *, validate: bool = False
) -> tuple[list[StreamChunk], LlmError | None]:
    """The chunks a stream yields and the ``LlmError`` it ends with (None: it ended normally).

    With ``validate`` each chunk is fed to a ``StreamValidator`` as it arrives: what a stream delivers before
    it breaks must always be a valid prefix.
    """
    validator = StreamValidator() if validate else None
    got: list[StreamChunk] = []
    try:
        async for chunk in stream:
            if validator is not None:
                validator.feed(chunk)
            got.append(chunk)
    except LlmError as error:
        return got, error
    return got, None


async def collect_until_error(stream: AsyncIterator[StreamChunk]) -> tuple[list[StreamChunk], LlmError]:
    """The chunks a stream yields before it raises, and the ``LlmError`` it raises."""
    got, error = await drain(stream)
    if error is None:
        raise AssertionError("the stream ended without raising LlmError")
    return got, error


async def stream_chunks(adapter: LlmAdapter, options: GenerateOptions) -> list[StreamChunk]:
    """Every chunk of one ``stream(options)`` call, the adapter closed afterwards (an ``LlmError`` propagates)."""
    try:
        return await collect(adapter.stream(options))
    finally:
        await adapter.aclose()


async def stream_outcome(adapter: LlmAdapter, options: GenerateOptions) -> tuple[list[StreamChunk], LlmError | None]:
    """One ``stream(options)`` call drained with validation (see ``drain``), the adapter closed afterwards."""
    try:
        return await drain(adapter.stream(options), validate=True)
    finally:
        await adapter.aclose()


def cassette_with_raised_status(folder: Path, status: int) -> Path:
    """A JSON cassette whose one ``Raised`` outcome holds ``status``, as an old or hand-edited file could
    (the model refuses to build one outside 400-599, so the file is edited after it is written)."""
    good = Cassette(
        interactions=[
            Interaction(
                request=RecordedRequest.from_options(options()),
                events=[],
                outcome=Raised(t_ns=7, code="PROVIDER_HTTP_ERROR", message="slow down", status=429),
            )
        ]
    )
    path = folder / "raised-status.json"
    save_cassette(good, path)
    document = msgspec.json.decode(path.read_bytes())
    document["interactions"][0]["outcome"]["status"] = status
    path.write_bytes(msgspec.json.encode(document))
    return path


# The plugins a pytester project runs with, loaded by name: ours (the suite itself runs with ``-p no:chunktape``),
# pytest-asyncio's, looptime's (the fault matrix runs in virtual time) and xdist's. Not every installed one: at
# every pytest start, autoloading reads the metadata of each installed distribution (114 here) and the file list
# of each one with a plugin, then registers and parses all ten plugins: 355 ms of CPU per in-process run, against
# 73 ms (langsmith's plugin, which langchain brings in, cost about 4 s more before it was left out).
# test_pytest_plugin's test_async_tests_under_pytest_asyncio_strict_mode_and_anyio runs as users do, autoloading.
_PLUGIN_NAMES = ("chunktape", "asyncio", "looptime_plugin", "xdist")
PYTEST_PLUGINS = (
    "--disable-plugin-autoload",
    *itertools.chain.from_iterable(("-p", name) for name in _PLUGIN_NAMES),
    # pytest-asyncio's plugin is named "asyncio" (looptime finds it by that name), like the standard module that
    # is imported long before: pytest would warn that it cannot rewrite that module's asserts.
    *("-W", "ignore:Module already imported so cannot be rewritten; asyncio:pytest.PytestAssertRewriteWarning"),
)


@functools.cache
def _named_plugins() -> dict[str, object]:
    import importlib.metadata  # here: the processes some tests start import these helpers, and never need it

    found = {ep.name: ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.name in _PLUGIN_NAMES}
    return {name: found[name].load() for name in _PLUGIN_NAMES}


class _Preregistered:
    """Registers the plugins of ``PYTEST_PLUGINS`` under their entry-point names as the session starts, so that
    its ``-p name`` options find them loaded: ``-p`` would look each name up in the entry points of every
    installed distribution first, about 10 ms a name at each run. xdist's workers still load them by ``-p``."""

    def pytest_addhooks(self, pluginmanager: pytest.PytestPluginManager) -> None:
        for name, plugin in _named_plugins().items():
            if pluginmanager.get_plugin(name) is None:
                pluginmanager.register(plugin, name)


def run_pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """One pytest session over a pytester project, in this interpreter, with the plugins of ``PYTEST_PLUGINS``."""
    return pytester.runpytest(*PYTEST_PLUGINS, *args, plugins=[_Preregistered()])


def interrupt(process: subprocess.Popen[str], timeout: float = 30) -> tuple[str, str]:
    """Ctrl-C for a process a test started: SIGINT, then its output once it has exited.

    One that does not stop in time is killed before the test fails, so no process outlives its test (a
    ``Popen`` collected later warns, and with ``filterwarnings = error`` fails whatever test is running then).
    """
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"{process.args!r} did not stop within {timeout} s of SIGINT:\n{err}") from None


class Served:
    """A ``chunktape serve`` process a test started: its ``url``; once it stopped, what it printed after its first
    line (``out``, ``err``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.out = ""
        self.err = ""


@contextmanager
def serving(*args: str | Path) -> Iterator[Served]:
    """``chunktape serve ARGS --port 0`` as a user starts it, in a process of its own; then Ctrl-C, which must end it
    cleanly (exit 0)."""
    command = [sys.executable, "-m", "chunktape", "serve", *map(str, args), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    served: Served | None = None
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "serving on " not in line:
            process.kill()
            raise AssertionError(f"serve did not start: {line}{process.communicate()[1]}")
        served = Served(line.split("serving on ", 1)[1].split()[0])
        yield served
    finally:
        out, err = interrupt(process)
        if served is not None:
            served.out, served.err = out, err
    assert process.returncode == 0, err


def record_through_faults(source: Path, target: Path, faults: Sequence[Fault], calls: int | None = None) -> Cassette:
    """Record ``source``'s requests replayed with ``faults`` and its recorded timing (in virtual time) into
    ``target``: a recording whose errors name the injected fault, as a recording through a faulty replay has."""
    from chunktape import RecordingAdapter, ReplayAdapter, ReplayOptions, Timing, load_cassette
    from chunktape._virtual_time import replay_loop

    recorded = load_cassette(source)
    replay = ReplayAdapter(recorded, replay_options=ReplayOptions(timing=Timing.recorded(), faults=faults))
    recorder = RecordingAdapter(replay, target)

    async def main() -> None:
        for interaction in recorded.interactions[:calls]:
            try:
                async for _ in recorder.stream(interaction.request.to_options()):
                    pass
            except LlmError:
                pass

    with asyncio.Runner(loop_factory=replay_loop) as runner:
        runner.run(main())
    saved = recorder.save(failed=False)
    assert saved is not None
    return saved
