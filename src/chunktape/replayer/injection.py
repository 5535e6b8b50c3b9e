"""Applies fault specs (``chunktape.faults``) to a chunk stream, wherever the stream comes from.

How an adapter uses it, once per ``stream()`` call::

    active = plan.select(options)            # counts the call; FailFirst/Chaos/Targeted decide here
    if active is not None:
        active.before_stream()               # HttpError raises here, before any chunk: nothing consumed
    interaction = <match and reserve the recorded interaction>
    chunks = <its chunks, with the chosen timing>
    if active is not None:
        chunks = active.wrap(chunks, options.signal)
    try:
        async for chunk in chunks: yield chunk
    finally:
        if active is not None and not active.consumes_interaction:
            <release the interaction>        # a retry replays it

A fault that fails the call (``HttpError``, ``Disconnect``, ``Truncate``, ``Corrupt``) does not consume the
recorded interaction, so a retry replays it; ``Stall`` and ``Latency`` serve it in full and consume it,
unless the consumer abandoned the stream before its end (e.g. its idle watchdog fired during a stall).

Several faults may fire on one call; they compose in the order given (an ``HttpError`` among them wins, as it
fails the call before any chunk). Every error raised here names the fault id and its seed.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from chunktape import abort
from chunktape.errors import ErrorCode, LlmError
from chunktape.faults import (
    Chaos,
    Corrupt,
    Disconnect,
    FailFirst,
    Fault,
    HttpError,
    Latency,
    Stall,
    StreamFault,
    Targeted,
    Truncate,
    fault_id,
    parse_faults,
)
from chunktape.protocol import (
    AbortSignal,
    BlockEnd,
    BlockStart,
    CallId,
    Finish,
    FinishReason,
    GenerateOptions,
    ReasoningDelta,
    StreamChunk,
    TextBlock,
    TextDelta,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    UsageChunk,
    aclose_stream,
)

__all__ = [
    "ActiveFault",
    "FaultPlan",
    "FiredFault",
    "INJECTED_ERROR_CODES",
]

INJECTED_ERROR_CODES = frozenset({ErrorCode.PROVIDER_HTTP_ERROR, ErrorCode.STREAM_ABORTED, ErrorCode.CANCELLED})
"""The only ``LlmError`` codes injection itself raises (CANCELLED when the signal aborts a stall or delay)."""

_CONSUMING = (Stall, Latency)


class FiredFault(msgspec.Struct, frozen=True, kw_only=True):
    """One stream fault chosen for a call, with the id and seed its failure messages quote."""

    fault: StreamFault
    fault_id: str
    seed: int

    @property
    def label(self) -> str:
        """How failure messages name the fault: its id and its seed."""
        return f"injected fault {self.fault_id} (seed {self.seed})"


class ActiveFault:
    """The faults that fire on one call; ``before_stream()`` then ``wrap()`` apply them."""

    __slots__ = ("_outcome", "call", "delayed_s", "fired")

    def __init__(self, fired: Sequence[FiredFault], *, call: int) -> None:
        if not fired:
            raise ValueError("an ActiveFault needs at least one fired fault")
        self.fired = tuple(fired)
        self.call = call
        """The 1-based number of the ``stream()`` call this applies to."""
        self._outcome: Literal["pending", "served", "abandoned"] = "pending"
        self.delayed_s = 0.0
        """Seconds of delay the faults injected so far; a timed source shifts its schedule by this much."""

    @property
    def fault_id(self) -> str:
        return "+".join(item.fault_id for item in self.fired)

    @property
    def seed(self) -> int:
        return self.fired[0].seed

    @property
    def faults(self) -> tuple[StreamFault, ...]:
        return tuple(item.fault for item in self.fired)

    @property
    def consumes_interaction(self) -> bool:
        """Whether this call uses up the recorded interaction.

        False at once when a fault fails the call (``HttpError``, ``Disconnect``, ``Truncate``, ``Corrupt``),
        so a retry replays the interaction. ``Stall`` and ``Latency`` serve the whole interaction: True,
        unless the stream was abandoned before its end (a consumer's idle timeout during a stall), which
        this property reports once the wrapped stream has closed.
        """
        if not all(isinstance(item.fault, _CONSUMING) for item in self.fired):
            return False
        return self._outcome != "abandoned"

    @property
    def served(self) -> bool:
        """True once the wrapped stream was delivered to its end."""
        return self._outcome == "served"

    def before_stream(self) -> None:
        """Raise the injected ``PROVIDER_HTTP_ERROR`` if an ``HttpError`` fired; otherwise do nothing."""
        for item in self.fired:
            if isinstance(item.fault, HttpError):
                raise _http_error(item)

    def wrap(self, chunks: AsyncIterator[StreamChunk], signal: AbortSignal | None) -> AsyncIterator[StreamChunk]:
        """The faulty view of ``chunks``; closing it closes ``chunks``. Delays honour ``signal``."""
        stream = chunks
        for item in self.fired:
            stream = _apply(item, stream, signal, self._delayed)
        return self._track(stream)

    def _delayed(self, seconds: float) -> None:
        self.delayed_s += seconds

    async def _track(self, stream: AsyncIterator[StreamChunk]) -> AsyncIterator[StreamChunk]:
        try:
            async for chunk in stream:
                if type(chunk) is Finish:
                    # Served: a consumer may stop at the finish chunk without reading on to the end.
                    self._outcome = "served"
                yield chunk
            self._outcome = "served"
        finally:
            if self._outcome != "served":
                self._outcome = "abandoned"
            await aclose_stream(stream)

    def __repr__(self) -> str:
        return f"ActiveFault({self.fault_id!r}, seed={self.seed}, call={self.call})"


# -- selection ---------------------------------------------------------------------------------


def _seed_of(fault: StreamFault) -> int:
    return fault.seed if isinstance(fault, Latency | Corrupt) else 0


def _leaf(fault: StreamFault, *, name: str | None = None, seed: int | None = None) -> FiredFault:
    return FiredFault(fault=fault, fault_id=name or fault_id(fault), seed=_seed_of(fault) if seed is None else seed)


class _Selector:
    """Per-plan state of one fault spec: decides, call by call, whether (and which) stream fault fires."""

    def __init__(self, fault: Fault | FailFirst | Chaos) -> None:
        self.fault = fault
        self.seen = 0
        self._rng = random.Random(fault.seed) if isinstance(fault, Chaos) else None
        self._inner = _Selector(fault.fault) if isinstance(fault, Targeted) else None
        self._pattern = re.compile(fault.match) if isinstance(fault, Targeted) and fault.match is not None else None

    def draw(self, options: GenerateOptions, call: int) -> FiredFault | None:
        fault = self.fault
        self.seen += 1
        match fault:
            case FailFirst():
                if self.seen > fault.n:
                    return None
                return _leaf(fault.fault, name=fault.id)
            case Chaos():
                assert self._rng is not None
                # Always draw twice, so call n's outcome depends only on the seed and n.
                roll = self._rng.random()
                pick = self._rng.randrange(len(fault.faults))
                if roll >= fault.rate:
                    return None
                return _leaf(fault.faults[pick], name=fault.id, seed=fault.seed)
            case Targeted():
                assert self._inner is not None
                if fault.calls is not None and call not in fault.calls:
                    return None
                if fault.model is not None and options.model != fault.model:
                    return None
                if self._pattern is not None and not self._pattern.search(_request_text(options)):
                    return None
                fired = self._inner.draw(options, call)
                if fired is not None and fault.id is not None:
                    return msgspec.structs.replace(fired, fault_id=fault.id)
                return fired
            case _:
                return _leaf(fault)


def _request_text(options: GenerateOptions) -> str:
    return "\n".join(message.content for message in options.messages if message.content)


class FaultPlan:
    """The faults of one adapter, with their per-call state (call counter, FailFirst counters, Chaos draws).

    Every spec sees every call (a ``Targeted`` one only the calls it selects); all that fire on a call apply.
    The same plan over the same calls always makes the same choices.
    """

    def __init__(self, faults: Iterable[Fault | str | Mapping[str, Any]] = ()) -> None:
        self.faults: tuple[Fault, ...] = tuple(parse_faults(faults))
        self.calls = 0
        """How many calls ``select`` has seen."""
        self._selectors = [_Selector(fault) for fault in self.faults]

    def __bool__(self) -> bool:
        return bool(self.faults)

    def select(self, options: GenerateOptions) -> ActiveFault | None:
        """Count one ``stream()`` call and return the faults that fire on it, if any."""
        self.calls += 1
        fired = [item for selector in self._selectors if (item := selector.draw(options, self.calls)) is not None]
        return ActiveFault(fired, call=self.calls) if fired else None

    def reset(self) -> None:
        """Forget every call, as if the plan were new."""
        self.calls = 0
        self._selectors = [_Selector(fault) for fault in self.faults]


# -- application -------------------------------------------------------------------------------


def _http_error(item: FiredFault) -> LlmError:
    fault = item.fault
    assert isinstance(fault, HttpError)
    text = fault.message or "provider error"
    return LlmError(
        f"HTTP {fault.status}: {text} [{item.label}]",
        ErrorCode.PROVIDER_HTTP_ERROR,
        status=fault.status,
        retry_after=fault.retry_after,
    )


def _aborted(item: FiredFault, where: str) -> LlmError:
    return LlmError(f"connection dropped {where} [{item.label}]", ErrorCode.STREAM_ABORTED)


def _apply(
    item: FiredFault,
    chunks: AsyncIterator[StreamChunk],
    signal: AbortSignal | None,
    delayed: Callable[[float], None],
) -> AsyncIterator[StreamChunk]:
    fault = item.fault
    match fault:
        case HttpError():
            return _http(item, chunks)
        case Disconnect():
            return _disconnect(item, fault, chunks)
        case Stall():
            return _stall(fault, chunks, signal, delayed)
        case Latency():
            return _latency(fault, chunks, signal, delayed)
        case Truncate():
            return _truncate(fault, chunks)
        case Corrupt():
            return _corrupt(item, fault, chunks)


async def _http(item: FiredFault, chunks: AsyncIterator[StreamChunk]) -> AsyncIterator[StreamChunk]:
    try:
        raise _http_error(item)
        yield  # pragma: no cover - makes this an async generator
    finally:
        await aclose_stream(chunks)


async def _disconnect(
    item: FiredFault, fault: Disconnect, chunks: AsyncIterator[StreamChunk]
) -> AsyncIterator[StreamChunk]:
    loop = asyncio.get_running_loop()
    deadline = None if fault.after_s is None else loop.time() + fault.after_s
    yielded = 0
    content_bytes = 0
    in_target = False
    try:
        while True:
            if fault.after_chunks is not None and yielded >= fault.after_chunks:
                raise _aborted(item, f"after {yielded} chunk(s)")
            if deadline is not None and loop.time() >= deadline:
                raise _aborted(item, f"after {fault.after_s:g}s")
            try:
                if deadline is None:
                    chunk = await anext(chunks)
                else:
                    async with asyncio.timeout_at(deadline):
                        chunk = await anext(chunks)
            except StopAsyncIteration:
                raise _aborted(item, f"at the end of the stream, after {yielded} chunk(s)") from None
            except TimeoutError:
                raise _aborted(item, f"after {fault.after_s:g}s") from None
            if isinstance(chunk, Finish):
                raise _aborted(item, f"before the finish chunk, after {yielded} chunk(s)")
            if fault.inside is not None:
                if isinstance(chunk, BlockStart) and chunk.block_type == fault.inside:
                    in_target = True
                elif in_target and isinstance(chunk, BlockEnd):
                    raise _aborted(item, f"inside {fault.inside} block {chunk.index}")
            yield chunk
            yielded += 1
            if fault.after_bytes is not None:
                content_bytes += _content_bytes(chunk)
                if content_bytes >= fault.after_bytes:
                    raise _aborted(item, f"after {content_bytes} byte(s) of content, {yielded} chunk(s)")
            if in_target and isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
                raise _aborted(item, f"inside {fault.inside} block {chunk.index}, after {yielded} chunk(s)")
    finally:
        await aclose_stream(chunks)


def _content_bytes(chunk: StreamChunk) -> int:
    if type(chunk) is TextDelta or type(chunk) is ReasoningDelta:
        return len(chunk.text.encode())
    if type(chunk) is ToolCallDelta:
        return len(chunk.arguments_delta.encode())
    return 0


async def _stall(
    fault: Stall, chunks: AsyncIterator[StreamChunk], signal: AbortSignal | None, delayed: Callable[[float], None]
) -> AsyncIterator[StreamChunk]:
    position = 0
    try:
        async for chunk in chunks:
            if position == fault.after_chunks:
                await abort.sleep(fault.seconds, signal)
                delayed(fault.seconds)
            yield chunk
            position += 1
        if position <= fault.after_chunks:
            await abort.sleep(fault.seconds, signal)
    finally:
        await aclose_stream(chunks)


async def _latency(
    fault: Latency, chunks: AsyncIterator[StreamChunk], signal: AbortSignal | None, delayed: Callable[[float], None]
) -> AsyncIterator[StreamChunk]:
    rng = random.Random(fault.seed)
    first = True
    try:
        async for chunk in chunks:
            delay = fault.first_chunk_s if first else fault.between_s
            if fault.jitter_s:
                delay += rng.uniform(0, fault.jitter_s)
            first = False
            if delay > 0:
                await abort.sleep(delay, signal)
                delayed(delay)
            yield chunk
    finally:
        await aclose_stream(chunks)


async def _truncate(fault: Truncate, chunks: AsyncIterator[StreamChunk]) -> AsyncIterator[StreamChunk]:
    count = 0
    try:
        async for chunk in chunks:
            if count >= fault.after_chunks or isinstance(chunk, UsageChunk | Finish):
                return
            yield chunk
            count += 1
    finally:
        await aclose_stream(chunks)


# -- corruption --------------------------------------------------------------------------------


def _delta_like(chunk: StreamChunk | BlockStart, index: int, text: str) -> StreamChunk:
    """A delta of the same block type as ``chunk``'s block, carrying ``index``."""
    block_type = chunk.block_type if isinstance(chunk, BlockStart) else None
    if isinstance(chunk, ToolCallDelta) or block_type == "tool-call":
        return ToolCallDelta(index=index, id=CallId("call_interleaved"), name="interleaved", arguments_delta="{}")
    if isinstance(chunk, ReasoningDelta) or block_type == "reasoning":
        return ReasoningDelta(index=index, text=text)
    return TextDelta(index=index, text=text)


class _Corrupter:
    """Rewrites a valid stream, chunk by chunk, so that it breaks exactly the rule its kind names."""

    def __init__(self, item: FiredFault, fault: Corrupt) -> None:
        self.item = item
        self.kind = fault.kind
        rng = random.Random(fault.seed)
        self.variant = rng.randrange(3)
        self.after_deltas = rng.randrange(1, 4)
        self.junk = rng.choice((",", "}", '"', "{"))
        self.done = False
        self.next_index = 0
        self.open: BlockStart | None = None
        self.deltas = 0
        self.held_usage: UsageChunk | None = None

    def _note(self) -> str:
        return self.item.label

    def _finish(self) -> Finish:
        return Finish(reason=FinishReason(kind="stop", detail=self._note()))

    def feed(self, chunk: StreamChunk) -> list[StreamChunk]:
        """The chunks to emit in place of ``chunk``."""
        out = self._feed(chunk) if not self.done else [chunk]
        if isinstance(chunk, BlockStart):
            self.open, self.deltas = chunk, 0
        elif isinstance(chunk, BlockEnd):
            self.open = None
            self.next_index = chunk.index + 1
        elif isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
            self.deltas += 1
        return out

    def end(self) -> list[StreamChunk]:
        """The chunks to emit when the stream ends without having been corrupted yet."""
        if self.done:
            return []
        if self.kind in ("finish-not-last", "usage-after-finish", "duplicate-finish"):
            return self._tail(self._finish())  # the source never finished: corrupt around a finish of our own
        return self._before_tail()

    def _before_tail(self) -> list[StreamChunk]:
        """Structural corruptions for a stream that had no suitable block: inject one before usage/finish."""
        self.done = True
        index = self.next_index
        match self.kind:
            case "unpaired-block":
                return [BlockEnd(index=index, block=TextBlock(text=""))]
            case "bad-index":
                return [BlockStart(index=index + 1, block_type="text")]
            case "interleaved":
                return [BlockStart(index=index, block_type="text"), TextDelta(index=index + 1, text=self._note())]
            case "bad-arguments-json":
                arguments = '{"broken":'
                call_id = CallId("call_corrupt")
                return [
                    BlockStart(index=index, block_type="tool-call"),
                    ToolCallDelta(index=index, id=call_id, name="corrupt", arguments_delta=arguments),
                    BlockEnd(index=index, block=ToolCallBlock(id=call_id, name="corrupt", arguments=arguments)),
                ]
            case _:
                return []

    def _feed(self, chunk: StreamChunk) -> list[StreamChunk]:
        kind = self.kind
        if kind in ("finish-not-last", "usage-after-finish", "duplicate-finish"):
            return self._tail(chunk)
        if isinstance(chunk, UsageChunk | Finish) and self.open is None:
            return [*self._before_tail(), chunk]
        match kind:
            case "unpaired-block":
                if self.variant == 0 and not self.open and isinstance(chunk, BlockStart):
                    # A block-end with no block-start, right before the first block.
                    self.done = True
                    return [BlockEnd(index=chunk.index, block=TextBlock(text="")), chunk]
                if isinstance(chunk, BlockEnd):
                    self.done = True  # drop the first block-end: its block never closes
                    return []
            case "bad-index":
                if self.variant == 0 and isinstance(chunk, BlockStart):
                    self.done = True
                    return [msgspec.structs.replace(chunk, index=chunk.index + 1)]
                if self.variant == 1 and isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta):
                    self.done = True
                    return [msgspec.structs.replace(chunk, index=chunk.index + 1)]
                if self.variant != 0 and isinstance(chunk, BlockEnd):
                    self.done = True
                    return [msgspec.structs.replace(chunk, index=chunk.index + 1)]
            case "interleaved":
                if self.open is not None and isinstance(chunk, BlockEnd):
                    self.done = True  # the block ended before enough deltas: interleave right here
                    return [_delta_like(self.open, chunk.index + 1, self._note()), chunk]
                if (
                    isinstance(chunk, TextDelta | ReasoningDelta | ToolCallDelta)
                    and self.deltas + 1 >= self.after_deltas
                ):
                    self.done = True
                    return [chunk, _delta_like(chunk, chunk.index + 1, self._note())]
            case "bad-arguments-json":
                if isinstance(chunk, BlockEnd) and isinstance(chunk.block, ToolCallBlock):
                    self.done = True
                    block = msgspec.structs.replace(chunk.block, arguments=chunk.block.arguments + self.junk)
                    return [
                        ToolCallDelta(index=chunk.index, arguments_delta=self.junk),
                        BlockEnd(index=chunk.index, block=block),
                    ]
        return [chunk]

    def _tail(self, chunk: StreamChunk) -> list[StreamChunk]:
        match self.kind:
            case "usage-after-finish":
                if isinstance(chunk, UsageChunk):
                    self.held_usage = chunk
                    return []
                if isinstance(chunk, Finish):
                    self.done = True
                    return [chunk, self.held_usage or UsageChunk(usage=TokenUsage(input_tokens=0, output_tokens=0))]
            case "duplicate-finish":
                if isinstance(chunk, Finish):
                    self.done = True
                    return [chunk, chunk]
            case "finish-not-last":
                if isinstance(chunk, Finish):
                    self.done = True
                    trailing: StreamChunk = BlockStart(index=self.next_index, block_type="text")
                    return [chunk, trailing]
        return [chunk]


async def _corrupt(item: FiredFault, fault: Corrupt, chunks: AsyncIterator[StreamChunk]) -> AsyncIterator[StreamChunk]:
    corrupter = _Corrupter(item, fault)
    try:
        async for chunk in chunks:
            for out in corrupter.feed(chunk):
                yield out
        for out in corrupter.end():
            yield out
    finally:
        await aclose_stream(chunks)
