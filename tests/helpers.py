"""Small adapters written for the tests, and chunk-stream builders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from pathlib import Path

import msgspec

from chunktape import (
    BlockEnd,
    BlockStart,
    CallId,
    Cassette,
    Finish,
    FinishReason,
    GenerateOptions,
    Interaction,
    LlmAdapter,
    LlmError,
    Message,
    Raised,
    RecordedRequest,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    abort,
    save_cassette,
)

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


async def collect(stream: AsyncIterator[StreamChunk]) -> list[StreamChunk]:
    return [chunk async for chunk in stream]


async def collect_until_error(stream: AsyncIterator[StreamChunk]) -> tuple[list[StreamChunk], LlmError]:
    """The chunks a stream yields before it raises, and the ``LlmError`` it raises."""
    got: list[StreamChunk] = []
    try:
        async for chunk in stream:
            got.append(chunk)
    except LlmError as error:
        return got, error
    raise AssertionError("the stream ended without raising LlmError")


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
